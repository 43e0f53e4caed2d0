import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from mtsql.base.artifacts import ArtifactKey, Store, fingerprint, verify
from mtsql.base.errors import UsageError


def _work(records):
    def work(ctx):
        (ctx.out / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        return {"n": len(records)}

    return work


def test_fingerprint_stable_and_sensitive(tmp_path):
    store = Store(tmp_path)
    base, _ = store.run(ArtifactKey("sample"), {"n": 1}, {}, _work([1]))
    assert fingerprint("sample", {"n": 1}, {}) == fingerprint("sample", {"n": 1}, {}) == base.fingerprint
    assert fingerprint("sample", {"n": 2}, {}) != base.fingerprint
    assert fingerprint("reject", {"n": 1}, {}) != base.fingerprint
    assert fingerprint("reject", {"n": 1}, {"sample": base}) != fingerprint(
        "reject", {"n": 1}, {"sample": "0" * 64}
    )


def test_skip_when_complete_and_force(tmp_path):
    store = Store(tmp_path)
    calls = []

    def work(ctx):
        calls.append(1)
        return _work([1, 2])(ctx)

    first, cached = store.run(ArtifactKey("sample", 1), {"n": 1}, {}, work)
    assert not cached and first.metrics == {"n": 2} and first.manifest["round"] == 1
    again, cached = store.run(ArtifactKey("sample", 1), {"n": 1}, {}, work)
    assert cached and again.path == first.path and len(calls) == 1
    forced, cached = store.run(ArtifactKey("sample", 1), {"n": 1}, {}, work, force=True)
    assert not cached and len(calls) == 2 and forced.path == first.path
    assert (tmp_path / "sample-r1" / "latest").resolve() == first.path.resolve()
    outputs = {o["path"]: o for o in forced.manifest["outputs"]}
    assert outputs["items.jsonl"]["records"] == 2 and "sha256" in outputs["items.jsonl"]


def test_failed_stage_leaves_nothing_complete(tmp_path):
    store = Store(tmp_path)

    def boom(ctx):
        (ctx.out / "half.jsonl").write_text("{}\n")
        raise RuntimeError("engine died")

    with pytest.raises(RuntimeError):
        store.run(ArtifactKey("sft"), {}, {}, boom)
    assert store.artifacts() == []
    fp = fingerprint("sft", {}, {})
    assert store.find("sft", fp) is None
    done, cached = store.run(ArtifactKey("sft"), {}, {}, _work([1]))
    assert not cached and store.find("sft", fp) == done


def test_sigkill_midway_leaves_no_complete_artifact(tmp_path):
    script = textwrap.dedent(f"""
        import time
        from mtsql.base.artifacts import ArtifactKey, Store
        def work(ctx):
            (ctx.out / "shard-0.jsonl").write_text("{{}}\\n")
            print("started", flush=True)
            time.sleep(60)
            return {{}}
        Store({str(tmp_path)!r}).run(ArtifactKey("sample"), {{}}, {{}}, work)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "started"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    store = Store(tmp_path)
    assert store.artifacts() == [] and store.latest("sample") is None
    seen = []

    def resume(ctx):
        seen.append(sorted(p.name for p in ctx.out.iterdir()))
        return {"resumed": True}

    done, cached = store.run(ArtifactKey("sample"), {}, {}, resume)
    assert not cached and "shard-0.jsonl" in seen[0], "the partial folder is handed back so stages can resume"
    assert done.metrics == {"resumed": True}


def test_verify_and_hand_edited_manifest(tmp_path):
    store = Store(tmp_path)
    art, _ = store.run(ArtifactKey("sample"), {}, {}, _work([1]))
    assert verify(art) == []
    (art.path / "items.jsonl").write_text("tampered\n")
    assert any("changed" in p for p in verify(art))
    (art.path / "manifest.json").write_text("{not json")
    with pytest.raises(UsageError, match="damaged manifest"):
        store.artifacts()


@pytest.mark.timeout(120)  # a lock that waited instead of refusing would wait for itself forever
def test_lock_refuses_concurrent_run(tmp_path):
    store = Store(tmp_path)
    inner = []

    def outer(ctx):
        from mtsql.base.errors import StageFailed

        try:
            store.run(ArtifactKey("sample"), {}, {}, _work([1]))
        except StageFailed as exc:
            inner.append(str(exc))
        return {}

    store.run(ArtifactKey("sample"), {}, {}, outer)
    assert inner and "another mtsql process" in inner[0]


def test_attempts_total_duration_and_error_line_are_kept(tmp_path, monkeypatch):
    """A failed attempt's log names its error; the manifest keeps every attempt and their total time."""
    from mtsql.base.errors import StageFailed

    store = Store(tmp_path)
    now = [time.time()]
    monkeypatch.setattr(time, "time", lambda: now[0])  # a clock that moves only when the stage works

    def fails(ctx):
        (ctx.out / "shard-0.jsonl").write_text(
            "{}\n"
        )  # work done before the failure, kept for the next attempt
        now[0] += 2.5
        raise StageFailed("the engine died")

    with pytest.raises(StageFailed):
        store.run(ArtifactKey("sample"), {"n": 1}, {}, fails)
    partial = next(tmp_path.glob("sample/*.partial"))
    assert "=== failed: StageFailed: the engine died" in (partial / "log.txt").read_text()
    done, _ = store.run(ArtifactKey("sample"), {"n": 1}, {}, _work([1]))
    attempts = done.manifest["attempts"]
    assert [a["outcome"] for a in attempts] == ["failed: StageFailed", "complete"]
    assert [a["duration_s"] for a in attempts] == [2.5, 0.0]
    assert done.manifest["duration_s"] == 2.5
    assert "attempts.json" not in {entry["path"] for entry in done.manifest["outputs"]}
    assert "=== failed: StageFailed: the engine died" in (done.path / "log.txt").read_text()


def test_bad_input_found_before_any_work_leaves_no_partial(tmp_path):
    store = Store(tmp_path)

    def bad_input(ctx):
        raise UsageError("db.sqlite: not a readable SQLite database")

    with pytest.raises(UsageError):
        store.run(ArtifactKey("sample"), {"n": 1}, {}, bad_input)
    assert not list(tmp_path.glob("sample/*.partial"))

    def bad_input_after_work(ctx):
        (ctx.out / "shard-0.jsonl").write_text("{}\n")
        raise UsageError("db.sqlite: not a readable SQLite database")

    with pytest.raises(UsageError):
        store.run(ArtifactKey("sample"), {"n": 1}, {}, bad_input_after_work)
    assert (next(tmp_path.glob("sample/*.partial")) / "shard-0.jsonl").exists()  # work to resume from

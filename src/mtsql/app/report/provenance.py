"""Report section on provenance: code, packages, machine, seeds and data of each stage, and its cost.

Everything comes from the artifacts' manifests (``code``, ``packages``, ``hardware``,
``duration_s``) and the ``config.yaml`` each stage ran with. Values shared by every stage are
stated once; values that differ are listed with the stages they belong to.
"""

from __future__ import annotations

from collections.abc import Callable

from mtsql.app.report.markdown import table
from mtsql.app.report.runs import evaluation_of, stage_config
from mtsql.app.status import duration, pipeline_order
from mtsql.base.artifacts import Artifact


def _grouped(
    arts: dict[str, Artifact], describe: Callable[[Artifact], str | None]
) -> list[tuple[str, list[str]]]:
    """Distinct descriptions and the labels that have each, in pipeline order."""
    groups: dict[str, list[str]] = {}
    for label in sorted(arts, key=lambda label: pipeline_order(arts[label].key)):
        text = describe(arts[label])
        if text is not None:
            groups.setdefault(text, []).append(label)
    return list(groups.items())


def _line(name: str, groups: list[tuple[str, list[str]]], total: int) -> list[str]:
    if not groups:
        return [f"* {name}: not recorded"]
    if len(groups) == 1 and len(groups[0][1]) == total:
        return [f"* {name}: {groups[0][0]}"]
    return [f"* {name}:"] + [f"  * {text} ({', '.join(labels)})" for text, labels in groups]


def _code(art: Artifact) -> str:
    code = art.manifest.get("code") or {}
    commit = code.get("git_commit")
    state = {True: "dirty: uncommitted edits", False: "clean", None: "edits unknown"}[code.get("dirty")]
    return f"mtsql {code.get('version')}, " + (
        f"git {commit[:12]} ({state})" if commit else "not a git checkout"
    )


def _packages(art: Artifact) -> str | None:
    packages = art.manifest.get("packages")
    if not packages:
        return None
    return ", ".join(f"{name} {version or 'not installed'}" for name, version in packages.items())


def _hardware(art: Artifact) -> str:
    hw = art.manifest.get("hardware")
    if not hw:
        return "not recorded (made before mtsql recorded it)"
    gpus = ", ".join(hw.get("gpus") or []) or "no GPU"
    return f"{hw.get('cpu')} ({hw.get('cores')} cores, {hw.get('memory_gb')} GB), {gpus}"


def _seeds(art: Artifact) -> str | None:
    config = stage_config(art)
    seeds = dict(_find(config, "seed"))
    return ", ".join(f"{path} = {value}" for path, value in sorted(seeds.items())) or None


def _find(node, key: str, prefix: str = ""):
    if isinstance(node, dict):
        for name, value in node.items():
            if name == key and not isinstance(value, dict):
                yield prefix + name, value
            else:
                yield from _find(value, key, f"{prefix}{name}.")


def _data(art: Artifact) -> str | None:
    data = stage_config(art).get("data")
    if not data:
        return None
    train = f"{data.get('train_dataset')} {data.get('train_split')}" + _limit(data.get("train_limit"))
    evals = f"{', '.join(data.get('eval_datasets') or [])} {data.get('eval_split')}" + _limit(
        data.get("eval_limit"), data.get("eval_pick", "first")
    )
    return f"train: {train}; eval: {evals}"


def _limit(limit, pick: str = "first") -> str:
    if limit is None:
        return " (all)"
    return f" (first {limit})" if pick == "first" else f" ({limit} spread over databases)"


def provenance_section(arts: dict[str, Artifact]) -> list[str]:
    total = len(arts)
    lines = ["## Provenance", ""]
    lines += _line("code", _grouped(arts, _code), total)
    lines += _line("packages", _grouped(arts, _packages), total)
    lines += _line("hardware", _grouped(arts, _hardware), total)
    lines += _line("seeds (from each stage's config.yaml)", _grouped(arts, _seeds), total)
    lines += _line("data slices", _grouped(arts, _data), total)
    lines += ["", "Wall time of each stage (its newest artifact; cached reruns cost nothing):", ""]
    rows, seconds = [], 0.0
    for label in sorted(arts, key=lambda label: pipeline_order(arts[label].key)):
        art = arts[label]
        tokens = (
            sum(block.generated_tokens for block in evaluation_of(art).datasets.values())
            if art.key.stage == "evaluate"
            else art.metrics.get("generated_tokens")
        )
        seconds += art.manifest.get("duration_s") or 0.0
        rows.append(
            [
                label,
                art.manifest["stage"],
                art.manifest.get("created_at", "")[:16].replace("T", " "),
                duration(art.manifest.get("duration_s")),
                tokens or None,
                art.fingerprint[:12],
            ]
        )
    rows.append(["**total**", "", "", duration(seconds), "", ""])
    return lines + table(
        ["artifact", "stage", "created (UTC)", "wall time", "generated tokens", "fingerprint"],
        rows,
        numeric_from=3,
    )

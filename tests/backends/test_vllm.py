"""The vllm backend against real vLLM servers (vLLM's CPU build in .venv-vllm, float32): the same
greedy ids and log-probs as the hf backend, seeds, new weights, the OpenAI client, and no server
left behind when a stage ends, fails or is killed."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from mtsql.app.config import load_config
from mtsql.base.errors import UsageError
from mtsql.core.chat_format import ChatFormat
from mtsql.engines.backends import engine_identity, make_backend
from mtsql.engines.backends.base import SamplingParams
from mtsql.engines.backends.openai import OpenAIBackend
from mtsql.engines.backends.vllm import UNVERIFIED, VLLMBackend, server_spec
from mtsql.engines.backends.vllm_server import SERVED_NAME, signal_group

from ..waiting import wait_until

TOOL_STOP = ("</tool_call>", "</answer_sql>")


def chat_prompts(tokenizer, count: int = 6) -> list[list[int]]:
    chat = ChatFormat(tokenizer)
    return [
        chat.prompt_ids(
            [
                {"role": "system", "content": "You answer with SQL inside <answer_sql> tags."},
                {"role": "user", "content": f"How many singers are older than {20 + i}?"},
            ]
        )
        for i in range(count)
    ]


def assert_same_generations(served, reference, *, logprob_tolerance: float) -> None:
    for a, b in zip(served, reference, strict=True):
        assert (a.token_ids, a.finish_reason, a.text) == (b.token_ids, b.finish_reason, b.text)
        assert len(a.logprobs) == len(b.logprobs) == len(a.token_ids)
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < logprob_tolerance


def group_alive(pgid: int) -> bool:
    return signal_group(pgid, 0)


def wait_gone(pgid: int, seconds: float = 60.0) -> None:
    wait_until(lambda: not group_alive(pgid), seconds, f"process group {pgid} did not end", every=0.5)


def test_tiny_model_greedy_ids_and_logprobs_match_the_hf_backend(tiny_server, tiny_backend):
    params = SamplingParams(temperature=0.0, max_new_tokens=24, stop=TOOL_STOP, logprobs=True)
    prompts = chat_prompts(tiny_backend.tokenizer)
    assert_same_generations(
        tiny_server.generate(prompts, params), tiny_backend.generate(prompts, params), logprob_tolerance=1e-3
    )


def test_smollm2_greedy_ids_match_and_close_stops_every_server_process(smollm2, vllm_python, tmp_path):
    from mtsql.engines.backends.hf import HFBackend

    backend = VLLMBackend(
        smollm2, python=str(vllm_python), dtype="float32", kv_cache_gib=1, log_path=tmp_path / "server.log"
    )
    pgid = backend.server.process.pid
    try:
        params = SamplingParams(temperature=0.0, max_new_tokens=40, stop=TOOL_STOP, logprobs=True)
        prompts = chat_prompts(backend.tokenizer, 4)
        assert_same_generations(
            backend.generate(prompts, params),
            HFBackend(smollm2, dtype="float32").generate(prompts, params),
            logprob_tolerance=1e-3,
        )
    finally:
        backend.close()
    assert not group_alive(pgid)  # the API server, its engine core and its worker
    assert "Application startup complete" in (tmp_path / "server.log").read_text()  # logged where asked


def test_sampling_depends_on_the_seed_only(tiny_server):
    prompts = chat_prompts(tiny_server.tokenizer, 3)
    params = SamplingParams(temperature=1.0, max_new_tokens=12)
    first = tiny_server.generate(prompts, params, seeds=[5, 6, 7])
    again = tiny_server.generate(list(reversed(prompts)), params, seeds=[7, 6, 5])
    assert [g.token_ids for g in first] == [g.token_ids for g in reversed(again)]
    other = tiny_server.generate(prompts, params, seeds=[8, 9, 10])
    assert [g.token_ids for g in first] != [g.token_ids for g in other]


def test_seeded_sampling_of_prompts_longer_than_one_prefill_batch(tiny_server):
    """Round-2 sampling sends many seeded requests of ~1,500 tokens at once. Where vLLM splits a prompt
    over steps (chunked prefill: 2,048 tokens a step), it rewinds the request's random generator, which
    a CPU generator cannot do: the engine died ("CPU Generator does not use offset"). On CPU the server
    prefills every prompt whole, so each of these requests is answered."""

    def schema(db: int) -> str:  # a prompt of its own: no prefix cached from another one
        return " ".join(f"table t{db}_{i} has columns c{i}_a, c{i}_b and c{i}_c." for i in range(90))

    chat = ChatFormat(tiny_server.tokenizer)
    prompts = [
        chat.prompt_ids(
            [
                {"role": "system", "content": schema(db)},
                {"role": "user", "content": "How many rows does the first table have?"},
            ]
        )
        for db in range(6)
    ]
    assert min(len(p) for p in prompts) > 1000 and sum(len(p) for p in prompts) > 2 * 2048
    params = SamplingParams(temperature=0.7, max_new_tokens=4)
    done = tiny_server.generate(prompts, params, seeds=list(range(6)))
    assert [len(g.token_ids) for g in done] == [4] * 6
    again = tiny_server.generate(prompts[::-1], params, seeds=list(range(6))[::-1])
    assert [g.token_ids for g in done] == [g.token_ids for g in again[::-1]]


def test_the_openai_backend_works_against_the_real_server(tiny_server, tiny_qwen3):
    client = OpenAIBackend(tiny_qwen3, tiny_server.base_url, served_model=SERVED_NAME, concurrency=4)
    try:
        params = SamplingParams(temperature=0.0, max_new_tokens=16, stop=TOOL_STOP, logprobs=True)
        prompts = chat_prompts(client.tokenizer, 3)
        assert_same_generations(
            client.generate(prompts, params), tiny_server.generate(prompts, params), logprob_tolerance=1e-6
        )
    finally:
        client.close()
    with pytest.raises(UsageError, match=rf"serves {SERVED_NAME}, not 'qwen3-4b'"):
        OpenAIBackend(tiny_qwen3, tiny_server.base_url, served_model="qwen3-4b")


def test_the_server_renders_chats_as_mtsql_does(tiny_server):
    """What /v1/chat/completions would see is the prompt mtsql builds (the model's chat template)."""
    messages = [
        {"role": "system", "content": "Answer in SQL."},
        {"role": "user", "content": "How many pets?"},
        {"role": "assistant", "content": "<answer_sql>SELECT count(*) FROM pets</answer_sql>"},
        {"role": "user", "content": "And dogs?"},
    ]
    answer = httpx.post(
        tiny_server.base_url.removesuffix("/v1") + "/tokenize",
        timeout=30,
        json={"model": SERVED_NAME, "messages": messages, "add_generation_prompt": True},
    )
    assert answer.status_code == 200
    assert answer.json()["tokens"] == ChatFormat(tiny_server.tokenizer).prompt_ids(messages)


def test_load_weights_serves_new_weights_as_a_fresh_model_would(tiny_qwen3, vllm_python, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from mtsql.engines.backends.hf import HFBackend

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen3, dtype=torch.float32)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param, generator=torch.Generator().manual_seed(1)) * 0.05)
    backend = VLLMBackend(
        tiny_qwen3, python=str(vllm_python), dtype="float32", kv_cache_gib=1, log_path=tmp_path / "server.log"
    )
    first = backend.server.process.pid
    try:
        params = SamplingParams(temperature=0.0, max_new_tokens=12, logprobs=True)
        prompts = chat_prompts(backend.tokenizer, 2)
        before = backend.generate(prompts, params)
        backend.load_weights(model, tmp_path / "updated")
        second = backend.server.process.pid
        after = backend.generate(prompts, params)
    finally:
        backend.close()
    assert second != first and not group_alive(first) and not group_alive(second)  # restarted, both stopped
    assert [g.token_ids for g in after] != [g.token_ids for g in before]
    assert_same_generations(
        after,
        HFBackend(tmp_path / "updated", dtype="float32").generate(prompts, params),
        logprob_tolerance=1e-3,
    )


KEEP_SERVING = """
import sys, time
from mtsql.engines.backends.vllm import VLLMBackend
backend = VLLMBackend(sys.argv[1], python=sys.argv[2], dtype="float32", kv_cache_gib=1)
print("PGID", backend.server.process.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_process_leaves_no_server(how, tiny_qwen3, vllm_python):
    child = subprocess.Popen(
        [sys.executable, "-c", KEEP_SERVING, str(tiny_qwen3), str(vllm_python)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = child.stdout.readline()
        assert line.startswith("PGID"), f"the server did not start: {line!r}"
        pgid = int(line.split()[1])
        assert group_alive(pgid)
        child.send_signal(how)
        child.wait(30)
        wait_gone(pgid)  # the vLLM server must not outlive the process that started it
    finally:
        child.kill()


def test_a_server_that_cannot_start_is_one_line_with_its_log(tmp_path, vllm_python):
    with pytest.raises(Exception, match=r"exited with code \d+ before it was ready: .*\(log: ") as caught:
        VLLMBackend(tmp_path, python=str(vllm_python), log_path=tmp_path / "server.log")  # no model there
    assert type(caught.value).__name__ == "StageFailed"


class ApiProcess:
    """A server's API process as ``ManagedServer.failure`` sees it: one that keeps running, or one that
    exits once waited for; every wait is recorded."""

    def __init__(self, exits: bool):
        self.exits, self.waits = exits, []

    def wait(self, timeout=None):
        self.waits.append(timeout)
        if not self.exits:
            raise subprocess.TimeoutExpired("vllm", timeout)
        return 1

    def poll(self):
        return 1 if self.exits else None


def test_a_dead_engine_is_named_before_its_server_exits(tmp_path):
    """When vLLM's engine dies its API server takes seconds to exit, and the client's retries end first:
    the error names the engine's cause without waiting for the process, not a refused connection; a live
    server with no such cause is not blamed."""
    from mtsql.engines.backends.vllm_server import ManagedServer, ServerSpec

    log = tmp_path / "server.log"
    server = ManagedServer(ServerSpec("m", sys.executable), log)
    server.process = running = ApiProcess(exits=False)
    log.write_text("INFO started\n")
    assert server.failure(wait_s=0.2) is None and running.waits == [0.2]
    log.write_text(
        "ERROR [core.py:1512] RuntimeError: CPU Generator does not use offset\n"
        "ERROR [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: "
        "EngineCore encountered an issue\n"
    )
    assert "RuntimeError: CPU Generator does not use offset" in server.failure(wait_s=30)
    assert running.waits == [0.2], "a dead engine is named at once, not after waiting for its API process"
    log.write_text("ERROR ValueError: no model\n")
    server.process = exiting = ApiProcess(exits=True)  # shutting down
    assert "ValueError: no model" in server.failure(wait_s=30) and exiting.waits == [30]


def test_engine_identity_names_what_changes_tokens(vllm_python):
    cfg = load_config(
        None, ["sample.backend=vllm", f"sample.vllm.python={vllm_python}", "model.dtype=float32"]
    )
    identity = engine_identity(cfg)
    assert identity["engine"] == "vllm-server" and identity["version"].startswith("vllm")
    assert identity["dtype"] == "float32" and identity["eager"] is True
    assert identity["chunked_prefill"] is False  # a CPU server prefills prompts whole (seeded sampling)
    assert (
        engine_identity(
            load_config(
                None, ["sample.backend=vllm", f"sample.vllm.python={vllm_python}", "model.dtype=bfloat16"]
            )
        )
        != identity
    )
    assert (
        engine_identity(
            load_config(
                None,
                [
                    "sample.backend=vllm",
                    f"sample.vllm.python={vllm_python}",
                    "model.dtype=float32",
                    "sample.vllm.kv_cache_gib=3",
                ],
            )
        )
        == identity
    )
    user = engine_identity(load_config(None, ["sample.backend=vllm", "sample.vllm.base_url=http://h:1/v1"]))
    assert user == {
        "engine": "vllm-server",
        "base_url": "http://h:1/v1",
        "served_model": None,
        "note": UNVERIFIED,
    }
    assert engine_identity(load_config(None, ["sample.backend=hf"])) == {}


def test_no_vllm_is_a_usage_error_with_the_fix(tmp_path):
    with pytest.raises(UsageError, match=r"sample.vllm.python=.*not an executable file"):
        make_backend("vllm", "model", python=str(tmp_path / "missing"))
    assert server_spec(Path("m"), python=sys.executable, device="cuda").eager is False


@pytest.mark.parametrize(("fast_bf16", "cpu_dtype"), [(True, "bfloat16"), (False, "float32")])
def test_auto_dtype_is_bfloat16_where_the_cpu_multiplies_it_natively(monkeypatch, fast_bf16, cpu_dtype):
    monkeypatch.setattr("mtsql.engines.backends.vllm.cpu_has_fast_bf16", lambda: fast_bf16)
    assert server_spec(Path("m"), python=sys.executable).dtype == cpu_dtype
    assert server_spec(Path("m"), python=sys.executable, device="cuda").dtype == "bfloat16"
    assert server_spec(Path("m"), python=sys.executable, dtype="float32").dtype == "float32"


def test_a_cpu_server_runs_its_engine_in_process_on_every_core(monkeypatch):
    for name in ("VLLM_ENABLE_V1_MULTIPROCESSING", "OMP_NUM_THREADS", "VLLM_CPU_OMP_THREADS_BIND"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 4)
    env = server_spec(Path("m"), python=sys.executable, kv_cache_gib=2).environment()
    assert (
        env["VLLM_ENABLE_V1_MULTIPROCESSING"],
        env["OMP_NUM_THREADS"],
        env["VLLM_CPU_OMP_THREADS_BIND"],
    ) == ("0", "4", "0-3")
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # a user's setting wins
    assert server_spec(Path("m"), python=sys.executable).environment()["OMP_NUM_THREADS"] == "1"
    assert (
        "VLLM_ENABLE_V1_MULTIPROCESSING"
        not in server_spec(Path("m"), python=sys.executable, device="cuda").environment()
    )

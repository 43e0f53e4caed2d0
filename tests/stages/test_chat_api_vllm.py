"""`mtsql evaluate sample.backend=chat` against a real vLLM server's /v1/chat/completions (the tiny Qwen3,
whose chat template renders a chat as mtsql's format does): the same metrics as the token-id backends,
the same first messages, usage and cost in the metrics and the report, and the key in no file of the run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mtsql.base.files import read_jsonl
from mtsql.engines.backends.vllm_server import SERVED_NAME

from ..inprocess import mtsql_in_process

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "configs" / "profiles" / "tiny.yaml"
KEY = "sk-mtsql-acceptance-4f9c2d7e1b"
PRICES = (0.5, 2.0)  # USD per million prompt / completion tokens
# What the token path asks vLLM for beyond the sampling settings: special tokens kept in the text, and a
# stop at either end-of-turn id of the tiny Qwen3 (<|im_end|>, <|endoftext|>: the managed server reads no
# generation config).
SAME_AS_TOKENS = (
    "{skip_special_tokens: false, spaces_between_special_tokens: false, stop_token_ids: [151643, 151645]}"
)


def evaluate(runs: Path, tiny_qwen3, label: str, *overrides: str):
    args = [
        "evaluate",
        "--config",
        str(TINY),
        "--label",
        label,
        f"runs_dir={runs}",
        f"model.name={tiny_qwen3}",
        "model.dtype=float32",
        "data.eval_limit=2",
        "env.max_messages=2",
        "sample.max_new_tokens=24",
        *overrides,
    ]
    return mtsql_in_process(args, env={**os.environ, "MTSQL_TEST_CHAT_KEY": KEY, "COLUMNS": "200"})


def first_messages(folder: Path, dataset: str) -> dict[str, str]:
    rows = read_jsonl(folder / dataset / "trajectories.jsonl")
    return {
        row["key"]: next(m["content"] for m in row["trajectory"]["messages"] if m["role"] == "assistant")
        for row in rows
    }


def test_a_chat_api_evaluation_scores_like_the_token_backends_and_keeps_no_key(
    tmp_path, tiny_qwen3, tiny_server
):
    runs = tmp_path / "runs"
    chat = evaluate(
        runs,
        tiny_qwen3,
        "eval-chat",
        "sample.backend=chat",
        f"sample.chat.base_url={tiny_server.base_url}",
        f"sample.chat.model={SERVED_NAME}",
        "sample.chat.api_key_env=MTSQL_TEST_CHAT_KEY",
        "sample.chat.observation_role=tool",
        f"sample.chat.extra_body={SAME_AS_TOKENS}",
        f"sample.chat.price_input_per_mtok={PRICES[0]}",
        f"sample.chat.price_output_per_mtok={PRICES[1]}",
    )
    assert chat.returncode == 0, chat.stderr
    tokens = evaluate(
        runs,
        tiny_qwen3,
        "eval-tokens",
        "sample.backend=vllm",
        f"sample.vllm.base_url={tiny_server.base_url}",
        f"sample.vllm.model={SERVED_NAME}",
    )
    assert tokens.returncode == 0, tokens.stderr
    run = next(runs.iterdir())
    chat_dir, token_dir = (run / "eval-chat" / "latest").resolve(), (run / "eval-tokens" / "latest").resolve()
    chat_metrics = json.loads((chat_dir / "metrics.json").read_text())
    token_metrics = json.loads((token_dir / "metrics.json").read_text())
    assert chat_metrics["datasets"].keys() == token_metrics["datasets"].keys() == {"cosql", "sparc"}
    for name, block in chat_metrics["datasets"].items():
        assert block.keys() == token_metrics["datasets"][name].keys()
        assert block["turns"] == token_metrics["datasets"][name]["turns"] > 0
        # Greedy, on a prompt the server renders as mtsql does: the first message of every turn is the same.
        assert first_messages(chat_dir, name) == first_messages(token_dir, name)
        assert block["cost"]["prompt_tokens"] > 0 and block["cost"]["generated_tokens"] > 0

    usage = chat_metrics["usage"]
    assert (
        usage["model"] == SERVED_NAME and usage["base_url"] == tiny_server.base_url and usage["requests"] > 0
    )
    assert usage["cost_usd"] == pytest.approx(
        (usage["prompt_tokens"] * PRICES[0] + usage["completion_tokens"] * PRICES[1]) / 1e6
    )
    assert token_metrics["usage"] is None
    # The fingerprint covers the model, the URL and the sampling settings; the key's variable is operational.
    config = (chat_dir / "config.yaml").read_text()
    assert SERVED_NAME in config and tiny_server.base_url in config

    report = mtsql_in_process(["report", str(run)], env={**os.environ, "COLUMNS": "200"})
    assert report.returncode == 0, report.stderr
    text = (run / "report" / "report.md").read_text()
    assert "Chat-API evaluations" in text and f"{usage['cost_usd']:.4f}" in text

    leaked = [path for path in runs.rglob("*") if path.is_file() and KEY.encode() in path.read_bytes()]
    assert leaked == [], "the API key was written into the run"
    assert KEY not in chat.stdout + chat.stderr + report.stdout + report.stderr

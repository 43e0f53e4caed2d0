"""The chat-API backend against a real HTTP server on 127.0.0.1 (stdlib, in a thread): the messages it
sends, the text it hands back, retries of 429 / 5xx, one line for other 4xx, usage and cost, and the key
kept out of every message. Against a real vLLM chat endpoint: tests/stages/test_chat_api_vllm.py."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler

import pytest

from mtsql.base.errors import StageFailed, UsageError
from mtsql.engines.backends.base import SamplingParams
from mtsql.engines.backends.chat import ChatBackend, api_messages, reply_text

from ..local_server import start_server, stop_server

KEY = "sk-test-0123456789abcdefXYZ"
STOP = ("</tool_call>", "</answer_sql>")
PARAMS = SamplingParams(temperature=0.0, max_new_tokens=32, stop=STOP)
CHAT = [{"role": "system", "content": "Answer in SQL."}, {"role": "user", "content": "How many pets?"}]


def completion(content: str, finish_reason: str = "stop", usage=(100, 7), **choice) -> dict:
    body = {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish_reason,
                **choice,
            }
        ]
    }
    if usage:
        body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    return body


class Server:
    """POST /v1/chat/completions answers ``replies`` in turn (status, payload[, headers]), the last one
    again when they run out; requests without ``Bearer KEY`` get 401 when ``key`` is set. GET /v1/models
    lists ``models``."""

    def __init__(self, replies, models=("gpt-test",), key=KEY):
        self.replies, self.requests, self.lock = list(replies), [], threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status, payload, headers=()):
                data = json.dumps(payload).encode()
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _refused(self):
                if key and self.headers.get("Authorization") != f"Bearer {key}":
                    got = self.headers.get("Authorization", "")
                    self._send(401, {"error": {"message": f"Incorrect API key provided: {got[7:]}"}})
                    return True
                return False

            def do_GET(self):
                if not self._refused():
                    self._send(200, {"object": "list", "data": [{"id": m} for m in models]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self._refused():
                    return
                with server.lock:
                    server.requests.append(body)
                    reply = server.replies.pop(0) if len(server.replies) > 1 else server.replies[0]
                self._send(*reply)

            def log_message(self, *args):
                pass

        self.httpd = start_server(Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self):
        stop_server(self.httpd)


@pytest.fixture
def serve(monkeypatch):
    monkeypatch.setenv("MTSQL_TEST_KEY", KEY)
    servers = []

    def start(*replies, **kwargs):
        servers.append(Server(replies, **kwargs))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def client(server, **options) -> ChatBackend:
    return ChatBackend("gpt-test", server.url, api_key_env="MTSQL_TEST_KEY", backoff_s=0.01, **options)


def test_the_tools_are_described_in_the_system_message_and_observations_go_as_the_config_says():
    tools = [{"type": "function", "function": {"name": "exec_sql", "parameters": {}}}]
    conversation = [
        *CHAT,
        {"role": "assistant", "content": '<tool_call>\n{"name": "exec_sql"}\n</tool_call>'},
        {"role": "tool", "content": "3 rows"},
    ]
    as_user = api_messages(conversation, tools)
    assert [m["role"] for m in as_user] == ["system", "user", "assistant", "user"]
    assert (
        as_user[0]["content"].startswith("Answer in SQL.\n\n# Tools")
        and '"name": "exec_sql"' in as_user[0]["content"]
    )
    assert as_user[2]["content"] == conversation[2]["content"]  # the assistant's text as it was written
    assert as_user[3]["content"] == "<tool_response>\n3 rows\n</tool_response>"
    as_tool = api_messages(conversation, tools, "tool")
    assert as_tool[3]["role"] == "tool" and as_tool[3]["content"] == "3 rows" and as_tool[3]["tool_call_id"]


def test_the_reply_text_gets_back_the_stop_string_and_any_tool_call_the_server_parsed():
    assert (
        reply_text({"content": "<answer_sql>SELECT 1"}, "stop", None, STOP)
        == "<answer_sql>SELECT 1</answer_sql>"
    )
    assert reply_text({"content": "<answer_sql>SELECT 1"}, "length", None, STOP) == "<answer_sql>SELECT 1"
    assert (
        reply_text({"content": "<tool_call>\n{}"}, "stop", "</tool_call>", STOP)
        == "<tool_call>\n{}</tool_call>"
    )
    assert reply_text({"content": "done."}, "stop", None, STOP) == "done."  # an end of turn: nothing cut
    parsed = {
        "content": None,
        "tool_calls": [{"function": {"name": "exec_sql", "arguments": '{"sql": "SELECT 1"}'}}],
    }
    assert (
        reply_text(parsed, "tool_calls", None, STOP)
        == '<tool_call>\n{"name": "exec_sql", "arguments": {"sql": "SELECT 1"}}\n</tool_call>'
    )


def test_429_and_5xx_are_retried_and_usage_and_cost_are_summed(serve):
    server = serve(
        (429, {"error": "slow down"}, [("Retry-After", "0")]),
        (503, {"error": "busy"}),
        (200, completion("<answer_sql>SELECT 1")),
        (200, completion("x", usage=(50, 3))),
    )
    backend = client(
        server,
        price_input_per_mtok=2.0,
        price_output_per_mtok=10.0,
        extra_body={"skip_special_tokens": False},
    )
    try:
        first = backend.submit_messages(CHAT, [], PARAMS, seed=5).result()
        second = backend.submit_messages(CHAT, [], PARAMS, seed=6).result()
    finally:
        backend.close()
    assert (first.text, first.finish_reason, first.prompt_tokens, first.completion_tokens) == (
        "<answer_sql>SELECT 1</answer_sql>",
        "stop",
        100,
        7,
    )
    assert second.prompt_tokens == 50 and len(server.requests) == 4
    body = server.requests[-1]
    assert body["model"] == "gpt-test" and body["seed"] == 6 and body["stop"] == list(STOP)
    assert body["max_tokens"] == 32 and body["temperature"] == 0.0 and body["messages"][1] == CHAT[1]
    assert body["skip_special_tokens"] is False
    usage = backend.usage()
    assert (usage["requests"], usage["prompt_tokens"], usage["completion_tokens"]) == (2, 150, 10)
    assert usage["cost_usd"] == pytest.approx((150 * 2.0 + 10 * 10.0) / 1e6)
    assert KEY not in json.dumps(usage)


def test_a_server_that_keeps_failing_is_one_line_after_the_retries(serve):
    backend = client(serve((502, {"error": "bad gateway"})), max_retries=2)
    try:
        with pytest.raises(StageFailed, match=r"no answer after 3 attempts: HTTP 502"):
            backend.submit_messages(CHAT, [], PARAMS, seed=0).result()
    finally:
        backend.close()


def test_other_4xx_are_one_line_at_once_and_never_hold_the_key(serve, monkeypatch):
    server = serve((400, {"error": {"message": f"bad request from key {KEY}"}}))
    backend = client(server)
    try:
        with pytest.raises(UsageError) as refused:
            backend.submit_messages(CHAT, [], PARAMS, seed=0).result()
    finally:
        backend.close()
    assert len(server.requests) == 1 and "HTTP 400" in str(refused.value) and "\n" not in str(refused.value)
    assert KEY not in str(refused.value) and "***" in str(refused.value)
    monkeypatch.setenv("MTSQL_TEST_KEY", KEY[:-3] + "bad")  # a wrong key: the API echoes it, refused at start
    with pytest.raises(UsageError, match="HTTP 401 .the key was refused") as wrong:
        client(serve((200, completion("x"))))
    assert KEY[:-3] not in str(wrong.value)


def test_a_missing_key_a_wrong_model_or_a_missing_model_name_is_one_line_before_any_request(
    serve, monkeypatch
):
    server = serve((200, completion("x")))
    monkeypatch.delenv("MTSQL_TEST_KEY")
    with pytest.raises(UsageError, match=r"\$MTSQL_TEST_KEY, which is not set"):
        client(server)
    monkeypatch.setenv("MTSQL_TEST_KEY", KEY)
    with pytest.raises(UsageError, match="serves gpt-test, not 'gpt-other'"):
        ChatBackend("gpt-other", server.url, api_key_env="MTSQL_TEST_KEY")
    with pytest.raises(UsageError, match="set sample.chat.model"):
        ChatBackend("", server.url, api_key_env="MTSQL_TEST_KEY")
    with pytest.raises(UsageError, match="extra_body sets seed, temperature, which mtsql sets itself"):
        client(server, extra_body={"temperature": 1.0, "seed": 1, "top_k": 5})
    assert server.requests == []


def test_the_fingerprint_holds_the_model_the_url_and_the_sampling_not_the_key_variable_or_the_prices(
    tmp_path,
):
    from ..test_fingerprints import cfg_for, planned

    def evaluate(*overrides):
        return planned(
            "evaluate", cfg_for(tmp_path, "sample.backend=chat", "sample.chat.model=gpt-test", *overrides)
        )

    served = evaluate()
    for changed in (
        "sample.chat.model=gpt-other",
        "sample.chat.base_url=http://127.0.0.1:9/v1",
        "sample.max_new_tokens=64",
        "sample.chat.observation_role=tool",
    ):
        assert evaluate(changed) != served, changed
    assert (
        evaluate(
            "sample.chat.api_key_env=OTHER_KEY",
            "sample.chat.price_input_per_mtok=3",
            "sample.chat.concurrency=2",
            "sample.chat.max_retries=1",
        )
        == served
    )


def test_a_chat_api_is_given_no_trained_model_and_no_prompt_filter(tmp_path):
    from mtsql.app.runner import Pending, run_stage

    from ..test_fingerprints import cfg_for

    cfg = cfg_for(tmp_path, "sample.backend=chat", "sample.chat.model=gpt-test")
    with pytest.raises(UsageError, match="not a trained artifact"):
        run_stage("evaluate", cfg, inputs={"model": Pending("sft-r1", None)}, dry_run=True)
    with pytest.raises(UsageError, match="prompt_filter_tokens .* chat API"):
        run_stage(
            "evaluate",
            cfg_for(
                tmp_path,
                "sample.backend=chat",
                "sample.chat.model=gpt-test",
                "evaluate.prompt_filter_tokens=100",
            ),
            dry_run=True,
        )
    with pytest.raises(UsageError, match="set sample.chat.model"):
        run_stage("evaluate", cfg_for(tmp_path, "sample.backend=chat"), dry_run=True)


def test_a_sample_stage_through_a_chat_api_keeps_the_apis_token_counts(tmp_path, serve):
    from mtsql.app.runner import run_stage
    from mtsql.base.files import read_jsonl

    from ..test_fingerprints import cfg_for

    server = serve((200, completion("<answer_sql>SELECT count(*) FROM singer", usage=(120, 9))))
    cfg = cfg_for(
        tmp_path,
        "sample.backend=chat",
        "sample.chat.model=gpt-test",
        f"sample.chat.base_url={server.url}",
        "sample.chat.api_key_env=MTSQL_TEST_KEY",
        "sample.policy=model",
        "sample.n=2",
    )
    sampled = run_stage("sample", cfg)
    rows = read_jsonl(sampled.path / "trajectories.jsonl")
    assert rows and len(rows) == len(server.requests) == sampled.metrics["usage"]["requests"]
    for row in rows:
        assert row["trajectory"]["final_sql"] == "SELECT count(*) FROM singer" and row["prompt_ids"] is None
        assert row["generations"] == [{"tokens": 9, "prompt_tokens": 120, "finish_reason": "stop"}]
        assert row["generated_tokens"] == 9
    assert len({body["seed"] for body in server.requests}) == len(rows), "a seed of its own per episode"
    assert not [p for p in (tmp_path / "runs").rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]

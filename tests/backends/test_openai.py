"""The OpenAI-compatible backend against a real HTTP server on 127.0.0.1 (stdlib, in a thread)."""

from __future__ import annotations

import json
import socket
import threading
import types
from http.server import BaseHTTPRequestHandler

import pytest

from mtsql.base.errors import StageFailed, UsageError
from mtsql.engines.backends.base import SamplingParams
from mtsql.engines.backends.openai import OpenAIBackend

from ..local_server import start_server, stop_server


class Server:
    """Answers POST /v1/completions with ``reply(body) -> (status, payload)``; records every request.
    GET /v1/models lists ``models`` (None: 404, a server without a model list)."""

    def __init__(self, reply, models=None):
        self.reply, self.requests, self.in_flight, self.max_in_flight = reply, [], 0, 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                found = self.path.endswith("/models") and models is not None
                data = json.dumps({"object": "list", "data": [{"id": m} for m in models or []]}).encode()
                self.send_response(200 if found else 404)
                self.send_header("Content-Length", str(len(data) if found else 0))
                self.end_headers()
                if found:
                    self.wfile.write(data)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append((self.path, body))
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    status, payload = server.reply(body)
                finally:
                    with server.lock:
                        server.in_flight -= 1
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = start_server(Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self):
        stop_server(self.httpd)


@pytest.fixture
def serve():
    servers = []

    def start(reply, models=None):
        servers.append(Server(reply, models))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


@pytest.fixture
def client(tiny_qwen3, tiny_tokenizer):
    clients = []

    def make(url, **options):
        options = {"max_retries": 1, "backoff_s": 0.01, "tokenizer": tiny_tokenizer, **options}
        clients.append(OpenAIBackend(tiny_qwen3, url, served_model="tiny", **options))
        return clients[-1]

    yield make
    for backend in clients:
        backend.close()


def model_server(backend):
    """A vLLM-like server backed by the tiny model (one generation at a time)."""
    lock = threading.Lock()

    def reply(body):
        params = SamplingParams(
            temperature=body["temperature"],
            top_p=body["top_p"],
            max_new_tokens=body["max_tokens"],
            stop=tuple(body["stop"]),
        )
        with lock:
            out = backend.generate([body["prompt"]], params, seeds=[body["seed"]])[0]
        choice = {"text": out.text, "token_ids": out.token_ids, "finish_reason": out.finish_reason}
        return 200, {"id": "cmpl-1", "object": "text_completion", "choices": [choice]}

    return reply


def test_same_results_as_the_model_behind_the_server(serve, client, tiny_backend, tiny_tokenizer):
    server = serve(model_server(tiny_backend))
    prompts = [tiny_tokenizer.encode(t) for t in ("SELECT", "How many singers?", "x y z")]
    params = SamplingParams(temperature=0.8, max_new_tokens=6, stop=("</tool_call>",))
    remote = client(server.url, concurrency=3).generate(prompts, params, seeds=[5, 6, 7])
    local = tiny_backend.generate(prompts, params, seeds=[5, 6, 7])
    assert [(g.token_ids, g.text, g.finish_reason) for g in remote] == [
        (g.token_ids, g.text, g.finish_reason) for g in local
    ]
    path, body = server.requests[0]
    assert path == "/v1/completions" and body["model"] == "tiny" and body["include_stop_str_in_output"]
    assert sorted(b["prompt"] for _, b in server.requests) == sorted(prompts)


def test_text_only_servers_get_ids_rebuilt(serve, client, tiny_tokenizer):
    replies = {
        "cut": {
            "text": '<tool_call>\n{"name": "exec_sql"}\n',
            "finish_reason": "stop",
            "stop_reason": "</tool_call>",
        },
        "eot": {"text": "<answer_sql>SELECT 1</answer_sql>", "finish_reason": "stop", "stop_reason": None},
        "long": {"text": "SELECT a, b, c", "finish_reason": "length"},
    }
    server = serve(lambda body: (200, {"choices": [replies[tiny_tokenizer.decode(body["prompt"])]]}))
    backend = client(server.url)
    prompts = [tiny_tokenizer.encode(k) for k in replies]
    cut, eot, long = backend.generate(prompts, SamplingParams(stop=("</tool_call>",)))
    assert cut.text == '<tool_call>\n{"name": "exec_sql"}\n</tool_call>' and cut.finish_reason == "stop"
    assert cut.token_ids == tiny_tokenizer.encode(cut.text)
    assert eot.token_ids[-1] == tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert eot.text == "<answer_sql>SELECT 1</answer_sql>"
    assert long.finish_reason == "length" and long.token_ids == tiny_tokenizer.encode("SELECT a, b, c")


def test_logprobs_are_read_when_the_server_sends_them(serve, client):
    choice = {
        "text": "ab",
        "token_ids": [370],
        "finish_reason": "length",
        "logprobs": {"token_logprobs": [-0.5]},
    }
    server = serve(lambda body: (200, {"choices": [choice]}))
    out = client(server.url).generate([[1, 2]], SamplingParams(max_new_tokens=1, logprobs=True))[0]
    assert out.logprobs == [-0.5] and server.requests[0][1]["logprobs"] == 0


def test_transient_errors_are_retried(serve, client):
    calls = []

    def reply(body):
        calls.append(1)
        if len(calls) < 3:
            return 503, {"error": "warming up"}
        return 200, {"choices": [{"text": "ok", "token_ids": [562], "finish_reason": "length"}]}

    out = client(serve(reply).url, max_retries=3).generate([[1]], SamplingParams(max_new_tokens=1))
    assert out[0].token_ids == [562] and len(calls) == 3


def answer_once_in_flight(count: int):
    """A reply that holds every request until ``count`` have arrived (or 120 s pass), then answers them
    all: only a client that sends ``count`` at once gets answers without the wait."""
    full, lock, arrived = threading.Event(), threading.Lock(), []

    def reply(body):
        with lock:
            arrived.append(body)
            if len(arrived) >= count:
                full.set()
        full.wait(timeout=120)
        return 200, {"choices": [{"text": "a", "token_ids": [64], "finish_reason": "length"}]}

    return reply


def test_concurrency_is_limited(serve, client):
    server = serve(answer_once_in_flight(2))
    client(server.url, concurrency=2).generate([[i] for i in range(1, 7)], SamplingParams(max_new_tokens=1))
    assert server.max_in_flight == 2 and len(server.requests) == 6


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_tokenizer_is_loaded_from_the_model_by_default(serve, tiny_qwen3):
    backend = OpenAIBackend(tiny_qwen3, serve(lambda body: (500, {})).url)
    assert backend.tokenizer.convert_tokens_to_ids("<tool_call>") == 151657
    assert backend.end_of_turn_id == 151645 and backend.served_model == str(tiny_qwen3)
    backend.close()


def test_a_llama3_message_ends_at_eot_even_when_the_tokenizers_eos_is_the_end_of_text(serve, tiny_llama3):
    from transformers import AutoTokenizer

    base = AutoTokenizer.from_pretrained(tiny_llama3, eos_token="<|end_of_text|>")  # as a base model ships it
    backend = OpenAIBackend(tiny_llama3, serve(lambda body: (500, {})).url, tokenizer=base)
    assert backend.end_of_turn_ids == {128001, 128009} and backend.end_of_turn_id == 128009  # <|eot_id|>
    backend.close()


def test_server_down_is_one_line_before_any_work(client):
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(UsageError, match=rf"cannot reach the server at {url} \(ConnectError\): start it"):
        client(url)


def test_a_wrong_model_name_is_one_line_naming_what_is_served(serve, client):
    server = serve(lambda body: (500, {}), models=["smollm2"])
    with pytest.raises(UsageError, match=r"serves smollm2, not 'tiny': set the served model name"):
        client(server.url)


def test_server_gone_after_start_is_one_clear_error(serve, client):
    server = serve(lambda body: (500, {}), models=["tiny"])
    backend = client(server.url, max_retries=2)
    server.close()
    with pytest.raises(StageFailed, match=r"no answer after 3 attempts \(is the server up\?\): ConnectError"):
        backend.generate([[1, 2]], SamplingParams())


def test_slow_server_times_out(serve, client):
    answered = threading.Event()  # set once the client gave up: the server answers only then
    server = serve(lambda body: (answered.wait(timeout=120), (200, {}))[1])
    try:
        with pytest.raises(StageFailed, match="ReadTimeout"):
            client(server.url, timeout_s=0.2, max_retries=0).generate([[1]], SamplingParams())
    finally:
        answered.set()


@pytest.mark.parametrize(
    "status, payload, message",
    [
        (200, b"<html>502 Bad Gateway</html>", "not JSON: <html>502 Bad Gateway</html>"),
        (200, {"data": []}, "not a completions answer"),
        (200, {"choices": [{"text": 3, "finish_reason": "stop"}]}, "text is not a string"),
        (400, {"error": "prompt too long"}, 'HTTP 400: {"error": "prompt too long"}'),
    ],
)
def test_garbage_answers_are_clear_errors(serve, client, status, payload, message):
    server = serve(lambda body: (status, payload))
    with pytest.raises(StageFailed, match=message.replace("(", r"\(")):
        client(server.url, max_retries=3).generate([[1]], SamplingParams())
    assert len(server.requests) == 1  # not retried: it would not get better


class OneMessageEnv:
    """Every episode ends after its first message."""

    def reset(self, turn, memory=None):
        self.trajectory = types.SimpleNamespace(
            final_sql=None,
            messages=[{"role": "user", "content": turn.question}],
            to_dict=lambda: {"final_sql": None},
        )
        return list(self.trajectory.messages)

    def step(self, text):
        return None, True, {}


def test_the_rollout_engine_sends_every_ready_conversation_at_once(serve, client, tiny_tokenizer):
    from mtsql.core.chat_format import ChatFormat
    from mtsql.core.data.records import Turn
    from mtsql.engines.rollout import RolloutEngine

    server = serve(answer_once_in_flight(4))
    turns = [
        Turn(
            dataset="cosql",
            split="dev",
            interaction_id=f"d{i}",
            interaction_index=0,
            turn_index=0,
            db_id="db",
            question=f"q{i}?",
            gold_sql="SELECT 1",
            previous_questions=(),
            previous_sql=(),
        )
        for i in range(8)
    ]
    backend = client(server.url, concurrency=8)
    records = RolloutEngine(
        OneMessageEnv,
        backend=backend,
        chat=ChatFormat(tiny_tokenizer),
        params=SamplingParams(max_new_tokens=1),
        batch_size=2,
    ).run(turns, progress=False)
    assert len(records) == len(server.requests) == 8
    assert server.max_in_flight == 4  # all in flight (twice batch_size), not batch_size at a time


def test_a_server_mtsql_did_not_start_takes_no_weights(serve, client, tiny_qwen3, tmp_path):
    from mtsql.engines.backends.vllm import VLLMBackend

    server = serve(lambda body: (500, {}), models=["tiny"])
    with pytest.raises(
        UsageError,
        match=rf"the server at {server.url} was not started by mtsql: it cannot take new "
        r"weights \(train with rl.local.rollout_backend=hf or vllm\)",
    ):
        client(server.url).load_weights(object(), tmp_path / "weights")
    user_run = VLLMBackend(tiny_qwen3, base_url=server.url, served_model="tiny")
    try:
        with pytest.raises(
            UsageError, match=r"only into a vLLM server mtsql started \(unset sample.vllm.base_url\)"
        ):
            user_run.load_weights(object(), tmp_path / "weights")
    finally:
        user_run.close()
    assert not (tmp_path / "weights").exists() and server.requests == []


def test_each_backend_reads_its_own_settings(tmp_path):
    from mtsql.app.config import load_config
    from mtsql.engines.backends import backend_class

    cfg = load_config(
        None,
        [
            "sample.openai.base_url=http://h:1/v1",
            "sample.openai.model=m",
            "rl.lora_rank=4",
            "sample.openai.concurrency=3",
            "sample.vllm.base_url=http://v:2/v1",
            "model.dtype=auto",
        ],
    )
    assert backend_class("openai").options(cfg) == {
        "base_url": "http://h:1/v1",
        "served_model": "m",
        "concurrency": 3,
        "timeout_s": cfg.sample.openai.timeout_s,
    }
    assert backend_class("vllm").options(cfg, log_path=tmp_path) == {
        "base_url": "http://v:2/v1",
        "served_model": cfg.sample.vllm.model,
    }
    assert backend_class("hf").options(cfg) == {"dtype": "auto", "device": "cpu"}
    assert backend_class("hf").training_options(cfg, dtype="float32") == {"dtype": "float32", "device": "cpu"}
    with pytest.raises(UsageError, match="OpenAIBackend backend cannot take the weights being trained"):
        backend_class("openai").training_options(cfg, dtype="float32")
    with pytest.raises(
        UsageError, match="with rl.lora_rank set rl.local.rollout_backend=hf"
    ):  # before a server starts
        backend_class("vllm").training_options(cfg, dtype="float32")

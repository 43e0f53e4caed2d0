"""Each chat family (``model.template``) gives one agent episode the same token ids and loss mask in
the three places that tokenize it: the rollout engine (sampling, local GRPO), the LLaMA-Factory SFT
export as LLaMA-Factory's own pipeline encodes it, and verl's agent loop. Every family runs on a tiny
random model of its own (tiny-qwen3, tiny-qwen25, tiny-llama3, tiny-smollm2, built offline from PyPI
wheels) and the gold policy's episode on a SParC turn with a tool call and memory."""

from __future__ import annotations

import json
from pathlib import Path

import hydra
import pytest
from omegaconf import OmegaConf

from mtsql.app.config import load_config
from mtsql.base.paths import FIXTURE_DATA
from mtsql.core.agent.env import SqlAgentEnv, Trajectory
from mtsql.core.agent.policies import GoldPolicy
from mtsql.core.chat_format import FAMILIES, AutoChatFormat, ChatFormat
from mtsql.core.data import load_turns
from mtsql.engines.backends.base import Backend
from mtsql.engines.llamafactory.dataset import encode_dataset, export_sharegpt
from mtsql.engines.rollout import STOP_STRINGS, RolloutEngine
from mtsql.engines.verl.dataset import episode_tools, write_rl_parquet
from mtsql.engines.verl.main_ppo import CurriculumParquet, build_stage_plan, compose_train_config
from mtsql.engines.verl.reward import TRAJECTORY_KEY

from ..episodes import run_episode

# Every case loads a tiny model, through a fixture named in its parameters (request.getfixturevalue), which
# conftest.py's marking from fixture names cannot see.
pytestmark = pytest.mark.model

UID = "sparc-dev-0000/2"  # a later turn: the gold policy runs a query and reads the memory
# (model.template, the tiny model fixture); auto reads the model's own chat template
CASES = [
    ("qwen3_nothink", "tiny_qwen3"),
    ("qwen3", "tiny_qwen3"),
    ("qwen", "tiny_qwen25"),
    ("llama3", "tiny_llama3"),
    ("smollm2", "tiny_smollm2"),
    ("auto", "tiny_qwen25"),
    ("auto", "tiny_llama3"),
]
CASE_IDS = [f"{template}-{model}" for template, model in CASES]


@pytest.fixture(params=CASES, ids=CASE_IDS)
def family(request):
    """(template, model folder, tokenizer, config) of one case."""
    from transformers import AutoTokenizer

    template, fixture = request.param
    model = request.getfixturevalue(fixture)
    cfg = load_config(
        None,
        [
            f"model.template={template}",
            "env.thinking=true",
            "rl.batch_size=1",
            "rl.mini_batch_size=1",
            "rl.n=1",
            "rl.verl.n_gpus_per_node=1",
            "rl.max_prompt_len=4096",
            "rl.max_response_len=2048",
        ],
    )
    return template, model, AutoTokenizer.from_pretrained(model), cfg


def gold_episode(cfg) -> Trajectory:
    turn = next(t for t in load_turns("sparc", "dev", root=FIXTURE_DATA) if t.uid == UID)
    return run_episode(
        SqlAgentEnv(cfg.env, cfg.sql, FIXTURE_DATA), GoldPolicy(thinking=cfg.env.thinking), turn
    )


def replies(trajectory: Trajectory) -> list[str]:
    return [m["content"] for m in trajectory.messages if m["role"] == "assistant"]


class ReplayBackend(Backend):
    """A model that answers with the gold episode's messages in turn, canonically encoded, each closed
    by the family's end-of-turn token."""

    def __init__(self, tokenizer, chat, texts: list[str]):
        self.tokenizer, self.chat, self.texts = tokenizer, chat, list(texts)
        self.end_of_turn_ids = frozenset({chat.end_of_turn_id})

    def generate(self, prompts, params, seeds=None):
        assert len(prompts) == 1
        ids = self.tokenizer.encode(self.texts.pop(0), add_special_tokens=False) + [self.chat.end_of_turn_id]
        return [self._generation(ids, "stop")]


def rollout_record(cfg, tokenizer, trajectory) -> dict:
    """The rollout engine's record of the episode, the backend replaying the gold messages."""
    chat = ChatFormat.for_template(tokenizer, cfg.model.template)
    engine = RolloutEngine(
        lambda: SqlAgentEnv(cfg.env, cfg.sql, FIXTURE_DATA),
        backend=ReplayBackend(tokenizer, chat, replies(trajectory)),
        chat=chat,
        params=_params(),
        tools=episode_tools(cfg.env),
    )
    turn = next(t for t in load_turns("sparc", "dev", root=FIXTURE_DATA) if t.uid == UID)
    (record,) = engine.run([turn], progress=False)
    assert record["trajectory"]["messages"] == trajectory.messages
    return record


def _params():
    from mtsql.engines.backends.base import SamplingParams

    return SamplingParams(temperature=0.0, max_new_tokens=2048, stop=STOP_STRINGS)


def llamafactory_example(tmp_path: Path, template: str, model: Path, trajectory, cfg):
    """The episode as LLaMA-Factory trains on it: (input ids, labels, export stats)."""
    stats = export_sharegpt(
        [trajectory.to_dict()],
        tmp_path,
        tokenizer_path=model,
        template=template,
        cutoff_len=10**6,
        tools=episode_tools(cfg.env),
    )
    (example,), _ = encode_dataset(tmp_path, "mtsql_sft", tokenizer_path=model, template=template)
    return example, stats


class ReplayServer:
    """Stand-in for verl's server_manager: the gold messages in turn, each closed by the end-of-turn token."""

    def __init__(self, tokenizer, chat, texts: list[str]):
        self.tokenizer, self.chat, self.texts = tokenizer, chat, list(texts)

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        ids = self.tokenizer.encode(self.texts.pop(0), add_special_tokens=False) + [self.chat.end_of_turn_id]
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids), extra_fields={"global_steps": 0})


def verl_output(tmp_path: Path, cfg, model: Path, tokenizer, trajectory):
    """verl's agent loop on the episode's parquet row, registered and instantiated as verl does."""
    import torch
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.utils.ray_utils import get_event_loop

    turn = next(t for t in load_turns("sparc", "dev", root=FIXTURE_DATA) if t.uid == UID)
    chat = ChatFormat.for_template(tokenizer, cfg.model.template)
    report = write_rl_parquet(
        [turn],
        tmp_path / "stage-0.parquet",
        env_cfg=cfg.env,
        sql_cfg=cfg.sql,
        data_root=FIXTURE_DATA,
        chat=chat,
        max_prompt_len=cfg.rl.max_prompt_len,
    )
    plan = build_stage_plan(
        cfg,
        [CurriculumParquet("stage-0", report.path, report.rows)],
        model_path=str(model),
        out_dir=tmp_path,
        data_root=FIXTURE_DATA,
    )
    for path, text in plan[0].files.items():
        path.write_text(text)
    config = compose_train_config(plan[0].argv[3:])
    (entry,) = OmegaConf.load(config.actor_rollout_ref.rollout.agent.agent_loop_config_path)
    assert entry.template == cfg.model.template
    loop = hydra.utils.instantiate(
        entry,
        trainer_config=DictConfigWrap(config),
        server_manager=ReplayServer(tokenizer, chat, replies(trajectory)),
        tokenizer=tokenizer,
        processor=None,
        hf_model_type="llama",
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        tools=ToolListWrap([]),
    )
    row = RLHFDataset(str(report.path), tokenizer, config.data)[0]
    kwargs = {k: v for k, v in row.items() if k != "agent_name" and not isinstance(v, torch.Tensor)}
    sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
    return get_event_loop().run_until_complete(loop.run(sampling, **kwargs))


def test_one_episode_has_the_same_ids_and_mask_in_rollout_llamafactory_and_verl(family, tmp_path):
    template, model, tokenizer, cfg = family
    trajectory = gold_episode(cfg)
    assert [s.tool for s in trajectory.steps if s.tool] == ["exec_sql", "memory_retrieve"]
    chat = ChatFormat.for_template(tokenizer, template)
    tools = episode_tools(cfg.env)

    record = rollout_record(cfg, tokenizer, trajectory)
    ids, mask = (
        record["prompt_ids"] + record["response_ids"],
        [0] * len(record["prompt_ids"]) + record["response_mask"],
    )
    # the ids spell the conversation: the chat format's rendering but what follows the last end-of-turn
    assert ids == chat.render_ids(trajectory.messages, tools)[: len(ids)]
    # trained: each reply's canonical ids and its end-of-turn token, nothing else
    trained = [i for i, m in zip(ids, mask, strict=True) if m]
    assert trained == [
        i
        for text in replies(trajectory)
        for i in tokenizer.encode(text, add_special_tokens=False) + [chat.end_of_turn_id]
    ]

    out = verl_output(tmp_path / "verl", cfg, model, tokenizer, trajectory)
    assert Trajectory.from_dict(json.loads(out.extra_fields[TRAJECTORY_KEY])).messages == trajectory.messages
    assert (out.prompt_ids, out.response_ids, out.response_mask) == (
        record["prompt_ids"],
        record["response_ids"],
        record["response_mask"],
    )

    example, stats = llamafactory_example(tmp_path / "sft", template, model, trajectory, cfg)
    if template == "auto":  # LLaMA-Factory parses the template on its own: observations become user turns
        assert stats.rewritten == (example.input_ids != chat.render_ids(trajectory.messages, tools))
        return
    after = tokenizer.encode(FAMILIES[template].after_turn, add_special_tokens=False)
    assert stats.rewritten == 0 and example.input_ids == ids + after
    # LLaMA-Factory trains the rollout's trained ids plus the text after each end-of-turn token (ChatML's \n)
    lf_trained = [k for k, label in enumerate(example.labels) if label != -100]
    ours = [k for k, m in enumerate(mask) if m]
    ends = [k for k in ours if ids[k] == chat.end_of_turn_id]
    assert lf_trained == sorted(ours + [k + 1 + j for k in ends for j in range(len(after))])
    assert all(example.labels[k] == example.input_ids[k] for k in lf_trained)


@pytest.mark.parametrize(
    ("template", "fixture"), [("qwen", "tiny_qwen25"), ("llama3", "tiny_llama3"), ("smollm2", "tiny_smollm2")]
)
def test_auto_reads_the_same_ids_off_the_models_own_template(template, fixture, request):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(request.getfixturevalue(fixture))
    auto, named = ChatFormat.for_template(tokenizer, "auto"), ChatFormat.for_template(tokenizer, template)
    assert isinstance(auto, AutoChatFormat) and auto.end_of_turn_id == named.end_of_turn_id
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q?"}]
    tool = {"role": "tool", "content": "Result: [(4,)]"}
    tools = episode_tools(load_config(None, []).env)
    assert auto.prompt_ids(messages, tools) == named.prompt_ids(messages, tools)
    assert auto.observation_ids(tool) == named.observation_ids(tool)
    assert auto.observation_ids({"role": "user", "content": "next"}) == named.observation_ids(
        {"role": "user", "content": "next"}
    )

"""The verl engine on CPU with real verl 0.9.1 code: the parquet through ``RLHFDataset``, the agent
loop instantiated as verl instantiates it and driven by stand-ins for ``server_manager.generate``
(the tiny Qwen3, or a replay of the scripted gold policy), and the reward through verl's naive
reward manager loaded from the composed training config."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import hydra
import numpy as np
import pytest
from omegaconf import OmegaConf

from mtsql.app.config import load_config
from mtsql.base.errors import UsageError
from mtsql.base.paths import FIXTURE_DATA
from mtsql.core.agent.env import SqlAgentEnv, Trajectory
from mtsql.core.agent.policies import GoldPolicy
from mtsql.core.agent.tools import MemoryEntry
from mtsql.core.chat_format import ChatFormat, render
from mtsql.core.data import load_turns
from mtsql.engines.verl.dataset import AGENT_NAME, episode_tools, memory_of, turn_of, write_rl_parquet
from mtsql.engines.verl.main_ppo import CurriculumParquet, build_stage_plan, compose_train_config
from mtsql.engines.verl.reward import RESPONSE_TOKENS_KEY, TRAJECTORY_KEY, score_keys

from ..episodes import run_episode

UIDS = ("sparc-dev-0000/0", "sparc-dev-0000/2")  # a first turn (pets_1), and a later turn with memory
TURN_TOKENS = 16  # the tiny model's per-message cap: several short messages, some cut short
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from mtsql.engines.models.registry import resolve_model

    os.environ.setdefault("MTSQL_HOME", str(tmp_path_factory.getbasetemp() / "home"))
    return str(resolve_model("tiny-qwen3"))


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


@pytest.fixture(scope="module")
def cfg():
    return load_config(
        None,
        [
            "rl.batch_size=2",
            "rl.mini_batch_size=2",
            "rl.n=1",
            "rl.verl.n_gpus_per_node=1",
            "rl.max_prompt_len=4096",
            "rl.max_response_len=1024",
        ],
    )


@pytest.fixture(scope="module")
def turns():
    by_uid = {t.uid: t for t in load_turns("sparc", "dev", root=FIXTURE_DATA)}
    return [by_uid[uid] for uid in UIDS]


@pytest.fixture(scope="module")
def stage(tmp_path_factory, cfg, turns, tokenizer, model_dir):
    """The exported parquet, the launch plan's agent-loop YAML on disk, the composed verl config."""
    out = tmp_path_factory.mktemp("rl")
    report = write_rl_parquet(
        turns,
        out / "stage-0.parquet",
        env_cfg=cfg.env,
        sql_cfg=cfg.sql,
        data_root=FIXTURE_DATA,
        chat=ChatFormat(tokenizer),
        max_prompt_len=cfg.rl.max_prompt_len,
    )
    plan = build_stage_plan(
        cfg,
        [CurriculumParquet("stage-0", report.path, report.rows)],
        model_path=model_dir,
        out_dir=out,
        data_root=FIXTURE_DATA,
    )
    for path, text in plan[0].files.items():
        path.write_text(text)
    return report, compose_train_config(plan[0].argv[3:])


@pytest.fixture(scope="module")
def rows(stage, tokenizer):
    from verl.utils.dataset.rl_dataset import RLHFDataset

    report, config = stage
    dataset = RLHFDataset(str(report.path), tokenizer, config.data)
    return [dataset[i] for i in range(len(dataset))]


def loop_kwargs(row: dict) -> dict:
    """What verl's AgentLoopWorker passes to ``run``: the row's non-tensor fields but ``agent_name``."""
    import torch

    return {k: v for k, v in row.items() if k != "agent_name" and not isinstance(v, torch.Tensor)}


def make_loop(config, server, tokenizer, **entry_changes):
    """Instantiate the registered loop exactly as AgentLoopWorker._run_agent_loop does
    (``entry_changes`` edit its agent-loop YAML entry)."""
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    entries = OmegaConf.load(config.actor_rollout_ref.rollout.agent.agent_loop_config_path)
    entry = next(e for e in entries if e.name == config.actor_rollout_ref.rollout.agent.default_agent_loop)
    entry = OmegaConf.merge(entry, entry_changes)
    return hydra.utils.instantiate(
        entry,
        trainer_config=DictConfigWrap(config),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        hf_model_type="qwen3",
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        tools=ToolListWrap([]),
    )


def run(loop, row):
    from verl.utils.ray_utils import get_event_loop

    return get_event_loop().run_until_complete(loop.run(dict(SAMPLING), **loop_kwargs(row)))


class TinyModelServer:
    """Stand-in for verl's server_manager: greedy transformers ``generate`` on the exact prompt ids."""

    def __init__(self, model_dir: str, end_of_turn: int) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        self.end_of_turn = end_of_turn
        self.calls: list[tuple[list[int], list[int]]] = []  # (prompt ids, generated ids)

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        import torch
        from verl.workers.rollout.replica import TokenOutput

        with torch.no_grad():
            out = self.model.generate(
                torch.tensor([prompt_ids]),
                attention_mask=torch.ones(1, len(prompt_ids)),
                max_new_tokens=sampling_params["max_tokens"],
                do_sample=False,
                eos_token_id=self.end_of_turn,
                pad_token_id=self.end_of_turn,
                output_logits=True,
                return_dict_in_generate=True,
            )
        new = out.sequences[0, len(prompt_ids) :].tolist()
        logprobs = [
            torch.log_softmax(logits[0], -1)[t].item() for logits, t in zip(out.logits, new, strict=True)
        ]
        self.calls.append((list(prompt_ids), new))
        return TokenOutput(token_ids=new, log_probs=logprobs, extra_fields={"global_steps": 0})


class ReplayServer:
    """Stand-in for server_manager that answers each episode with the gold policy's messages,
    canonically encoded; episodes are told apart by their prompt. ``stop``: "eos" (the model ends
    its message with <|im_end|>) or "string" (the server stops at a stop string, as vLLM does when
    ``</tool_call>`` / ``</answer_sql>`` comes before <|im_end|>)."""

    def __init__(self, cfg, turns, tokenizer, stop: str = "eos") -> None:
        self.tokenizer, self.chat, self.stop = tokenizer, ChatFormat(tokenizer), stop
        self.scripts: dict[tuple[int, ...], list[str]] = {}
        for turn in turns:
            env = SqlAgentEnv(cfg.env, cfg.sql, FIXTURE_DATA)
            key = tuple(self.chat.prompt_ids(env.reset(turn), episode_tools(cfg.env)))
            trajectory = run_episode(env, GoldPolicy(thinking=cfg.env.thinking), turn)
            self.scripts[key] = [m["content"] for m in trajectory.messages if m["role"] == "assistant"]
        self.calls: list[tuple[list[int], list[int]]] = []
        self.params: list[dict] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        key = next(k for k in self.scripts if tuple(prompt_ids[: len(k)]) == k)
        done = sum(1 for prompt, _ in self.calls if tuple(prompt[: len(key)]) == key)
        text = self.scripts[key][done]
        assert self.stop == "eos" or text.endswith(tuple(sampling_params["stop"]))
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        ids = (ids + [self.chat.end_of_turn_id] if self.stop == "eos" else ids)[
            : sampling_params["max_tokens"]
        ]
        self.params.append(dict(sampling_params))
        self.calls.append((list(prompt_ids), ids))
        step = 7 + done  # as if the weights were updated between the messages of an episode
        return TokenOutput(
            token_ids=ids,
            log_probs=[-0.25] * len(ids),
            extra_fields={"global_steps": step, "min_global_steps": step, "max_global_steps": step},
        )


def expected_response(generations, trajectory, chat):
    """The response verl must get: each generation (mask 1), then, if another generation followed,
    <|im_end|> when the server cut the message short and the observation's ids (mask 0).
    Also where each generation starts in it."""
    observations = [m for m in trajectory.messages if m["role"] == "tool"]
    ids, mask, starts = [], [], []
    for k, generated in enumerate(generations):
        starts.append(len(ids))
        ids, mask = ids + generated, mask + [1] * len(generated)
        if k + 1 < len(generations):
            closing = [] if generated and generated[-1] == chat.end_of_turn_id else [chat.end_of_turn_id]
            follow = closing + chat.observation_ids(observations[k])
            ids, mask = ids + follow, mask + [0] * len(follow)
    return ids, mask, starts


def conversation_in_tokens(trajectory, generations):
    """The messages the token sequence holds: system, user, then per generation its assistant message
    and the observation after it when another generation followed."""
    body = trajectory.messages[2:]
    kept, assistants = trajectory.messages[:2], 0
    for message in body:
        if message["role"] == "assistant":
            assistants += 1
        if assistants > len(generations) or (message["role"] == "tool" and assistants == len(generations)):
            break
        kept.append(message)
    return kept


# ---------------------------------------------------------------------------------------------


def test_parquet_loads_with_verls_rl_dataset(stage, rows, turns, cfg, tokenizer):
    report, config = stage
    assert report.rows == len(rows) == 2 and report.too_long == ()
    for index, (row, turn) in enumerate(zip(rows, turns, strict=True)):
        messages = SqlAgentEnv(cfg.env, cfg.sql, FIXTURE_DATA).reset(turn)
        assert list(row["raw_prompt"]) == messages and row["agent_name"] == AGENT_NAME
        assert row["data_source"] == "mtsql-sparc" and row["reward_model"] == {
            "style": "rule",
            "ground_truth": turn.gold_sql,
        }
        assert set(row["extra_info"]) == {"index", "uid", "hardness", "turn", "memory"}
        assert (
            row["index"] == index
            and turn_of(row["extra_info"]) == turn
            and memory_of(row["extra_info"]) is None
        )
    from verl.utils.dataset.rl_dataset import RLHFDataset

    filtering = OmegaConf.merge(
        config.data, {"filter_overlong_prompts": True}
    )  # renders with the chat template
    assert len(RLHFDataset(str(report.path), tokenizer, filtering)) == 2


def test_export_drops_overlong_prompts_and_keeps_predicted_memory(tmp_path, cfg, turns, tokenizer):
    chat = ChatFormat(tokenizer)
    lengths = [
        len(chat.prompt_ids(SqlAgentEnv(cfg.env, cfg.sql, FIXTURE_DATA).reset(t), episode_tools(cfg.env)))
        for t in turns
    ]
    report = write_rl_parquet(
        turns,
        tmp_path / "a.parquet",
        env_cfg=cfg.env,
        sql_cfg=cfg.sql,
        data_root=FIXTURE_DATA,
        chat=chat,
        max_prompt_len=min(lengths),
    )
    assert (report.rows, report.too_long) == (1, (turns[lengths.index(max(lengths))].uid,))
    with pytest.raises(UsageError, match="no RL rows"):
        write_rl_parquet(
            turns,
            tmp_path / "b.parquet",
            env_cfg=cfg.env,
            sql_cfg=cfg.sql,
            data_root=FIXTURE_DATA,
            chat=chat,
            max_prompt_len=10,
        )
    import pyarrow.parquet as pq

    later = turns[1]
    memory = [MemoryEntry(q, None) for q in later.previous_questions]
    env_cfg = load_config(None, ["env.memory=predicted"]).env
    write_rl_parquet(
        [later],
        tmp_path / "c.parquet",
        env_cfg=env_cfg,
        sql_cfg=cfg.sql,
        data_root=FIXTURE_DATA,
        chat=chat,
        max_prompt_len=8192,
        memories={later.uid: memory},
    )
    (row,) = pq.read_table(tmp_path / "c.parquet").to_pylist()
    assert memory_of(row["extra_info"]) == memory


def test_agent_loop_episode_with_the_tiny_model(stage, rows, tokenizer, model_dir, cfg):
    _, config = stage
    chat = ChatFormat(tokenizer)
    server = TinyModelServer(model_dir, chat.end_of_turn_id)
    out = run(make_loop(config, server, tokenizer, max_message_tokens=TURN_TOKENS), rows[1])
    trajectory = Trajectory.from_dict(json.loads(out.extra_fields[TRAJECTORY_KEY]))
    generations = [generated for _, generated in server.calls]
    assert len(generations) >= 2 and all(len(g) <= TURN_TOKENS for g in generations)
    # the prompt is the environment's, rendered by mtsql's chat format
    messages = SqlAgentEnv(cfg.env, cfg.sql, FIXTURE_DATA).reset(turn_of(rows[1]["extra_info"]))
    assert out.prompt_ids == chat.prompt_ids(messages, episode_tools(cfg.env))
    # response ids and mask: generated tokens 1, observation tokens (and added <|im_end|>) 0
    ids, mask, starts = expected_response(generations, trajectory, chat)
    assert (out.response_ids, out.response_mask) == (ids, mask)
    assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs) <= 1024
    assert out.extra_fields[RESPONSE_TOKENS_KEY] == sum(mask) == sum(len(g) for g in generations)
    # token in: every call saw exactly the prompt plus the response so far
    assert [prompt for prompt, _ in server.calls] == [out.prompt_ids + ids[:start] for start in starts]
    # the environment read the model's own text, and the tokens spell the conversation it holds
    texts = [
        tokenizer.decode(g[:-1] if g and g[-1] == chat.end_of_turn_id else g, skip_special_tokens=False)
        for g in generations
    ]
    assert [m["content"] for m in trajectory.messages if m["role"] == "assistant"] == texts
    decoded = tokenizer.decode(out.prompt_ids + out.response_ids, skip_special_tokens=False)
    rendered = render(conversation_in_tokens(trajectory, generations), episode_tools(cfg.env))
    assert rendered.startswith(decoded) and rendered[len(decoded) :] in ("\n", "<|im_end|>\n")
    # log-probs are the server's on generated tokens, 0 on observations
    generated_logprobs = [p for p, m in zip(out.response_logprobs, mask, strict=True) if m]
    assert len(generated_logprobs) == sum(mask) and all(p <= 0 for p in generated_logprobs)
    assert all(p == 0.0 for p, m in zip(out.response_logprobs, mask, strict=True) if not m)
    assert out.num_turns == len(conversation_in_tokens(trajectory, generations)) - 1


@pytest.mark.parametrize("stop", ["eos", "string"])
def test_gold_replay_is_token_identical_to_the_rendered_conversation(
    stop, stage, rows, tokenizer, cfg, turns
):
    from mtsql.engines.verl.agent_loop import STOP_KEY  # imports verl and ray: not at collection

    _, config = stage
    chat = ChatFormat(tokenizer)
    for row, expected_tools in zip(rows, (["exec_sql"], ["exec_sql", "memory_retrieve"]), strict=True):
        server = ReplayServer(cfg, turns, tokenizer, stop)
        out = run(make_loop(config, server, tokenizer), row)
        trajectory = Trajectory.from_dict(json.loads(out.extra_fields[TRAJECTORY_KEY]))
        assert trajectory.finish_reason == "answer" and trajectory.protocol_valid
        assert [s.tool for s in trajectory.steps if s.tool] == expected_tools
        full = chat.render_ids(trajectory.messages, episode_tools(cfg.env))
        unclosed = [] if stop == "eos" else [chat.end_of_turn_id]  # the final answer stopped at </answer_sql>
        assert out.prompt_ids + out.response_ids + unclosed + tokenizer.encode("\n") == full
        ids, mask, _ = expected_response([g for _, g in server.calls], trajectory, chat)
        assert (out.response_ids, out.response_mask) == (ids, mask)
        assert out.response_logprobs == [-0.25 if m else 0.0 for m in mask]
        assert [m for m in mask if not m] and (out.response_ids[-1] == chat.end_of_turn_id) == (stop == "eos")
        assert all(
            p["stop"] == ["</tool_call>", "</answer_sql>"]
            and p["include_stop_str_in_output"]
            and p["temperature"] == 1.0
            for p in server.params
        )
        assert out.num_turns == len(trajectory.messages) - 1 and out.extra_fields[STOP_KEY] == "episode_end"
        steps = (out.extra_fields["min_global_steps"], out.extra_fields["max_global_steps"])
        assert steps == (7, 7 + len(server.calls) - 1)  # what verl's off-policy bookkeeping reads


def test_response_budget_ends_the_episode_without_a_dangling_observation(stage, rows, tokenizer, cfg, turns):
    from mtsql.engines.verl.agent_loop import STOP_KEY

    _, config = stage
    server = ReplayServer(cfg, turns, tokenizer)
    first = len(tokenizer.encode(server.scripts[next(iter(server.scripts))][0], add_special_tokens=False)) + 1
    small = OmegaConf.merge(config, {"data": {"max_response_length": first + 20}})
    out = run(make_loop(small, server, tokenizer), rows[0])
    assert out.extra_fields[STOP_KEY] == "response_length" and len(server.calls) == 1
    assert out.response_mask == [1] * first and out.response_ids == server.calls[0][1]
    truncated = OmegaConf.merge(config, {"data": {"max_response_length": first - 5}})
    out = run(make_loop(truncated, ReplayServer(cfg, turns, tokenizer), tokenizer), rows[0])
    assert len(out.response_ids) == first - 5 and out.extra_fields[STOP_KEY] == "response_length"


def test_a_prompt_the_export_did_not_produce_is_refused(stage, rows, tokenizer, cfg, turns):
    _, config = stage
    row = dict(rows[0])
    row["raw_prompt"] = [dict(m) for m in row["raw_prompt"]]
    row["raw_prompt"][1]["content"] += " (edited)"
    with pytest.raises(ValueError, match="parquet prompt differs"):
        run(make_loop(config, ReplayServer(cfg, turns, tokenizer), tokenizer), row)


def naive_reward_input(out, row):
    """The single-sample batch AgentLoopWorker._compute_score sends to the reward loop (verl 0.9.1).
    The row is copied as Ray's serialization copies it: the naive manager updates ``extra_info`` in place."""
    import torch
    from tensordict import TensorDict
    from verl.protocol import DataProto

    prompts, responses = torch.tensor(out.prompt_ids), torch.tensor(out.response_ids)
    input_ids = torch.cat([prompts, responses])
    batch = TensorDict(
        {
            "prompts": prompts[None],
            "responses": responses[None],
            "input_ids": input_ids[None],
            "attention_mask": torch.ones_like(input_ids)[None],
            "position_ids": torch.arange(len(input_ids))[None],
        },
        batch_size=1,
    )
    non_tensor = {
        **{k: np.array([v]) for k, v in copy.deepcopy(loop_kwargs(row)).items()},
        "__num_turns__": np.array([out.num_turns]),
        "tool_extra_fields": np.array([out.extra_fields], dtype=object),
    }
    return DataProto(batch=batch, non_tensor_batch=non_tensor)


def test_rewards_through_verls_naive_reward_manager(stage, rows, tokenizer, cfg, turns):
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
    from verl.trainer.ppo.reward import load_reward_manager
    from verl.utils.ray_utils import get_event_loop

    _, config = stage
    manager = load_reward_manager(config, tokenizer)
    assert isinstance(manager, NaiveRewardManager)
    scores = []
    for row in rows:
        out = run(make_loop(config, ReplayServer(cfg, turns, tokenizer), tokenizer), row)
        result = get_event_loop().run_until_complete(manager.run_single(naive_reward_input(out, row)))
        assert tuple(result["reward_extra_info"]) == score_keys(cfg.reward)
        scores.append(result["reward_score"])
    assert scores == pytest.approx(
        [2.9, 3.0]
    )  # EX + EM + 0.1 verify (+ 0.1 coherence on the later turn) + 0.8 F1
    out = run(make_loop(config, ReplayServer(cfg, turns, tokenizer), tokenizer), rows[0])
    out.extra_fields.pop(TRAJECTORY_KEY)  # e.g. a row that verl's own single-turn loop ran
    result = get_event_loop().run_until_complete(manager.run_single(naive_reward_input(out, rows[0])))
    assert result["reward_score"] == 0.0 and tuple(result["reward_extra_info"]) == score_keys(cfg.reward)


@pytest.mark.slow
def test_verls_agent_loop_worker_runs_the_registered_loop_and_streams_rewards(
    stage, rows, tokenizer, cfg, turns
):
    """The whole rollout step of verl's trainer on CPU: AgentLoopWorker (registry from the YAML,
    padding, streaming reward) with a real RewardLoopWorker behind a stand-in Ray handle."""
    from types import SimpleNamespace

    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
    from verl.protocol import DataProto
    from verl.utils.dataset.rl_dataset import collate_fn
    from verl.utils.ray_utils import get_event_loop

    _, config = stage
    reward_worker = RewardLoopWorker(config)
    handle = SimpleNamespace(compute_score=SimpleNamespace(remote=reward_worker.compute_score))
    worker = AgentLoopWorker(config, ReplayServer(cfg, turns, tokenizer), None, [handle])
    batch = DataProto.from_single_dict(collate_fn(rows))
    out = get_event_loop().run_until_complete(worker.generate_sequences(batch))
    response_length = config.actor_rollout_ref.rollout.response_length
    assert out.batch["responses"].shape == (2, response_length)
    assert out.batch["rm_scores"].sum(-1).tolist() == pytest.approx([2.9, 3.0])
    assert set(score_keys(cfg.reward)) <= set(out.meta_info["reward_extra_keys"])
    lengths = out.batch["attention_mask"][:, -response_length:].sum(-1)
    for i in range(2):
        mask = out.batch["response_mask"][i]
        assert (
            mask[lengths[i] :].sum() == 0
            and mask[: lengths[i]].sum() == out.non_tensor_batch[RESPONSE_TOKENS_KEY][i]
        )
    assert out.batch["rollout_log_probs"].shape == (2, response_length)


@pytest.mark.slow
def test_plans_merge_command_turns_an_fsdp_checkpoint_into_the_next_stages_model(tmp_path, model_dir):
    """verl's real merger, run as a plan command, on a world-size-1 checkpoint in verl's FSDP layout
    (``model_world_size_1_rank_0.pt``, ``fsdp_config.json``, ``huggingface/``)."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mtsql.engines.commands import run_logged

    data = tmp_path / "stage-0.parquet"
    plan = build_stage_plan(
        load_config(None, ["rl.steps_per_stage=1", "rl.batch_size=1", "rl.mini_batch_size=1"]),
        [CurriculumParquet("stage-0", data, 1), CurriculumParquet("stage-1", data, 1)],
        model_path=model_dir,
        out_dir=tmp_path,
        data_root=FIXTURE_DATA,
    )
    checkpoint, merged = plan[0].produces["checkpoint"], plan[1].produces["merged_model"]
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    (checkpoint / "huggingface").mkdir(parents=True)
    torch.save(model.state_dict(), checkpoint / "model_world_size_1_rank_0.pt")
    (checkpoint / "fsdp_config.json").write_text(json.dumps({"world_size": 1}))
    for path in Path(model_dir).iterdir():
        if path.suffix != ".safetensors":
            shutil.copy(path, checkpoint / "huggingface" / path.name)
    run_logged(plan[1], tmp_path / "log.txt")
    merged_model = AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32)
    for (name, weight), (_, again) in zip(
        model.state_dict().items(), merged_model.state_dict().items(), strict=True
    ):
        assert torch.allclose(weight, again, atol=1e-2), name  # saved in bfloat16
    assert ChatFormat(AutoTokenizer.from_pretrained(merged)).end_of_turn_id == 151645
    assert f"actor_rollout_ref.model.path={merged}" in plan[2].argv

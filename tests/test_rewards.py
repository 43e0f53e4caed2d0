"""Rewards on real trajectories from the scripted policies (gold, gold_with_correction, replay)."""

from __future__ import annotations

import typing

import pytest

from mtsql.base.paths import FIXTURE_DATA
from mtsql.core import rewards as rewards_module
from mtsql.core.agent.env import SqlAgentEnv
from mtsql.core.agent.policies import GoldPolicy, GoldWithCorrectionPolicy
from mtsql.core.agent.settings import EnvConfig
from mtsql.core.data import load_turns
from mtsql.core.rewards import EXEC_VERIFY_TABLE, RewardConfig, compute_rewards, reward_keys
from mtsql.core.sql.clauses import clause_f1

from .episodes import ReplayPolicy, run_episode

THINK = "<think>\nchecking\n</think>\n"
EXEC = THINK + '{}<tool_call>{{"name": "exec_sql", "arguments": {{"sql": "{}"}}}}</tool_call>'
MEMORY = THINK + '{}<tool_call>{{"name": "memory_retrieve", "arguments": {{}}}}</tool_call>'
ANSWER = THINK + "{}<answer_sql>{}</answer_sql>"
PASS, NO_PASS = "<exec_verify>pass</exec_verify>", "<exec_verify>no_pass</exec_verify>"
M_PASS, M_NO_PASS = "<memory_verify>pass</memory_verify>", "<memory_verify>no_pass</memory_verify>"
FIRST_GOLD = "SELECT * FROM pets"
LATER_GOLD = "SELECT count(*) FROM pets WHERE weight  >  10"
OK, EMPTY, ERROR = "SELECT PetID FROM pets", "SELECT * FROM pets WHERE 1 = 0", "SELECT nope FROM pets"


@pytest.fixture(scope="module")
def turns() -> dict:
    found = {
        t.uid: t
        for ds in ("sparc", "cosql")
        for t in load_turns(ds, "dev", root=FIXTURE_DATA, with_hardness=False)
    }
    assert (
        found["sparc-dev-0000/0"].gold_sql == FIRST_GOLD and found["sparc-dev-0000/2"].gold_sql == LATER_GOLD
    )
    return found


def episode(turns, uid, texts, **env):
    env_obj = SqlAgentEnv(EnvConfig(**env), data_root=FIXTURE_DATA)
    return run_episode(env_obj, ReplayPolicy(texts), turns[uid])


def rewards(traj, gold, cfg=RewardConfig(), **kw):
    out = compute_rewards(traj, gold, cfg, data_root=FIXTURE_DATA, **kw)
    assert tuple(out) == reward_keys(cfg) and all(isinstance(v, float) for v in out.values())
    return out


def sqlr1(traj, gold, **kw):
    return rewards(traj, gold, RewardConfig(family="sqlr1"), **kw)


@pytest.mark.parametrize(("sql", "kind"), [(ERROR, "error"), (EMPTY, "empty"), (OK, "ok")])
@pytest.mark.parametrize("verdict", ["pass", "no_pass", None])
def test_exec_verify_table(turns, sql, kind, verdict):
    tag = f"<exec_verify>{verdict}</exec_verify>" if verdict else ""
    traj = episode(turns, "sparc-dev-0000/0", [EXEC.format("", sql), ANSWER.format(tag, FIRST_GOLD)])
    assert traj.steps[0].result_kind == kind and traj.steps[0].verdict == verdict
    expected = {
        ("error", "pass"): 0.0,
        ("error", "no_pass"): 1.0,
        ("empty", "pass"): 0.0,
        ("empty", "no_pass"): 0.1,
        ("ok", "pass"): 1.0,
        ("ok", "no_pass"): 0.0,
    }.get((kind, verdict), 0.0)
    assert EXEC_VERIFY_TABLE.get((kind, verdict), 0.0) == expected
    assert rewards(traj, FIRST_GOLD)["exec_verify"] == pytest.approx(expected)


def test_exec_verify_is_the_mean_over_calls(turns):
    texts = [EXEC.format("", EMPTY), EXEC.format(NO_PASS, FIRST_GOLD), ANSWER.format(PASS, FIRST_GOLD)]
    out = rewards(episode(turns, "sparc-dev-0000/0", texts), FIRST_GOLD)
    assert out["exec_verify"] == pytest.approx((0.1 + 1.0) / 2)
    assert out["clause_f1"] == pytest.approx((clause_f1(EMPTY, FIRST_GOLD) + 1 + 1) / 3)


PARTIAL = "SELECT count(*) FROM pets"  # clause F1 0.8 against LATER_GOLD


@pytest.mark.parametrize(
    ("checked", "verdict", "expected"),
    [
        (LATER_GOLD, M_PASS, 1.0),
        (LATER_GOLD, M_NO_PASS, 0.0),
        (PARTIAL, M_PASS, 0.8),
        (PARTIAL, M_NO_PASS, 0.2),
        (PARTIAL, "", 0.0),
        (PARTIAL, PASS, 0.0),  # a missing verdict, or the wrong tag, is not a pass
    ],
)
def test_coherence(turns, checked, verdict, expected):
    texts = [EXEC.format("", checked), MEMORY.format(PASS), ANSWER.format(verdict, LATER_GOLD)]
    traj = episode(turns, "sparc-dev-0000/2", texts)
    assert traj.steps[1].checked_sql == checked
    out = rewards(traj, LATER_GOLD)
    assert out["coherence"] == pytest.approx(expected)
    assert out["clause_f1"] == pytest.approx((clause_f1(checked, LATER_GOLD) + 1.0) / 2)


ORDERED = (
    "SELECT PetID FROM pets WHERE weight > 10 ORDER BY PetID"  # SELECT and ORDER BY differ from LATER_GOLD
)
UNPARSEABLE = "SELECT nope FROM pets"  # no such column: the Spider parser refuses it
RELEASE_EXEC = THINK + '{}<tool_call>{{"name": "exec_sql", "arguments": {{"code": "{}"}}}}</tool_call>'
RELEASE_MEMORY = (
    THINK + '{}<tool_call>{{"name": "memory_retrieve", "arguments": {{"code": "{}"}}}}</tool_call>'
)


def test_clause_scores_by_hand(turns):
    # per-query values against LATER_GOLD = SELECT count(*) FROM pets WHERE weight > 10, whose clause items
    # are (select count(*)), (from pets), (where weight > 10) and whose Spider parse has select, from, where:
    #   PARTIAL:     items 2 of them, F1 = 2*1*(2/3)/(1+2/3) = 0.8;  clauses 2 of 3 equal (no WHERE) = 2/3
    #   ORDERED:     4 items, 2 shared, F1 = 2*(1/2)*(2/3)/(7/6) = 4/7;  4 clauses, from and where equal = 1/2
    #   UNPARSEABLE: 2 items, 1 shared, F1 = 2*(1/2)*(1/3)/(5/6) = 0.4;  no parse = 0
    texts = [
        EXEC.format("", UNPARSEABLE),
        EXEC.format(NO_PASS, PARTIAL),
        EXEC.format(NO_PASS, ORDERED),
        ANSWER.format(NO_PASS, LATER_GOLD),
    ]
    traj = episode(turns, "sparc-dev-0000/2", texts)
    f1 = rewards(traj, LATER_GOLD, RewardConfig(clause_score="f1"))
    release = rewards(traj, LATER_GOLD, RewardConfig(clause_score="release"))
    assert f1["clause_f1"] == pytest.approx((0.4 + 0.8 + 4 / 7 + 1.0) / 4)  # answer in
    assert release["clause_exact"] == pytest.approx((0 + 2 / 3 + 1 / 2) / 3)  # answer out
    assert "clause_exact" not in f1 and "clause_f1" not in release  # only the clause score the config picks
    assert f1["score"] - release["score"] == pytest.approx(0.8 * (f1["clause_f1"] - release["clause_exact"]))


@pytest.mark.parametrize(
    ("clause_score", "term", "clause", "memory_score"),
    [
        ("f1", "clause_f1", (0.8 + 1 + 1) / 3, 4 / 7),  # exec arguments and the answer
        ("release", "clause_exact", (2 / 3 + 1 + 1 / 2) / 3, 1 / 2),  # the memory call's copy is the third
    ],
)
def test_release_protocol_memory_copies_count_in_the_clause_score_and_are_what_coherence_checks(
    turns, clause_score, term, clause, memory_score
):
    texts = [
        RELEASE_EXEC.format("", PARTIAL),
        RELEASE_EXEC.format(NO_PASS, LATER_GOLD),
        RELEASE_MEMORY.format(PASS, ORDERED),
        ANSWER.format(M_NO_PASS, LATER_GOLD),
    ]
    traj = episode(turns, "sparc-dev-0000/2", texts, protocol="release")
    assert traj.steps[2].checked_sql == ORDERED
    out = rewards(traj, LATER_GOLD, RewardConfig(clause_score=clause_score))
    assert out[term] == pytest.approx(clause)
    assert out["coherence"] == pytest.approx(1 - memory_score)  # no_pass on the memory call's own query


def test_a_memory_call_on_a_first_turn_earns_no_coherence(turns):
    texts = [EXEC.format("", FIRST_GOLD), MEMORY.format(PASS), ANSWER.format(M_PASS, FIRST_GOLD)]
    traj = episode(turns, "sparc-dev-0000/0", texts)
    assert rewards(traj, FIRST_GOLD)["coherence"] == 0.0
    assert traj.steps[2].flow_errors == ["<memory_verify> without a fresh tool result to judge"]


def test_gold_policy_scores_the_maximum(turns):
    env = SqlAgentEnv(data_root=FIXTURE_DATA)
    first = rewards(run_episode(env, GoldPolicy(), turns["sparc-dev-0000/0"]), FIRST_GOLD)
    later = rewards(run_episode(env, GoldPolicy(), turns["sparc-dev-0000/2"]), LATER_GOLD)
    assert (first["ex"], first["em"], first["exec_verify"], first["coherence"], first["clause_f1"]) == (
        1,
        1,
        1,
        0,
        1,
    )
    assert first["score"] == pytest.approx(2.9)
    assert later["score"] == pytest.approx(3.0) and later["format"] == 1.0
    later_traj = run_episode(env, GoldPolicy(), turns["sparc-dev-0000/2"])
    assert rewards(later_traj, LATER_GOLD, RewardConfig(family="outcome"))["score"] == 2.0


def test_gold_with_correction_rewards_follow_the_recorded_steps(turns):
    env = SqlAgentEnv(data_root=FIXTURE_DATA)
    policy = GoldWithCorrectionPolicy(data_root=FIXTURE_DATA)
    for uid in ("sparc-dev-0000/2", "sparc-dev-0001/1", "sparc-dev-0001/2", "cosql-dev-0001/0"):
        turn = turns[uid]
        traj = run_episode(env, policy, turn)
        wrong, right = traj.steps[0], traj.steps[1]
        out = rewards(traj, turn.gold_sql)
        assert out["exec_verify"] == pytest.approx(
            (EXEC_VERIFY_TABLE[wrong.result_kind, "no_pass"] + 1.0) / 2
        )
        assert out["clause_f1"] == pytest.approx((clause_f1(wrong.sql, turn.gold_sql) + 2.0) / 3)
        assert right.sql == turn.gold_sql and (out["ex"], out["em"], out["format"]) == (1.0, 1.0, 1.0)


def test_sqlr1_values(turns):
    gold = episode(turns, "sparc-dev-0000/0", [EXEC.format("", FIRST_GOLD), ANSWER.format(PASS, FIRST_GOLD)])
    answer_text = f"{PASS}<answer_sql>{FIRST_GOLD}</answer_sql>"
    ratio = len(FIRST_GOLD) / len(answer_text)
    out = sqlr1(gold, FIRST_GOLD, response_tokens=1024)
    assert (out["sqlr1_format"], out["sqlr1_execution"], out["sqlr1_result"]) == (1.0, 2.0, 3.0)
    assert out["sqlr1_length"] == pytest.approx(0.25 + ratio) and out["score"] == pytest.approx(6.25 + ratio)
    assert sqlr1(gold, FIRST_GOLD, response_tokens=10_000)["sqlr1_length"] == pytest.approx(0.5 + ratio)
    words = sum(len(m["content"].split()) for m in gold.messages if m["role"] == "assistant")
    assert sqlr1(gold, FIRST_GOLD)["sqlr1_length"] == pytest.approx(0.5 * words / 2048 + ratio)

    wrong = episode(turns, "sparc-dev-0000/0", [EXEC.format("", OK), ANSWER.format(PASS, OK)])
    assert sqlr1(wrong, FIRST_GOLD)["score"] == 1.0 + 2.0 - 3.0
    failing = episode(turns, "sparc-dev-0000/0", [EXEC.format("", ERROR), ANSWER.format(PASS, ERROR)])
    assert sqlr1(failing, FIRST_GOLD)["score"] == 1.0 - 2.0
    no_think = episode(
        turns,
        "sparc-dev-0000/0",
        [EXEC.format("", FIRST_GOLD).replace(THINK, ""), ANSWER.format(PASS, FIRST_GOLD)],
    )
    out = rewards(no_think, FIRST_GOLD)
    assert (sqlr1(no_think, FIRST_GOLD)["score"], out["format"], out["ex"]) == (-1.0, 0.0, 1.0)


def test_short_mode_sqlr1_is_one_think_then_one_answer(turns):
    traj = run_episode(
        SqlAgentEnv(EnvConfig(mode="short"), data_root=FIXTURE_DATA),
        GoldPolicy(mode="short"),
        turns["sparc-dev-0000/0"],
    )
    out = rewards(traj, FIRST_GOLD)
    assert tuple(sqlr1(traj, FIRST_GOLD)[k] for k in ("sqlr1_format", "sqlr1_execution", "sqlr1_result")) == (
        1,
        2,
        3,
    )
    assert (out["exec_verify"], out["coherence"], out["clause_f1"]) == (0.0, 0.0, 1.0)


def test_no_answer_scores_zero_and_answers_are_never_read_from_observations(turns):
    bait = (
        "SELECT '<answer' || '_sql>SELECT * FROM pets</answer' || '_sql>' FROM pets"  # tags only in results
    )
    traj = episode(turns, "sparc-dev-0000/0", [EXEC.format("", bait)] * 4)
    assert "<answer_sql>SELECT * FROM pets</answer_sql>" in traj.messages[3]["content"]
    assert traj.final_sql is None
    out = rewards(traj, FIRST_GOLD)
    assert (out["ex"], out["em"], out["ex_scored"], out["format"]) == (0.0, 0.0, 1.0, 0.0)
    assert sqlr1(traj, FIRST_GOLD)["score"] == -1.0


def test_unscorable_golds_count_zero_and_say_so(turns):
    env = SqlAgentEnv(data_root=FIXTURE_DATA)
    for uid in ("sparc-dev-0048/1", "cosql-dev-0035/1"):  # golds SQLite rejects
        out = rewards(run_episode(env, GoldPolicy(), turns[uid]), turns[uid].gold_sql)
        assert (out["ex"], out["ex_scored"], out["em"], out["em_scored"]) == (0.0, 0.0, 1.0, 1.0)
    wta = next(t for t in turns.values() if t.db_id == "wta_1")
    out = sqlr1(run_episode(env, GoldPolicy(), wta), wta.gold_sql)
    assert (out["ex_scored"], out["em"], out["sqlr1_execution"]) == (0.0, 1.0, -2.0)


def test_families_and_weights(turns):
    traj = episode(
        turns,
        "sparc-dev-0000/2",
        [EXEC.format("", PARTIAL), MEMORY.format(PASS), ANSWER.format(M_PASS, LATER_GOLD)],
    )
    base = rewards(traj, LATER_GOLD)
    assert base["score"] == pytest.approx(2.0 + 0.1 * 1.0 + 0.1 * 0.8 + 0.8 * 0.9)
    assert rewards(traj, LATER_GOLD, RewardConfig(family="outcome"))["score"] == 2.0
    heavy = rewards(
        traj,
        LATER_GOLD,
        RewardConfig(ex=2.0, em=0.0, exec_verify=1.0, coherence=0.0, clause_f1=0.0, format=0.5),
    )
    assert heavy["score"] == pytest.approx(2.0 + 0.5 + 1.0)
    with pytest.raises(ValueError, match="reward.family"):
        compute_rewards(traj, LATER_GOLD, RewardConfig(family="dense"), data_root=FIXTURE_DATA)


def test_an_empty_prediction_matching_an_empty_gold_can_earn_no_credit(turns):
    empty_gold, other_empty = (
        "SELECT PetID FROM pets WHERE pet_age > 100",
        "SELECT PetID FROM pets WHERE weight > 1000",
    )
    traj = episode(
        turns, "sparc-dev-0000/0", [EXEC.format("", other_empty), ANSWER.format(PASS, other_empty)]
    )
    credited = rewards(traj, empty_gold, RewardConfig(family="sqlr1"))
    assert (credited["ex"], credited["sqlr1_result"]) == (1.0, 3.0), "by default [] == [] is a match"
    refused = rewards(traj, empty_gold, RewardConfig(family="sqlr1", empty_match_credit=False))
    assert (refused["ex"], refused["sqlr1_result"], refused["sqlr1_length"]) == (0.0, 0.0, 0.0)
    assert rewards(traj, empty_gold, RewardConfig(family="outcome", empty_match_credit=False))["score"] == 0.0
    assert refused["score"] == 1.0 + 2.0, "format and execution only: no result credit, and no penalty either"
    right = episode(turns, "sparc-dev-0000/0", [EXEC.format("", FIRST_GOLD), ANSWER.format(PASS, FIRST_GOLD)])
    assert rewards(right, FIRST_GOLD, RewardConfig(empty_match_credit=False))["ex"] == 1.0, (
        "non-empty golds keep it"
    )


def _refuse(name):
    def refuse(*args, **kwargs):
        raise AssertionError(f"{name} is not a term of this family")

    return refuse


OTHER_FAMILIES_TERMS = {  # the functions of the rewards module each family must not call
    "outcome": (
        "sqlr1_terms",
        "exec_verify_reward",
        "coherence_reward",
        "clause_f1_reward",
        "clause_exact_reward",
        "release_clause_score",
        "clause_f1",
    ),
    "sqlr1": (
        "format_reward",
        "exec_verify_reward",
        "coherence_reward",
        "clause_f1_reward",
        "clause_exact_reward",
        "release_clause_score",
        "clause_f1",
    ),
    "process": ("sqlr1_terms",),
}


@pytest.mark.parametrize("family", sorted(OTHER_FAMILIES_TERMS))
def test_a_family_computes_only_its_own_terms(turns, monkeypatch, family):
    texts = [EXEC.format("", PARTIAL), MEMORY.format(PASS), ANSWER.format(M_PASS, LATER_GOLD)]
    traj = episode(turns, "sparc-dev-0000/2", texts)
    expected = rewards(traj, LATER_GOLD, RewardConfig(family=family))
    for name in OTHER_FAMILIES_TERMS[family]:
        monkeypatch.setattr(rewards_module, name, _refuse(name))
    assert rewards(traj, LATER_GOLD, RewardConfig(family=family)) == expected


@pytest.mark.parametrize(
    ("clause_score", "unused"),
    [("f1", ("clause_exact_reward", "release_clause_score")), ("release", ("clause_f1_reward", "clause_f1"))],
)
def test_process_computes_only_the_clause_score_it_is_configured_for(
    turns, monkeypatch, clause_score, unused
):
    texts = [EXEC.format("", PARTIAL), MEMORY.format(PASS), ANSWER.format(M_PASS, LATER_GOLD)]
    traj = episode(turns, "sparc-dev-0000/2", texts)
    cfg = RewardConfig(clause_score=clause_score)
    expected = rewards(traj, LATER_GOLD, cfg)
    for name in unused:
        monkeypatch.setattr(rewards_module, name, _refuse(name))
    assert rewards(traj, LATER_GOLD, cfg) == expected


def test_a_new_family_is_one_registry_entry(turns, monkeypatch):
    traj = episode(turns, "sparc-dev-0000/0", [EXEC.format("", OK), ANSWER.format(PASS, FIRST_GOLD)])
    monkeypatch.setitem(
        rewards_module.FAMILIES,
        "answered",
        rewards_module.Family(lambda s: {"answered": 1.0, "score": 2 * s.ex}, lambda cfg: ("answered",)),
    )
    out = rewards(traj, FIRST_GOLD, RewardConfig(family="answered"))
    assert out == {"score": 2.0, "ex": 1.0, "em": 1.0, "ex_scored": 1.0, "em_scored": 1.0, "answered": 1.0}


def test_the_config_offers_exactly_the_registered_families():
    assert set(typing.get_args(typing.get_type_hints(RewardConfig)["family"])) == set(rewards_module.FAMILIES)

"""The ``env`` and ``sql`` sections (the agent environment and its SQL sandbox), and the sampling policies'
vocabulary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from mtsql.base.config import Chars, Items, Messages, Range, Seconds, result

# Choice-valued settings: a value outside these is a config error when the config loads.


Policy = Literal["model", "gold", "gold_with_correction", "gold_grounded", "own_mistakes"]


@dataclass(frozen=True)
class SqlConfig:
    """The SQL sandbox and the evaluator."""

    timeout_s: Seconds = result(5.0)  # a query that runs longer fails: it decides observations and scores
    max_rows: Items = result(10_000)
    semantics: Literal["official", "strict"] = result("official")
    exec_semantics: Literal["testsuite", "sparc"] = result("testsuite")


@dataclass(frozen=True)
class EnvConfig:
    """The agent environment (docs/protocol.md)."""

    mode: Literal["long", "short"] = result(
        "long"
    )  # long: tools and verification; short: a direct SQL answer
    max_messages: Messages = result(4)  # assistant messages per question (a dialogue turn's episode)
    max_invalid: Messages | None = result(
        None
    )  # end the episode after this many unparseable messages in a row
    memory: Literal["gold", "predicted"] = result(
        "gold"
    )  # gold: the paper's oracle; predicted: the agent's own
    # answers
    result_chars: Chars = result(200)  # rendered result preview in an observation
    sample_values: Annotated[int, Range(0, most=1000)] = result(
        3
    )  # example values per column in the schema prompt
    thinking: bool = result(True)
    protocol: Literal["mtsql", "release"] = result(
        "mtsql"
    )  # release: the released MTSQL-R1 checkpoints' tool
    # calls (exec_sql(code), memory_retrieve(code)) and
    # observation shape, first call of a message run
    # (docs/paper.md)
    # cap on a whole observation, cut in the middle (release RL: 8000); at least
    # agent.env.MIN_OBSERVATION_CHARS
    observation_chars: Annotated[int, Range(100, most=10**7)] | None = result(None)
    error_hint: bool = result(False)  # an exec_sql error for a missing table / column also names the tables /
    # columns that exist, as a database client would; default off until the
    # warm-start ablation measures it (configs/experiments/warmstart-ablation.yaml)

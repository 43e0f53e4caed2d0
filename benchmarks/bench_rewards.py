"""Reward scoring time per trajectory, by family.

    python benchmarks/bench_rewards.py [--repeat 5] [--families outcome,process,sqlr1]

Runs the scripted gold-with-correction policy (a wrong query, its real result, no_pass, then the gold)
on every fixture dev turn of sparc and cosql, then times ``compute_rewards`` on each trajectory under
each family, in the order given. The first family's first pass meets cold in-process caches (gold
parses, gold results of scoring); later passes, and every pass of the families after it, are warm,
as in training, where a group of rollouts shares one gold. Prints the median and mean
milliseconds per trajectory of the first pass and of the warm passes, and the load average before and
after (the figures are only comparable at a similar load).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

from mtsql.base.paths import FIXTURE_DATA
from mtsql.core.agent.env import SqlAgentEnv, Trajectory
from mtsql.core.agent.policies import GoldWithCorrectionPolicy
from mtsql.core.data import load_turns
from mtsql.core.data.records import Turn
from mtsql.core.rewards import RewardConfig, compute_rewards


def episodes() -> list[tuple[Trajectory, Turn]]:
    """One gold-with-correction trajectory per fixture dev turn (seeded by the turn's uid)."""
    env = SqlAgentEnv(data_root=FIXTURE_DATA)
    policy = GoldWithCorrectionPolicy(data_root=FIXTURE_DATA)
    out = []
    for dataset in ("sparc", "cosql"):
        for turn in load_turns(dataset, "dev", root=FIXTURE_DATA, with_hardness=False):
            rng = random.Random(turn.uid)
            env.reset(turn)
            done = False
            while not done:
                _, done, _ = env.step(policy(list(env.trajectory.messages), turn, rng))
            out.append((env.trajectory, turn))
    return out


def time_pass(rows: list[tuple[Trajectory, Turn]], cfg: RewardConfig) -> list[float]:
    """Seconds of ``compute_rewards`` for each trajectory, in order."""
    times = []
    for trajectory, turn in rows:
        start = time.perf_counter()
        compute_rewards(trajectory, turn.gold_sql, cfg, data_root=FIXTURE_DATA)
        times.append(time.perf_counter() - start)
    return times


def line(name: str, times: list[float]) -> str:
    median, mean = 1e3 * statistics.median(times), 1e3 * statistics.mean(times)
    return f"{name:<12} median {median:7.3f} ms   mean {mean:7.3f} ms   ({len(times)} scorings)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeat", type=int, default=5, help="passes over the trajectories (the first is cold)"
    )
    parser.add_argument("--families", default="outcome,process,sqlr1")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    rows = episodes()
    print(f"{len(rows)} trajectories from the fixture dev turns")
    for family in args.families.split(","):
        cfg = RewardConfig(family=family)
        passes = [time_pass(rows, cfg) for _ in range(args.repeat)]
        print(f"{family}:")
        print("  " + line("first pass", passes[0]))
        print("  " + line("warm passes", [t for p in passes[1:] for t in p]))
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()

"""SQL-R1's Tables 1-3 with this run's numbers beside the paper's, for a run that evaluates its benchmarks.

Table 1: EX on Spider dev, Spider test and BIRD dev; Table 2: EX on the robustness sets Spider-DK,
Spider-Syn and Spider-Realistic; Table 3: BIRD dev EX by difficulty. Each of this run's evaluations
gives a row per decoding (greedy, and the vote with ``evaluate.vote``), read from the items the
official scorer wrote (``<dataset>/items.jsonl``, the greedy ones in ``<dataset>/greedy/``), keyed by
dataset name: a ``bird`` evaluation fills the BIRD columns (its items carry ``difficulty``). The
paper's rows (docs/paper.md) come with the 95 % interval a rate of that size has on the full set.
"""

from __future__ import annotations

from pathlib import Path

from mtsql.app.report.markdown import table
from mtsql.app.report.runs import datasets, evaluation_of
from mtsql.app.report.stats import Rate, wilson
from mtsql.base.artifacts import Artifact
from mtsql.base.files import read_json, read_jsonl

# The benchmarks of SQL-R1's tables: (column, dataset in mtsql, size of the full set the paper scored).
TABLE_1 = (("Spider dev", "spider", 1034), ("Spider test", None, 2147), ("BIRD dev", "bird", 1534))
TABLE_2 = (
    ("Spider-DK", "spider_dk", 535),
    ("Spider-Syn", "spider_syn", 1034),
    ("Spider-Realistic", "spider_realistic", 508),
)
DIFFICULTIES = (("simple", 925), ("moderate", 465), ("challenging", 144), ("total", 1534))  # BIRD dev
BENCHMARKS = {dataset for _, dataset, _ in TABLE_1 + TABLE_2 if dataset}
ROBUSTNESS = {"spider_dk", "spider_syn", "spider_realistic", "bird"}  # any of these: the section is shown

PAPER_TABLE_1 = {"Qwen2.5-Coder-7B (base)": (77.4, 79.4, 58.2), "SQL-R1-7B": (87.6, 88.7, 66.6)}
PAPER_TABLE_2 = {
    "SQL-R1-3B": (70.5, 66.4, 71.5),
    "SQL-R1-7B": (78.1, 76.7, 83.3),
    "SQL-R1-14B": (79.3, 78.5, 86.2),
    "OmniSQL-7B (Qwen2.5-Coder-7B)": (77.8, 69.6, 78.0),
}
PAPER_TABLE_3 = {"SQL-R1-7B": (72.1, 60.8, 51.0, 66.6), "SQL-R1-14B": (72.4, 59.7, 56.5, 67.1)}


def sqlr1_section(evals: dict[str, Artifact]) -> list[str]:
    """The three tables, or nothing when no evaluation of the run scored a robustness set or BIRD."""
    scored = {label: art for label, art in evals.items() if set(datasets(art)) & BENCHMARKS}
    if not any(set(datasets(art)) & ROBUSTNESS for art in scored.values()):
        return []
    ours = [
        (f"ours: {label}, {decoding}", art, folders)
        for label, art in scored.items()
        for decoding, folders in _decodings(art).items()
    ]
    lines = [
        "## SQL-R1's tables, this run beside the paper",
        "",
        _who(scored),
        "",
        "Execution accuracy in %, [95 % interval] and (correct/scored) for this run; the paper's rows give "
        "its reported EX with the interval a rate of that size has on the full set (n).",
        "",
    ]
    lines += ["**Table 1** (SQL-R1's Table 1): Spider dev, Spider test, BIRD dev.", ""]
    rows = [[name, *(_ours(folders, dataset) for _, dataset, _ in TABLE_1)] for name, _, folders in ours]
    rows += [
        [f"paper: {model}", *(_paper(v, n) for v, (_, _, n) in zip(values, TABLE_1, strict=True))]
        for model, values in PAPER_TABLE_1.items()
    ]
    lines += table(["model", *(column for column, _, _ in TABLE_1)], rows)
    lines += ["**Table 2** (SQL-R1's Table 2, robustness): Spider-DK, Spider-Syn, Spider-Realistic.", ""]
    rows = [[name, *(_ours(folders, dataset) for _, dataset, _ in TABLE_2)] for name, _, folders in ours]
    rows += [
        [f"paper: {model}", *(_paper(v, n) for v, (_, _, n) in zip(values, TABLE_2, strict=True))]
        for model, values in PAPER_TABLE_2.items()
    ]
    lines += table(["model", *(column for column, _, _ in TABLE_2)], rows)
    lines += ["**Table 3** (SQL-R1's Table 3): BIRD dev by difficulty.", ""]
    rows = [[name, *(_difficulty(folders, level) for level, _ in DIFFICULTIES)] for name, _, folders in ours]
    rows += [
        [f"paper: {model}", *(_paper(v, n) for v, (_, n) in zip(values, DIFFICULTIES, strict=True))]
        for model, values in PAPER_TABLE_3.items()
    ]
    lines += table(["model", *(level for level, _ in DIFFICULTIES)], rows)
    lines += _dk_types(ours)
    missing = [
        column
        for column, dataset, _ in TABLE_1 + TABLE_2
        if not dataset or not any(dataset in folders for _, _, folders in ours)
    ]
    if missing:
        lines += [
            f"Not evaluated in this run: {', '.join(missing)} (mtsql reads no Spider test set; BIRD and "
            "Spider-Realistic are not shipped: docs/data.md says where to put them).",
            "",
        ]
    return lines


def _dk_types(ours: list[tuple[str, Artifact, dict[str, Path]]]) -> list[str]:
    """Spider-DK's EX by question type (``summary.json``'s ``ex_by_type``), for the rows that scored it."""
    found = {
        name: read_json(folders["spider_dk"] / "summary.json").get("ex_by_type") or {}
        for name, _, folders in ours
        if "spider_dk" in folders
    }
    kinds = sorted({kind for by_type in found.values() for kind in by_type}, key=lambda k: (len(k), k))
    if not kinds:
        return []
    rows = [
        [
            name,
            *(
                Rate(by_type[k]["correct"], by_type[k]["scored"]).cell() if k in by_type else None
                for k in kinds
            ),
        ]
        for name, by_type in found.items()
    ]
    return [
        "Spider-DK by question type (0: no domain knowledge needed; 1-5: the Spider-DK paper's kinds T1-T5; "
        "23, 34: two kinds), this run:",
        "",
        *table(["model", *(f"type {k}" for k in kinds)], rows),
    ]


def _who(scored: dict[str, Artifact]) -> str:
    """Which model ran where, said plainly: the scale of the two sides differs by orders of magnitude."""
    first = next(iter(scored.values()))
    model = evaluation_of(first).model_name
    hw = first.manifest.get("hardware") or {}
    where = (
        f"{len(hw['gpus'])} GPU(s)"
        if hw.get("gpus")
        else f"a CPU with {hw.get('cores', '?')} cores and no GPU"
    )
    return (
        f"**Ours are not the paper's setting**: `{model}` on {where}, scored on the slices of each dev set "
        "this run's config picks (n in each cell); the paper's are Qwen2.5-Coder models of 3B to 14B "
        "parameters trained with GRPO on GPUs, scored on the full sets. The tables put the same measurements "
        "side by side; they do not compare the two."
    )


def _decodings(art: Artifact) -> dict[str, dict[str, Path]]:
    """``{decoding: {dataset: folder of its items.jsonl}}``: greedy first, then the vote."""
    voted = evaluation_of(art).decoding
    out: dict[str, dict[str, Path]] = {}
    for dataset in datasets(art):
        folder = art.path / dataset
        if (folder / "greedy" / "items.jsonl").exists():
            out.setdefault("greedy", {})[dataset] = folder / "greedy"
        out.setdefault(voted, {})[dataset] = folder
    return out


def _rate(items: list[dict]) -> Rate:
    scored = [item["exec_match"] for item in items if item["exec_match"] is not None]
    return Rate(sum(1 for value in scored if value == 1), len(scored))


def _ours(folders: dict[str, Path], dataset: str | None) -> str | None:
    if dataset is None or dataset not in folders:
        return None
    return _rate(read_jsonl(folders[dataset] / "items.jsonl")).cell()


def _difficulty(folders: dict[str, Path], level: str) -> str | None:
    if "bird" not in folders:
        return None
    items = read_jsonl(folders["bird"] / "items.jsonl")
    return _rate([i for i in items if level == "total" or i.get("difficulty") == level]).cell()


def _paper(percent: float, n: int) -> str:
    """A reported EX with the Wilson interval of that rate on ``n`` questions."""
    low, high = wilson(round(percent / 100 * n), n)
    return f"{percent:.1f} [{100 * low:.1f}, {100 * high:.1f}] (n={n:,})"

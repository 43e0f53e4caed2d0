"""The warm-start ablation side by side (``pipelines/warmstart-ablation.yaml``, docs/method.md).

One row per long-horizon evaluation of an SFT *variant*'s model (its key's ``model_variant``: the model of a
labelled ``sft-iterate`` step) and dev set: what that model trained on (sampled trajectories holding a
correction, from the sample artifact its reject input read), EX, the ``exec_verify`` calibration (no_pass
said, of them on wrong queries; precision and recall of no_pass), after a failed ``exec_sql`` how often
another query ran and how often the turn still ended right, the revisions that made a wrong query right
against a right one wrong, and EX against the short-horizon SFT model of the same items and budget (the sft
evaluation in short mode, that of the pipeline's ``report.warmstart.baseline`` model when it names one) with
the 95 % interval of the difference. Shown when the pipeline file names the section and the run holds such an
evaluation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from mtsql.app.report.evaluation import ex_rate
from mtsql.app.report.markdown import table
from mtsql.app.report.runs import datasets, evaluation_of, is_long_horizon, phase_of, preferred
from mtsql.app.report.stats import Rate
from mtsql.base.artifacts import MANIFEST, Artifact
from mtsql.base.files import read_json


@dataclass(frozen=True)
class WarmstartSettings:
    """``report.warmstart`` of a pipeline file: ``baseline``, the SFT model (``sft-<variant>``) whose
    short-horizon evaluation every design is set against (None: the preferred short-horizon SFT
    evaluation)."""

    baseline: str | None = None

    def check(self, model_ref: re.Pattern) -> str | None:
        """What is wrong with these settings, None when nothing."""
        variant = self.baseline is None or (
            model_ref.fullmatch(self.baseline)
            and self.baseline.startswith("sft-")
            and not re.fullmatch(r"sft-r[0-9]+", self.baseline)
        )
        return (
            None if variant else f"baseline '{self.baseline}' is not an SFT variant's model (sft-<variant>)"
        )

    @property
    def variant(self) -> str | None:
        """The variant of the baseline's model (``check`` has made sure it names one)."""
        return None if self.baseline is None else self.baseline.partition("-")[2]


def variant_evaluations(evals: dict[str, Artifact]) -> dict[str, Artifact]:
    """label -> evaluation, of the long-horizon evaluations of an SFT variant's model (its key's
    ``model_variant``)."""
    return {
        label: art
        for label, art in evals.items()
        if phase_of(art) == "sft" and is_long_horizon(art) and art.key.model_variant is not None
    }


def _upstream(art: Artifact, name: str) -> Artifact | None:
    """The artifact ``art`` read as input ``name``, from the path its manifest records."""
    ref = art.manifest.get("inputs", {}).get(name)
    path = Path(ref["path"]) if ref and ref.get("path") else None
    if path is None or not (path / MANIFEST).exists():
        return None
    return Artifact(path, read_json(path / MANIFEST))


def short_baseline(evals: dict[str, Artifact], variant: str | None) -> Artifact | None:
    """The short-horizon evaluation of an SFT model (that of ``variant``'s model when there are several)."""
    found = [art for art in evals.values() if phase_of(art) == "sft" and evaluation_of(art).mode == "short"]
    return max(found, key=lambda art: (art.key.model_variant == variant, preferred(art)), default=None)


def trained_corrections(evaluation: Artifact) -> str | None:
    """``k/n``: the sampled trajectories the scored model's SFT round chose from that hold a correction (a
    no_pass, then another query), following the manifests: evaluation -> sft -> reject -> sample."""
    sampled = evaluation
    for name in ("model", "reject", "sample"):
        sampled = _upstream(sampled, name) if sampled is not None else None
    if sampled is None or not sampled.metrics.get("count"):
        return None
    count = sampled.metrics["count"]
    return f"{round(sampled.metrics.get('self_correction_rate', 0.0) * count)}/{count}"


def warmstart_section(evals: dict[str, Artifact], settings: WarmstartSettings) -> list[str]:
    found = variant_evaluations(evals)
    if not found:
        return []
    short = short_baseline(evals, settings.variant)
    rows = []
    for label, art in found.items():
        for dataset in datasets(art):
            block = evaluation_of(art).datasets[dataset]
            t, counts = block.verdict_calibration["exec_verify"]["table"], block.revisions
            ex = ex_rate(art, dataset)
            said, wrong = t["no_pass"]["right"] + t["no_pass"]["wrong"], t["no_pass"]["wrong"]
            calibration = [
                f"{said} ({wrong})",
                Rate(wrong, said).cell(),
                Rate(wrong, wrong + t["pass"]["wrong"]).cell(),
            ]
            failure = [
                Rate(counts["ran_after"], counts["with_error"]).cell(),
                Rate(counts["resolved"], counts["with_error"]).cell(),
                f"{counts['wrong_to_right']} / {counts['right_to_wrong']}",
            ]
            versus = None
            if short is not None and dataset in datasets(short):
                difference = ex.minus(ex_rate(short, dataset))
                versus = (
                    None
                    if difference is None
                    else "{:+.1f} [{:+.1f}, {:+.1f}]".format(*(100 * x for x in difference))
                )
            rows.append([label, dataset, trained_corrections(art), ex.cell(), *calibration, *failure, versus])
    against = f"`{short.label}`" if short is not None else "a short-horizon SFT model (none in this run)"
    return [
        "## Warm-start designs side by side",
        "",
        "Each long-horizon SFT variant of this run on each dev set (`pipelines/warmstart-ablation.yaml`): "
        "the sampled trajectories its SFT round chose from that hold a correction (a no_pass, then another "
        "query), EX, the `exec_verify` verdicts "
        "(no_pass said, in brackets those said of wrong queries; *precision no_pass* = wrong among no_pass, "
        "*recall no_pass* = no_pass among wrong), after a failed `exec_sql` the turns in which another query "
        "ran and those whose answer was right all the same (`measures.revisions`, n = turns with a failed "
        f"exec_sql), revisions wrong → right / right → wrong, and EX minus that of {against} on the same "
        "dev set, in points with the 95 % interval of the difference.",
        "",
        *table(
            [
                "evaluation",
                "dataset",
                "training data with a correction",
                "EX",
                "no_pass said (on wrong)",
                "precision no_pass",
                "recall no_pass",
                "another query ran after a failure",
                "ended right after a failure",
                "wrong → right / right → wrong",
                "long − short EX (points)",
            ],
            rows,
            numeric_from=2,
        ),
    ]

"""Who wrote the trajectories each self-taught round kept: a scripted policy or the model.

A kept row written by a model carries the token ids it generated (``response_ids``); a scripted
policy's (``gold``, ``gold_grounded``, ...) has none; a kept row the model wrote may be a *recovery*.
Each reject artifact is matched to the sample artifact it read (its manifest's ``inputs.sample``),
whose metrics say which policy and model sampled.
"""

from __future__ import annotations

from mtsql.app.report.markdown import table
from mtsql.base.artifacts import Artifact, ArtifactKey
from mtsql.core.measures.revisions import is_recovery
from mtsql.core.trajectories import ScoredRow, read_rows


def written_by(row: ScoredRow) -> str:
    """``model`` for a trajectory a model generated, ``scripted`` for a scripted policy's."""
    return "model" if row.response_ids is not None else "scripted"


def sample_of(reject: Artifact, arts: dict[str, Artifact]) -> Artifact | None:
    """The sample artifact a reject artifact read: by the fingerprint its manifest names, else the sample
    artifact of the same round and variant."""
    wanted = reject.manifest.get("inputs", {}).get("sample", {}).get("fingerprint")
    found = next((art for art in arts.values() if wanted and art.fingerprint == wanted), None)
    same = ArtifactKey("sample", reject.key.round, reject.key.variant)
    return found or next((art for art in arts.values() if art.key == same), None)


def kept_rows(arts: dict[str, Artifact]) -> list[dict]:
    """One row per reject artifact (main rounds first, then variants, by round): what it kept, by writer."""
    found = [
        (art.key.variant or "", art.key.round, art)
        for art in arts.values()
        if art.key.stage == "reject" and art.key.round is not None
    ]
    rows = []
    for variant, k, art in sorted(found, key=lambda item: item[:2]):
        kept = read_rows(art.path / "kept.jsonl") if (art.path / "kept.jsonl").exists() else []
        writers = [written_by(row) for row in kept]
        recovered = sum(
            written_by(row) == "model" and is_recovery(row.trajectory, row.execution) for row in kept
        )
        sampled = sample_of(art, arts)
        m = sampled.metrics if sampled is not None else {}
        policy = m.get("policy")
        rows.append(
            {
                "label": art.label,
                "round": k,
                "variant": variant or None,
                "policy": policy,
                "sampled_by": m.get("model") if policy == "model" else policy,
                "sampled": art.metrics.get("sampled"),
                "items": art.metrics.get("items"),
                "solved": art.metrics.get("solved"),
                "kept": len(kept),
                "by_scripted": writers.count("scripted"),
                "by_model": writers.count("model"),
                "recoveries": recovered,
            }
        )
    return rows


def kept_section(arts: dict[str, Artifact]) -> list[str]:
    """The table of ``kept_rows`` and one sentence on the trajectories the model wrote itself."""
    rows = kept_rows(arts)
    if not rows:
        return []
    own = sum(row["by_model"] for row in rows)
    lines = [
        "## Kept trajectories by who wrote them",
        "",
        "Per reject-sampling artifact: the policy that sampled (`model`: the model named, at the sampling "
        "temperature), the trajectories sampled and the items with a correct one, and the kept trajectories "
        "split by writer: a scripted policy (from the gold SQL) or the model itself, and the model's own "
        "*recoveries* among them (an `exec_sql` failed, a later query ran, the answer is right: "
        "`measures.revisions.is_recovery`).",
        "",
        *table(
            [
                "artifact",
                "sampled by",
                "trajectories",
                "items",
                "items solved",
                "kept",
                "kept, scripted policy",
                "kept, written by the model",
                "kept recoveries by the model",
            ],
            [
                [
                    r["label"],
                    r["sampled_by"],
                    r["sampled"],
                    r["items"],
                    r["solved"],
                    r["kept"],
                    r["by_scripted"],
                    r["by_model"],
                    r["recoveries"],
                ]
                for r in rows
            ],
            numeric_from=2,
        ),
    ]
    model_rounds = [r["label"] for r in rows if r["policy"] == "model"]
    if model_rounds:
        lines += [
            f"The model wrote {own} of the kept trajectories itself ({', '.join(model_rounds)} sampled the "
            "model)."
            if own
            else f"The model wrote none of the kept trajectories: no sample of "
            f"{', '.join(model_rounds)} was correct.",
            "",
        ]
    return lines

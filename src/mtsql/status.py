"""`mtsql status`: what a run folder holds, read from manifests only."""

from __future__ import annotations

from pathlib import Path

from mtsql.artifacts import MANIFEST, read_manifest
from mtsql.errors import UsageError


def run_folder(run: str, runs_dir: Path) -> Path:
    """A run name under ``runs_dir`` or a path to a run folder; it must exist."""
    for candidate in (Path(run), runs_dir / run):
        if candidate.is_dir():
            return candidate
    raise UsageError(f"no run '{run}' (looked for {run} and {runs_dir / run}); `mtsql status` lists runs")


def status_rows(folder: Path) -> list[tuple[str, ...]]:
    """One row per artifact folder: complete ones from their manifests, crashed ones as partial."""
    rows = []
    for stage_dir in sorted(p for p in folder.iterdir() if p.is_dir()):
        latest = (stage_dir / "latest").resolve() if (stage_dir / "latest").exists() else None
        for entry in sorted(p for p in stage_dir.iterdir() if p.is_dir() and p.name != "latest"):
            manifest = read_manifest(entry)
            if manifest is None:
                state = "partial (crashed or running)" if entry.name.endswith(".partial") else f"no {MANIFEST}"
                rows.append((stage_dir.name, "", entry.name.split(".")[0], state, "", ""))
                continue
            state = "complete" + (" (latest)" if entry.resolve() == latest else "")
            rows.append((manifest["stage"], str(manifest.get("round") or ""), manifest["fingerprint"][:12], state,
                         manifest.get("created_at", ""), key_metrics(manifest.get("metrics", {}))))
    return rows


def key_metrics(metrics: dict, limit: int = 4) -> str:
    shown = [f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
             for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return ", ".join(shown[:limit])

"""`mtsql report RUN`: a markdown report with PNG plots, built from a run's artifacts.

    build_report(Path("runs/tiny"))        # -> runs/tiny/report/report.md, runs/tiny/report/plots/*.png

Modules: ``runs`` (what is read from the run folder), ``stats`` (rates with Wilson intervals),
``evaluation``, ``measures`` (pass@k, calibration, vacuous golds, memory, cost), ``training``,
``provenance`` (the sections), ``behaviour`` (protocol rates from trajectories), ``findings`` (the paper's
findings against the method experiment's evaluations), ``self_correction`` (revisions and execution
errors), ``self_taught`` (kept trajectories by writer), ``plots`` and ``markdown``; ``build`` puts them
together.
"""

from mtsql.app.report.build import build_report
from mtsql.app.report.runs import eval_order, latest_artifacts

__all__ = ["build_report", "eval_order", "latest_artifacts"]

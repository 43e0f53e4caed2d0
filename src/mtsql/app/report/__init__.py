"""`mtsql report RUN`: a markdown report with PNG plots, built from a run's artifacts.

    build_report(Path("runs/tiny"))        # -> runs/tiny/report/report.md, runs/tiny/report/plots/*.png

Modules: ``runs`` (what is read from the run folder), ``stats`` (rates with Wilson intervals),
``evaluation``, ``measures`` (pass@k, calibration, vacuous golds, memory, cost), ``training``,
``provenance`` (the sections), ``behaviour`` (protocol rates from trajectories), ``findings`` (the paper's
findings against the evaluations of the models a pipeline file names), ``self_correction`` (revisions and
execution errors), ``self_taught`` (kept trajectories by writer), ``warmstart``, ``sqlr1_tables``, ``plots``
and ``markdown``; ``sections`` lists them in reading order with what each needs from the run (an
experiment's only where its pipeline file names them), and ``build`` writes them.
"""

from mtsql.app.report.build import build_report
from mtsql.app.report.runs import eval_order, latest_artifacts

__all__ = ["build_report", "eval_order", "latest_artifacts"]

"""Progress when stderr is not a terminal (CI, nohup, a redirected log): plain lines, not a silent bar."""

import io

from rich.console import Console
from rich.progress import BarColumn, TextColumn

from mtsql.base import progress
from mtsql.engines.rollout import _Meter


def test_redirected_output_gets_plain_lines(monkeypatch):
    monkeypatch.setattr(progress, "EVERY_S", 0.0)
    out = io.StringIO()
    with progress.progress_bar(TextColumn("scoring"), BarColumn(), console=Console(file=out)) as bar:
        task = bar.add_task("scoring", total=4, loss="-")
        for _ in range(4):
            bar.advance(task)
    lines = out.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == [
        "scoring: 1/4 (25%)",
        "scoring: 2/4 (50%)",
        "scoring: 3/4 (75%)",
        "scoring: 4/4 (100%)",
    ]
    assert "loss -" in lines[0] and "elapsed 0:00:00" in lines[0] and "left ~" in lines[0]
    assert "\x1b" not in out.getvalue()  # no cursor moves or colours in a log file


def test_short_work_prints_nothing_and_a_terminal_keeps_the_bar():
    out = io.StringIO()
    with progress.progress_bar(TextColumn("scoring"), console=Console(file=out)) as bar:
        task = bar.add_task("scoring", total=100)
        for _ in range(100):
            bar.advance(task)
    assert out.getvalue() == ""  # done within EVERY_S: nothing to report
    terminal = Console(file=io.StringIO(), force_terminal=True)
    assert not isinstance(progress.progress_bar(console=terminal), progress.PlainProgress)


def test_rollout_meter_reports_when_stderr_is_redirected(monkeypatch, capsys):
    monkeypatch.setattr(progress, "EVERY_S", 0.0)
    meter = _Meter(total=3, already=1, enabled=True)
    meter.advance(1, 50)
    meter.advance(1, 50)
    meter.close()
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(",")[0] for line in lines] == ["rollout: 2/3 (67%)", "rollout: 3/3 (100%)"]

"""Running engine commands: the log, the error line, the process group, output cut into lines."""

import sys

import pytest

from mtsql.base.errors import StageFailed
from mtsql.engines.commands import Command, OutputLines, error_line, run_logged

TRACEBACK = """\
[INFO|2026-11-21] loading
Traceback (most recent call last):
  File "/x/llamafactory/launcher.py", line 1, in <module>
    run_exp()
  File "/x/transformers/modeling_utils.py", line 9, in load
    raise OSError(msg)
OSError: /m does not appear to have a file named config.json.
"""


def test_the_error_line_is_the_real_error_not_a_launcher_wrapper():
    assert error_line(TRACEBACK) == "OSError: /m does not appear to have a file named config.json."
    torchrun = (
        TRACEBACK.replace("\n", "\n[rank0]: ")
        + 'Traceback (most recent call last):\n  File "torchrun", line 3\n'
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        'Traceback (most recent call last):\n  File "cli.py", line 5\n'
        "subprocess.CalledProcessError: Command '['torchrun']' returned non-zero exit status 1.\n"
    )
    assert error_line(torchrun) == "OSError: /m does not appear to have a file named config.json."
    chained = (
        TRACEBACK
        + "\nDuring handling of the above exception, another exception occurred:\n\n"
        + 'Traceback (most recent call last):\n  File "a.py", line 1\nRuntimeError: second\n'
    )
    assert error_line(chained) == "RuntimeError: second"
    assert (
        error_line('Traceback (most recent call last):\n  File "t.py", line 9\nStopIteration\n')
        == "StopIteration"
    )


def test_the_error_line_of_ray_and_hydra_output():
    ray = [
        "(TaskRunner pid=1) Traceback (most recent call last):",
        "ray.exceptions.RayTaskError(ValueError): ray::TaskRunner.run()",
        '  File "x.py", line 3, in run',
        "ValueError: train_batch_size (256) exceeds the dataset",
        "",
        "done",
    ]
    assert error_line("\n".join(ray)) == "ValueError: train_batch_size (256) exceeds the dataset"
    assert error_line("hydra.errors.ConfigCompositionException: Could not override 'x'.").startswith(
        "hydra.errors"
    )


def test_without_an_exception_the_last_line_speaks():
    assert error_line("step 1\nKilled\n\n") == "Killed"
    assert error_line("") == "(no output)"


def test_run_logged_writes_files_streams_to_the_log_and_quotes_the_error(tmp_path):
    log = tmp_path / "log.txt"
    boom = Command(
        "train",
        (sys.executable, "-c", "print(open('in.txt').read()); raise ValueError('bad yaml key')"),
        {"X_FLAG": "1"},
        files={tmp_path / "in.txt": "hello"},
    )
    seen = []
    with pytest.raises(
        StageFailed, match=r"train failed \(exit 1\): ValueError: bad yaml key \(full log: .*log.txt\)"
    ):
        run_logged(boom, log, on_output=seen.append)
    text = log.read_text()
    assert (
        "$ X_FLAG=1 " in text
        and "hello" in text
        and "ValueError: bad yaml key" in text
        and "hello" in "".join(seen)
    )
    killed = Command(
        "merge", (sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    )
    with pytest.raises(StageFailed, match="merge failed \\(killed by SIGKILL, out of memory\\?\\)"):
        run_logged(killed, log)
    run_logged(
        Command(
            "env",
            (sys.executable, "-c", "import os; print(os.environ['X_FLAG'])"),
            {"X_FLAG": "42"},
            cwd=tmp_path / "work",
        ),
        log,
    )
    assert log.read_text().rstrip().endswith("42") and (tmp_path / "work").is_dir()


def test_a_shell_line_can_put_each_override_on_its_own_line():
    command = Command(
        "x", ("python", "-m", "verl.trainer.main_ppo", "a.b=1", "c='x y'"), {"RAY_ADDRESS": "h:1"}
    )
    assert command.shell() == "RAY_ADDRESS=h:1 python -m verl.trainer.main_ppo a.b=1 'c='\"'\"'x y'\"'\"''"
    assert command.shell(one_per_line=True).splitlines() == [
        "RAY_ADDRESS=h:1 python -m verl.trainer.main_ppo \\",
        "    a.b=1 \\",
        "    'c='\"'\"'x y'\"'\"''",
    ]


def test_output_arriving_in_chunks_is_cut_into_lines():
    lines = []
    cut = OutputLines(lines.append)
    text = "[rank0]: first line\r 33%|bar| 1/3\rsecond\npartial"
    for start in range(0, len(text), 5):
        cut.feed(text[start : start + 5])
    assert lines == ["first line", " 33%|bar| 1/3", "second"]

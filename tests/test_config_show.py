"""`mtsql config show`: the resolved configuration as YAML."""

from pathlib import Path

import yaml
from typer.testing import CliRunner

from mtsql.app.cli import app
from mtsql.base.errors import UsageError

REPO_PROFILE = str(Path(__file__).resolve().parents[1] / "configs" / "profiles" / "tiny.yaml")


def test_config_show_prints_the_resolved_profile():
    result = CliRunner().invoke(app, ["config", "show", "--config", REPO_PROFILE, "sample.n=3", "run=other"])
    assert result.exit_code == 0, result.output
    config = yaml.safe_load(result.stdout)
    assert config["run"] == "other" and config["sample"]["n"] == 3
    assert config["model"]["name"] == "smollm2-135m"  # from the profile
    assert config["rl"]["clip_ratio"] is not None  # defaults filled in
    bad = CliRunner().invoke(app, ["config", "show", "--config", REPO_PROFILE, "sampel.n=3"])
    assert bad.exit_code != 0 and isinstance(bad.exception, UsageError)

from pathlib import Path

import pytest

from mtsql.config import Config, load_config, to_dict
from mtsql.errors import UsageError

REPO = Path(__file__).resolve().parents[1]
YAMLS = sorted((REPO / "configs").rglob("*.yaml"))


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_config_yaml_loads_and_validates(path):
    cfg = load_config(path)
    assert isinstance(cfg, Config)
    assert path.read_text().startswith("#"), "each config starts with a comment giving its command"


def test_profiles_exist():
    names = {p.stem for p in (REPO / "configs" / "profiles").glob("*.yaml")}
    assert {"tiny", "paper-qwen3-1.7b", "paper-qwen3-4b"} <= names


def test_dotted_overrides_are_typed():
    cfg = load_config(REPO / "configs/profiles/tiny.yaml", ["sample.n=8", "sql.timeout_s=2", "data.eval_limit=null"])
    assert cfg.sample.n == 8
    assert cfg.sql.timeout_s == 2.0 and isinstance(cfg.sql.timeout_s, float)
    assert cfg.data.eval_limit is None
    assert cfg.run == "tiny"


def test_unknown_key_names_key_file_and_closest(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("sample:\n  temprature: 0.5\n")
    with pytest.raises(UsageError) as err:
        load_config(path)
    message = str(err.value)
    assert "sample.temprature" in message and str(path) in message and "sample.temperature" in message


def test_wrong_type_is_reported():
    with pytest.raises(UsageError, match=r"'rl.n' must be int"):
        load_config(None, ["rl.n=many"])


def test_unreadable_and_malformed_yaml(tmp_path):
    with pytest.raises(UsageError, match="cannot read config"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("sample:\n  n: [1,\n")
    with pytest.raises(UsageError, match=r"bad.yaml line \d+"):
        load_config(bad)


def test_base_inheritance_and_roundtrip(tmp_path):
    (tmp_path / "a.yaml").write_text("sample:\n  n: 3\n  temperature: 0.2\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\nsample:\n  n: 5\n")
    cfg = load_config(tmp_path / "b.yaml")
    assert (cfg.sample.n, cfg.sample.temperature) == (5, 0.2)
    again = load_config(None, [f"{k}.{kk}={v!r}" for k, sect in to_dict(cfg).items() if isinstance(sect, dict)
                               for kk, v in sect.items() if isinstance(v, (int, float)) and not isinstance(v, bool)])
    assert again.sample == cfg.sample

import dataclasses
import functools
from pathlib import Path

import pytest

from mtsql.app.config import Config, load_config
from mtsql.base.config import HASHED, hashed_settings, to_dict
from mtsql.base.errors import UsageError

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
    cfg = load_config(
        REPO / "configs/profiles/tiny.yaml", ["sample.n=8", "sql.timeout_s=2", "data.eval_limit=null"]
    )
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
    again = load_config(
        None,
        [
            f"{k}.{kk}={v!r}"
            for k, sect in to_dict(cfg).items()
            if isinstance(sect, dict)
            for kk, v in sect.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        ],
    )
    assert again.sample == cfg.sample


@pytest.mark.parametrize(
    "override, legal",
    [
        ("env.mode=lng", "long, short"),
        ("env.memory=oracle", "gold, predicted"),
        ("reward.family=sql-r1", "process, outcome, sqlr1"),
        ("sample.policy=greedy", "model, gold, gold_with_correction"),
        ("sample.backend=tgi", "hf, vllm, openai"),
        ("rl.engine=trl", "auto, local, verl"),
        ("curriculum.by=length", "hardness, turn, pass_rate"),
        ("sft.finetuning_type=qlora", "lora, full, freeze"),
        ("data.eval_datasets=[cosql, spdier]", "sparc, cosql"),
        ("model.template=chatml", "qwen3_nothink, qwen3"),
    ],
)
def test_a_bad_choice_names_the_key_the_legal_values_and_the_override(override, legal):
    key = override.split("=")[0]
    with pytest.raises(UsageError) as err:
        load_config(REPO / "configs/profiles/tiny.yaml", [override])
    message = str(err.value)
    assert f"override {override!r}" in message and f"'{key}' must be one of {legal}" in message
    assert "tiny.yaml" not in message, "an override is not blamed on the profile file"


def test_a_bad_choice_in_a_file_names_that_file_even_through_base(tmp_path):
    (tmp_path / "parent.yaml").write_text("env:\n  mode: lng\n")
    (tmp_path / "child.yaml").write_text("base: parent.yaml\nsample:\n  n: 2\n")
    with pytest.raises(UsageError, match=r"parent.yaml: 'env.mode' must be one of long, short; got 'lng'"):
        load_config(tmp_path / "child.yaml")


def test_a_bad_choice_on_the_command_line_exits_2_before_anything_is_written(tmp_path):
    from .inprocess import mtsql_in_process

    result = mtsql_in_process(
        [
            "sample",
            "--config",
            str(REPO / "configs/profiles/tiny.yaml"),
            "env.mode=lng",
            f"runs_dir={tmp_path / 'runs'}",
        ],
        env={"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "override 'env.mode=lng': 'env.mode' must be one of long, short" in result.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "use_cpu, fast, expected", [(True, True, True), (True, False, False), (False, False, True)]
)
def test_bf16_auto_follows_the_hardware(monkeypatch, use_cpu, fast, expected):
    import mtsql.engines.llamafactory.settings

    monkeypatch.setattr(mtsql.engines.llamafactory.settings, "cpu_has_fast_bf16", lambda: fast)
    cfg = load_config(None, ["sft.bf16=auto", f"sft.use_cpu={str(use_cpu).lower()}"])
    assert cfg.sft.bf16 is expected
    assert load_config(None, ["sft.bf16=true"]).sft.bf16 is True


def every_setting():
    """(dotted name, field) of every field of every section, and of the top-level settings."""
    for top in dataclasses.fields(Config):
        section = getattr(Config(), top.name)
        if dataclasses.is_dataclass(section):
            yield from ((f"{top.name}.{f.name}", f) for f in dataclasses.fields(section) if f.name != "owned")
            for engine, settings in getattr(section, "owned", {}).items():
                yield from ((f"{top.name}.{engine}.{f.name}", f) for f in dataclasses.fields(settings))
        else:
            yield top.name, top


def test_every_setting_declares_whether_it_changes_results():
    undecided = [name for name, f in every_setting() if not isinstance(f.metadata.get(HASHED), bool)]
    assert undecided == [], "declare each with result(...) or operational(...) in config.py, with the reason"


def test_fingerprints_cover_result_settings_and_leave_operational_ones_out():
    settings = dict(every_setting())
    operational = sorted(name for name, f in settings.items() if not f.metadata[HASHED])
    for name in (
        "sample.batch_size",
        "sample.openai.timeout_s",
        "sft.node_rank",
        "sft.master_addr",
        "sft.master_port",
        "trackers.tensorboard",
        "trackers.mlflow",
        "trackers.dir",
        "sample.vllm.python",
        "data.root",
        "run",
        "runs_dir",
    ):
        assert name in operational
    for name in (
        "sample.temperature",
        "sample.n",
        "sft.nnodes",
        "sft.batch_size",
        "rl.batch_size",
        "seed",
        "sql.timeout_s",
        "env.max_messages",
    ):
        assert settings[name].metadata[HASHED], name
    hashed = hashed_settings(load_config().sample)
    assert "batch_size" not in hashed and hashed["temperature"] == 0.7


@pytest.mark.parametrize(
    "old, new",
    [
        ("sft.freeze_layers", "sft.trainable_layers"),
        ("rl.freeze_layers", "rl.local.trainable_layers"),
        ("env.max_turns", "env.max_messages"),
        ("rl.max_turn_tokens", "rl.max_message_tokens"),
    ],
)
def test_a_renamed_key_names_its_new_name(tmp_path, old, new):
    with pytest.raises(UsageError, match=rf"override '{old}=3': unknown key '{old}'; renamed: use '{new}'"):
        load_config(None, [f"{old}=3"])
    section, key = old.split(".")
    path = tmp_path / "old.yaml"
    path.write_text(f"{section}:\n  {key}: 3\n")
    with pytest.raises(UsageError, match=rf"old.yaml: unknown key '{old}'; renamed: use '{new}'") as err:
        load_config(path)
    assert "\n" not in str(err.value)
    assert functools.reduce(getattr, new.split("."), load_config(None, [f"{new}=3"])) == 3


def test_each_engine_owned_section_gives_every_engine_a_typed_property():
    """``cfg.rl.verl`` is a property typed with verl's settings (go-to-definition and type checkers reach
    its fields), not a ``__getattr__`` lookup; one per engine of the family's registry (#49)."""
    import typing

    from mtsql.base.config import EngineOwned
    from mtsql.engines.backends.settings import SampleConfig
    from mtsql.engines.rl_settings import RlConfig

    assert "__getattr__" not in vars(EngineOwned)
    cfg = load_config(None, ["rl.verl.nnodes=2"])
    for section, value in ((SampleConfig, cfg.sample), (RlConfig, cfg.rl)):
        for name, engine in section.ENGINES.items():
            accessor = vars(section).get(name)
            assert isinstance(accessor, property), f"{section.__name__}.{name}"
            assert typing.get_type_hints(accessor.fget)["return"] is engine.settings
            assert getattr(value, name) is value.owned[name]
    assert cfg.rl.verl.nnodes == 2

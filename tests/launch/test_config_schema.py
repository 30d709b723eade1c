"""One definition per config key: the dataclasses are the schema, the YAML files only select and
override, and the code gets the typed, checked config."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from robo_async.actor.options import ActorOptions
from robo_async.cli import main
from robo_async.config import CONFIG_DIR, UserError, compose_config, load_config
from robo_async.launch.builders import build_plan
from robo_async.launch.mirrors import ConfigError, as_dict
from robo_async.launch.schema import TrainConfig, group_schemas

DEVICE_GROUPS = ("robot", "teleop")  # LeRobot device configs, checked by LeRobot


def _yaml_files() -> list[Path]:
    return sorted(p for p in CONFIG_DIR.rglob("*.yaml") if p.relative_to(CONFIG_DIR).parts[0] not in DEVICE_GROUPS)


def _is_preset(path: Path) -> bool:
    """A preset (`algo=rlpd`): a group file that selects another choice's schema and sets keys of it
    (and of other sections) to values of its own, in the global package."""
    return path.read_text().startswith("# @package _global_")


def _default_of(path: Path) -> dict:
    """The dataclass defaults a YAML file's keys must equal."""
    rel = path.relative_to(CONFIG_DIR)
    if len(rel.parts) == 1:
        return as_dict(TrainConfig())
    group, choice = rel.parts[0], path.stem
    return as_dict(group_schemas()[group][choice]())


def _differences(stated: object, default: object, key: str) -> list[str]:
    if isinstance(stated, dict) and isinstance(default, dict):
        out = []
        for k, v in stated.items():
            if k not in default:
                out.append(f"{key}{k}: not a key of the dataclass")
            else:
                out += _differences(v, default[k], f"{key}{k}.")
        return out
    return [] if stated == default else [f"{key.rstrip('.')}: YAML says {stated!r}, the dataclass {default!r}"]


@pytest.mark.parametrize("path", _yaml_files(), ids=lambda p: str(p.relative_to(CONFIG_DIR)))
def test_yaml_states_no_default_of_its_own(path):
    stated = yaml.safe_load(path.read_text()) or {}
    stated.pop("defaults", None)
    if _is_preset(path):  # its keys are the dataclasses' (at the top level), its values its own
        group = path.relative_to(CONFIG_DIR).parts[0]
        stated[group].pop("name")
        diffs = _differences(stated, as_dict(TrainConfig()) | {group: _preset_base(path)}, "")
        assert diffs and all("YAML says" in d for d in diffs), diffs
        return
    stated.pop("name", None)  # the selection's name (e.g. launcher=serial is LauncherConfig named serial)
    assert _differences(stated, _default_of(path), "") == []


def _preset_base(path: Path) -> dict:
    group = path.relative_to(CONFIG_DIR).parts[0]
    base = yaml.safe_load(path.read_text())[group]["name"]
    return as_dict(group_schemas()[group][base]())


def test_each_group_yaml_selects_its_schema_and_every_schema_has_a_yaml():
    schemas = group_schemas()
    for group, choices in schemas.items():
        files = {p.stem for p in (CONFIG_DIR / group).glob("*.yaml") if not _is_preset(p)}
        assert files == set(choices), group
        for preset in [p for p in (CONFIG_DIR / group).glob("*.yaml") if _is_preset(p)]:
            text = yaml.safe_load(preset.read_text())
            assert text["defaults"][0] == f"/schema/{group}/{text[group]['name']}@{group}", preset
            assert text[group]["name"] in choices, preset
        for choice in choices:
            defaults = yaml.safe_load((CONFIG_DIR / group / f"{choice}.yaml").read_text())["defaults"]
            assert defaults[0] == f"/schema/{group}/{choice}@_here_", (group, choice)


def test_composed_config_is_the_dataclass_defaults():
    root = OmegaConf.to_container(compose_config([]), resolve=True)
    want = as_dict(TrainConfig())
    for key, value in want.items():
        if key not in ("task", "policy", "algo", "buffer", "robot", "teleop", "launcher"):
            assert root[key] == value, key
    for group, choices in group_schemas().items():
        for choice, cls in choices.items():
            section = OmegaConf.to_container(compose_config([f"{group}={choice}"])[group], resolve=True)
            default = as_dict(cls())
            default.pop("name"), section.pop("name")
            assert section == default, (group, choice)


def test_actor_replan_default_is_one_value():
    assert ActorOptions().replan == "auto"
    assert compose_config([]).actor.replan == "auto"
    assert load_config([]).actor.replan == "auto"
    assert not [p for p in CONFIG_DIR.rglob("*.yaml") if "replan" in p.read_text()]  # stated nowhere else


def _stored(overrides: list[str], **changes: object) -> OmegaConf:
    """A config as a resumed run has it (a plain mapping, no schema), with `changes` (dotted keys)."""
    cfg = OmegaConf.create(OmegaConf.to_container(compose_config(overrides), resolve=True))
    for key, value in changes.items():
        OmegaConf.update(cfg, key.replace("__", "."), value, force_add=True)
    return cfg


@pytest.mark.parametrize(
    "changes, want",
    [
        ({"algo__batch_size": "abc"}, "algo.batch_size: 'abc' is not valid"),
        ({"actor__flush_every": "many"}, "actor.flush_every: 'many' is not valid"),
        ({"task__hz": "fast"}, "task.hz: 'fast' is not valid"),
        ({"policy__hidden": "wide"}, "policy.hidden"),
        ({"launcher__supervise__restarts": "x"}, "launcher.supervise.restarts: 'x' is not valid"),
        ({"actor__nope": 1}, "unknown key actor.nope"),
        ({"nope": 1}, "unknown key nope"),
        ({"task__nope": 1}, "unknown key task.nope"),
        ({"policy__nope": 1}, "unknown key policy.nope"),
        ({"buffer__nope": 1}, "unknown key buffer.nope"),
        ({"learner__weights__precision": "fp8"}, "precision"),
        ({"learner__replicas": 0}, "learner.replicas must be 1 to 64, not 0"),
        ({"learner__replicas": 65}, "learner.replicas must be 1 to 64, not 65"),
        (
            {"learner__replicas": 2, "launcher__name": "serial"},
            "learner.replicas=2 runs its ranks as processes of launcher=local or as Ray actors (launcher=ray), "
            "not launcher=serial",
        ),
    ],
)
def test_wrong_type_or_unknown_key_is_one_line_at_plan_time(tmp_path, changes, want):
    with pytest.raises(ConfigError) as err:
        build_plan(_stored([], **changes), tmp_path / "run")
    assert want in str(err.value) and "\n" not in str(err.value)


def test_resumed_config_is_checked_too(tmp_path):
    stored = _stored(["task=push"], algo__batch_size="abc")  # e.g. edited by hand in the run directory
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(stored))
    cfg = compose_config([f"resume={tmp_path}", "seed=3"], base=tmp_path)
    with pytest.raises(ConfigError, match="algo.batch_size: 'abc' is not valid"):
        build_plan(cfg, tmp_path)


def test_code_gets_typed_objects():
    run = load_config(["task=gym", "policy=flow", "launcher=ray", "learner.weights.delta=true"])
    assert type(run.task).__name__ == "GymConfigTask" and run.task.episode_ticks == 200
    assert run.launcher.start_timeout_s == 120.0 and run.launcher.supervise.restarts == 5
    assert run.learner.weights.delta is True and run.policy.bc.max_delay == 12
    assert load_config(["policy=tiny_vla"]).policy.bc.demos == 60
    assert load_config(["policy=smolvla"]).policy.bc.lr == pytest.approx(3e-4)


def test_train_cfg_prints_the_resolved_config_with_overrides(capsys):
    assert main(["train", "--cfg", "task=gym", "actor.replan=end", "algo.batch_size=64"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["task"]["name"] == "gym" and printed["task"]["episode_ticks"] == 200
    assert printed["actor"]["replan"] == "end" and printed["algo"]["batch_size"] == 64
    assert printed["launcher"]["supervise"]["restarts"] == 5  # defaults from the dataclasses, filled in


def test_train_cfg_with_a_bad_override_is_one_error_line(capsys):
    assert main(["train", "--cfg", "algo.batch_size=abc"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("error: ") and "algo.batch_size" in err[0]


def test_map_keys_take_new_entries_and_still_check_their_values():
    cfg = compose_config(["policy=flow", "policy.obs_scale={ee_to_cube:20.0}", "policy.obs_scale.state=2"])
    assert cfg.policy.obs_scale.ee_to_cube == 20.0 and cfg.policy.obs_scale.state == 2.0
    assert cfg.policy.obs_scale.ee_to_target == 10.0  # the rest of the default map stays
    with pytest.raises(UserError, match="policy.obs_scale.state"):
        compose_config(["policy=flow", "policy.obs_scale.state=abc"])
    with pytest.raises(UserError, match="unknown config key 'policy.nope'"):
        compose_config(["policy=flow", "policy.nope=1"])

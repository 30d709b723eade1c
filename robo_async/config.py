"""Composing the run config with Hydra, and the one-line errors users see."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from hydra import compose, initialize_config_dir
from hydra.errors import (
    ConfigCompositionException,
    HydraException,
    MissingConfigException,
)
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException, ValidationError

if TYPE_CHECKING:
    from robo_async.launch.schema import TrainConfig


def _config_dir() -> Path:
    """Hydra's config directory: `robo_async.configs` as installed (the repository's `configs/`
    ships as package data, setup.py), else the checkout's `configs/` beside this package."""
    import importlib

    try:  # a namespace package (no __init__.py in configs/): its folder is its one path
        found = [Path(p) for p in importlib.import_module("robo_async.configs").__path__]
    except ModuleNotFoundError:
        found = []
    return next((d for d in found if (d / "train.yaml").is_file()), Path(__file__).resolve().parents[1] / "configs")


CONFIG_DIR = _config_dir()


class UserError(Exception):
    """Printed as one line: `error: ...`, exit code 2."""


def compose_config(overrides: list[str], base: Path | None = None) -> DictConfig:
    """The run config from `configs/train.yaml`, the schemas it selects (registered in Hydra's
    ConfigStore by `robo_async.launch.schema`) and `overrides` (a resumed run: its stored config,
    then the overrides). `load_config` gives it typed."""
    import robo_async.launch.schema  # noqa: F401  (registers the schemas; imported here: torch comes with it)

    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            cfg = compose(config_name="train", overrides=overrides)
            if base is None and (given := task_policy_defaults(cfg, overrides)):
                cfg = compose(config_name="train", overrides=[*given, *overrides])  # the user's still win
    except MissingConfigException as e:
        raise UserError(_missing_option(str(e))) from None
    except ConfigCompositionException as e:
        raise UserError(_composition(e)) from None
    except (HydraException, OmegaConfBaseException) as e:
        raise UserError(f"bad config: {str(e).splitlines()[0]}") from None
    if base is not None:  # resume: the stored config, then the user's overrides on top
        stored = OmegaConf.load(base / "config.yaml")
        user = OmegaConf.from_dotlist([o for o in overrides if not o.startswith("resume=")])
        cfg = OmegaConf.merge(stored, user)
        cfg.resume = str(base)
    return cfg


def task_policy_defaults(cfg: DictConfig, overrides: list[str]) -> list[str]:
    """Overrides for the policy keys the task brings (`sim.POLICY_DEFAULTS`: e.g. `task=gym_hil`
    reads `[state, environment_state]` and acts in the env's own action space), for the keys the
    chosen policy has and the user did not set."""
    from sim import POLICY_DEFAULTS

    task = cfg.get("task") or {}
    defaults = POLICY_DEFAULTS.get(task.get("name"), {})
    if callable(defaults):
        defaults = defaults(dict(task))
    policy = cfg.get("policy") or {}
    set_by_user = {
        o.lstrip("+~").split("=", 1)[0].split(".")[1] for o in overrides if o.lstrip("+~").startswith("policy.")
    }
    return [f"policy.{k}={_hydra_value(v)}" for k, v in defaults.items() if k in policy and k not in set_by_user]


def _hydra_value(v: object) -> str:
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}:{_hydra_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_hydra_value(x) for x in v) + "]"
    return str(v)


def load_config(overrides: list[str], base: Path | None = None) -> TrainConfig:
    """The run config from `overrides`, checked and typed (`robo_async.launch.schema.TrainConfig`);
    a wrong type or unknown key is one UserError line."""
    from robo_async.launch.mirrors import ConfigError
    from robo_async.launch.schema import typed_config

    cfg = compose_config(overrides, base)
    try:
        return typed_config(cfg)
    except ConfigError as e:
        raise UserError(f"bad config: {e}") from None


def _missing_option(msg: str) -> str:
    # Hydra: "In 'train': Could not find 'task/nope'\n\nAvailable options in 'task':\n\treach"
    lines = [ln.strip() for ln in msg.splitlines() if ln.strip()]
    group = name = ""
    for ln in lines:
        if "Could not find '" in ln:
            group, _, name = ln.split("Could not find '")[1].rstrip("'").partition("/")
    options = []
    for ln in lines[1:]:
        if ln.startswith("Config search path"):  # Hydra's internals follow
            break
        if not ln.startswith(("Available", "In ", "Could")):
            options.append(ln)
    if group:
        return f"unknown {group} '{name}'; available: {', '.join(options) or 'none'}"
    return lines[0] if lines else msg


def _composition(e: ConfigCompositionException) -> str:
    cause = e.__cause__
    text = str(cause or e)
    if "not in struct" in text or "Could not override" in str(e):
        key = str(e).split("'")[1] if "'" in str(e) else "?"
        return (
            f"unknown config key '{key}'; see `robo-async train --cfg` for the keys, or add a new one with +{key}=..."
        )
    if isinstance(cause, ValidationError) and getattr(cause, "full_key", None):  # as typed_config says it
        from robo_async.launch.mirrors import choice_line

        line = choice_line(cause, str(cause.full_key))
        return f"bad config: {line or f'{cause.full_key}: {cause.value!r} is not valid ({str(cause).splitlines()[0]})'}"
    return f"bad override: {str(e).splitlines()[0]}"

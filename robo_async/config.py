"""Composing the run config with Hydra, and the one-line errors users see."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException, HydraException, MissingConfigException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"


class UserError(Exception):
    """Printed as one line: `error: ...`, exit code 2."""


def compose_config(overrides: list[str], base: Path | None = None) -> DictConfig:
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            cfg = compose(config_name="train", overrides=overrides)
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
        return (f"unknown config key '{key}'; see `robo-async train --cfg` for the keys, or add a "
                f"new one with +{key}=...")
    return f"bad override: {str(e).splitlines()[0]}"

"""`robo-async`: train, eval, bench. Hydra composes the config; errors are one clear line."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException, HydraException, MissingConfigException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
USAGE = """usage: robo-async <command> [key=value ...]

commands:
  train [overrides]                    train (Hydra overrides, e.g. actors=2 task.cameras=[front])
  train resume=<run dir> [overrides]   continue a run from its last checkpoint
  eval checkpoint=<file|run dir> [episodes=20] [video=out.mp4] [task=reach]
  bench learn-reach [budget_s=300]     time and env steps to 90% success, actor overhead
"""


class UserError(Exception):
    """Printed as one line: `error: ...`, exit code 2."""


def compose_config(overrides: list[str], base: Path | None = None):
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
    options = [ln for ln in lines[1:] if not ln.startswith(("Available", "In ", "Could"))]
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


def _kv(args: list[str]) -> dict[str, str]:
    out = {}
    for a in args:
        if "=" not in a:
            raise UserError(f"expected key=value, got '{a}'")
        k, v = a.split("=", 1)
        out[k] = v
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    cmd, rest = argv[0], argv[1:]
    try:
        if cmd == "train":
            from robo_async.train import train

            if rest == ["--cfg"]:
                print(OmegaConf.to_yaml(compose_config([])))
                return 0
            return train(rest)
        if cmd == "eval":
            return _eval(_kv(rest))
        if cmd == "bench":
            from robo_async.bench import run_bench

            if not rest:
                raise UserError("bench needs a name: learn-reach")
            return run_bench(rest[0], _kv(rest[1:]))
        raise UserError(f"unknown command '{cmd}'; run `robo-async --help`")
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _eval(args: dict[str, str]) -> int:
    from robo_async.evaluate import CheckpointMismatch, evaluate
    from robo_async.learner.checkpoint import CheckpointError

    unknown = set(args) - {"checkpoint", "episodes", "video", "task", "seed"}
    if unknown:
        raise UserError(f"unknown eval option(s) {sorted(unknown)}; use checkpoint= episodes= video= task= seed=")
    if "checkpoint" not in args:
        raise UserError("eval needs checkpoint=<checkpoint file or run directory>")
    ckpt = Path(args["checkpoint"])
    if not ckpt.exists():
        raise UserError(f"checkpoint {ckpt} does not exist")
    try:
        res = evaluate(ckpt, int(args.get("episodes", 20)),
                       video=Path(args["video"]) if "video" in args else None,
                       task=args.get("task"), seed=int(args.get("seed", 10_000)))
    except (CheckpointError, CheckpointMismatch) as e:
        raise UserError(str(e)) from None
    print(f"success rate {res.success_rate:.0%} over {res.episodes} episodes "
          f"(mean return {res.mean_return:.1f}, mean length {res.mean_length:.1f} ticks)")
    if res.video:
        print(f"video: {res.video}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

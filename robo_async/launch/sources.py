"""Where a trained policy comes from: a checkpoint, a run directory, a `robo-async bc` directory
or a saved LeRobot policy, read into the task it was trained on and the arguments that build it
(`robo-async eval`, JSRL guides)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from robo_async.launch.builders import algo_of
from robo_async.launch.mirrors import ConfigError
from robo_async.launch.policy_args import PolicyArgs, acting_args
from robo_async.launch.tasks import TaskArgs, task_args
from robo_async.learner import checkpoint

# composes the run config from overrides (the entry floor's `config.compose_config`)
Compose = Callable[[list[str]], DictConfig]


@dataclass(frozen=True)
class PolicySource:
    """What to evaluate: the task it was trained on, how to build it, its weights (if separate)."""

    what: str  # "checkpoint" | "policy directory" | "lerobot policy"
    task: TaskArgs
    policy: PolicyArgs
    spec: dict | None = None  # the robot signature it was trained for
    weights: dict | None = None  # module state for `load_weights` (checkpoints)
    version: int = 0


def _task_of(cfg: dict) -> TaskArgs:
    return task_args(cfg["task"], cfg.get("robot"), cfg.get("safety"))


def policy_source(
    path: Path, task: str | None = None, delay_ms: float | list | None = None, compose: Compose | None = None
) -> PolicySource:
    """A checkpoint file, a run directory (its last checkpoint), a `robo-async bc` directory
    (policy.yaml + policy.safetensors) or a saved LeRobot policy (config.json + weights; its
    config is composed by `compose`, from `task` (default reach) and `policy=act`)."""
    path = Path(path)
    if path.is_dir() and (path / "policy.yaml").exists():
        meta = yaml.safe_load((path / "policy.yaml").read_text())
        return PolicySource(
            "policy directory",
            task_args(meta["task"], meta.get("robot"), meta.get("safety")),
            PolicyArgs.from_config({**meta["policy"], "path": str(path), "inference_delay_ms": delay_ms or 0}),
            meta.get("spec"),
        )
    if path.is_dir() and (path / "config.json").exists():  # LeRobot save_pretrained
        if compose is None:
            raise ConfigError(
                f"{path} is a saved LeRobot policy: `robo-async eval` runs one; a JSRL guide "
                f"is `expert` or a `robo-async bc` run directory"
            )
        cfg = OmegaConf.to_container(compose([f"task={task or 'reach'}", "policy=act"]), resolve=True)
        return PolicySource(
            "lerobot policy",
            _task_of(cfg),
            PolicyArgs.from_config({**cfg["policy"], "path": str(path), "inference_delay_ms": delay_ms or 0}),
        )
    ckpt = checkpoint.resolve(path)
    tensors, metadata = checkpoint.read(ckpt)
    meta = checkpoint.meta_of(metadata)
    cfg = yaml.safe_load(str(meta["config"]))
    pol = PolicyArgs.from_config({**cfg["policy"], "inference_delay_ms": delay_ms or 0})
    if cfg.get("algo"):  # what the actors ran (e.g. algo=qc publishes a one-step actor of the flow policy)
        pol = acting_args(pol, *algo_of(cfg["algo"]))
    return PolicySource(
        "checkpoint",
        _task_of(cfg),
        pol,
        meta["spec"],
        {k: v.numpy() for k, v in checkpoint.module_state(tensors, "actor").items()},
        int(meta["version"]),
    )

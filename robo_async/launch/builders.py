"""Builders: the only place a Hydra config is turned into plain constructor arguments."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, fields
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from hal.spec import RobotSpec
from policies.base import Policy, make_policy
from robo_async.actor.actor import ActorConfig
from robo_async.actor.uplink import UplinkConfig
from robo_async.buffer.lmdb_store import StoreConfig
from robo_async.buffer.sampler import check_mix
from robo_async.learner.learner import LearnerConfig
from robo_async.learner.sac import SACConfig
from sim import TASKS, SimRobot


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class TaskArgs:
    name: str
    options: dict  # the task's own config dataclass fields
    realtime: bool = False


@dataclass(frozen=True)
class PolicyArgs:
    name: str
    obs_keys: tuple[str, ...]
    hidden: tuple[int, ...]
    action_mode: str = "delta"
    delta_scale: float = 0.15
    obs_scale: tuple[tuple[str, float], ...] = ()

    @staticmethod
    def from_config(policy: dict) -> "PolicyArgs":
        p = dict(policy)
        scale = tuple((str(k), float(v)) for k, v in (p.get("obs_scale") or {}).items())
        return PolicyArgs(p["name"], tuple(p["obs_keys"]), tuple(p["hidden"]),
                          p.get("action_mode", "delta"), float(p.get("delta_scale", 0.15)), scale)


@dataclass(frozen=True)
class TrainPlan:
    run_dir: Path
    learner: LearnerConfig
    task: TaskArgs
    policy: PolicyArgs
    actors: tuple[ActorConfig, ...]
    start_timeout_s: float
    shutdown_timeout_s: float


def _dataclass_kwargs(cls: type, values: dict, where: str) -> dict:
    names = {f.name for f in fields(cls)}
    unknown = set(values) - names
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}; known: {sorted(names)}")
    return {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}


def task_args(task: DictConfig | dict) -> TaskArgs:
    values = OmegaConf.to_container(task, resolve=True) if isinstance(task, DictConfig) else dict(task)
    name = values.pop("name")
    realtime = bool(values.pop("realtime", False))
    if name not in TASKS:
        raise ConfigError(f"unknown task '{name}'; available: {sorted(TASKS)}")
    _, cfg_cls = TASKS[name]
    return TaskArgs(name, _dataclass_kwargs(cfg_cls, values, f"task {name}"), realtime)


def make_robot(args: TaskArgs) -> SimRobot:
    task_cls, cfg_cls = TASKS[args.name]
    return SimRobot(task_cls(cfg_cls(**args.options)))


def task_spec(args: TaskArgs) -> RobotSpec:
    task_cls, cfg_cls = TASKS[args.name]
    return task_cls(cfg_cls(**args.options)).spec()


def obs_dims(spec: RobotSpec, keys: tuple[str, ...]) -> tuple[int, ...]:
    dims = {"state": spec.state_dim, **spec.feature_dims()}
    missing = [k for k in keys if k not in dims]
    if missing:
        raise ConfigError(f"policy.obs_keys {missing} are not observations of {spec.name}; "
                          f"it has {sorted(dims)}")
    return tuple(dims[k] for k in keys)


def make_actor_policy(args: PolicyArgs, spec: RobotSpec, deterministic: bool = False) -> Policy:
    return make_policy(args.name, obs_keys=args.obs_keys, obs_dims=obs_dims(spec, args.obs_keys),
                       action_low=spec.joint_low, action_high=spec.joint_high, hidden=args.hidden,
                       dt=spec.dt, deterministic=deterministic, action_mode=args.action_mode,
                       delta_scale=args.delta_scale, obs_scale=dict(args.obs_scale))


def new_run_dir(root: str, task: str) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = Path(root) / f"{stamp}-{task}"
    n = 1
    while path.exists():
        n += 1
        path = Path(root) / f"{stamp}-{task}-{n}"
    return path


def build_plan(cfg: DictConfig, run_dir: Path, resume_meta: dict | None = None) -> TrainPlan:
    task = task_args(cfg.task)
    spec = task_spec(task)
    algo = OmegaConf.to_container(cfg.algo, resolve=True)
    if algo.pop("name") != "sac":
        raise ConfigError("only algo=sac exists so far")
    sac = SACConfig(**_dataclass_kwargs(SACConfig, algo, "algo sac"))
    pol = PolicyArgs.from_config(OmegaConf.to_container(cfg.policy, resolve=True))
    if pol.hidden != sac.hidden:
        sac = SACConfig(**{**sac.__dict__, "hidden": pol.hidden})
    dims = obs_dims(spec, pol.obs_keys)
    buf = OmegaConf.to_container(cfg.buffer, resolve=True)
    if buf.pop("name") != "lmdb":
        raise ConfigError("only buffer=lmdb exists")
    mix = check_mix(buf.pop("mix"))
    prefetch = int(buf.pop("prefetch"))
    buf.pop("imports")
    store = StoreConfig(**_dataclass_kwargs(StoreConfig, buf, "buffer"))
    t = cfg.transport
    learner = LearnerConfig(
        run_dir=str(run_dir),
        data_address=f"tcp://{t.host}:{t.data_port}",
        weights_address=f"tcp://{t.host}:{t.weights_port}",
        obs_keys=pol.obs_keys, obs_dims=dims, action_low=spec.joint_low, action_high=spec.joint_high,
        sac=sac, store=store, mix=mix, prefetch=prefetch, action_mode=pol.action_mode, delta_scale=pol.delta_scale,
        obs_scale=dict(pol.obs_scale), task=task.name, spec_signature=spec.signature(),
        config_yaml=OmegaConf.to_yaml(cfg, resolve=True),
        publish_every=cfg.learner.publish_every, checkpoint_every_s=cfg.learner.checkpoint_every_s,
        log_every_s=cfg.learner.log_every_s, budget_s=cfg.budget.seconds,
        budget_env_steps=cfg.budget.env_steps, stop_at_success=cfg.stop_at_success,
        success_window=cfg.success_window, seed=cfg.seed,
        resume=resume_meta is not None and not resume_meta.get("fresh_learner"),
        count_stored=bool(resume_meta and resume_meta.get("fresh_learner")),
        threads=cfg.learner.threads,
    )
    hw = (resume_meta or {}).get("high_water", {})
    eps = (resume_meta or {}).get("episode_counts", {})
    actors = tuple(
        ActorConfig(
            actor_id=i, data_address="", weights_address="",
            episode_ticks=task.options.get("episode_ticks", 50), realtime=task.realtime,
            flush_every=cfg.actor.flush_every, heartbeat_s=cfg.actor.heartbeat_s,
            seed=cfg.seed * 1000 + i, start_seq=int(hw.get(str(i), 0)),
            start_episode=int(eps.get(str(i), 0)), eval_every=cfg.actor.eval_every,
            uplink=UplinkConfig(journal_dir=str(run_dir / "actors" / str(i) / "journal"),
                                journal=bool(cfg.actor.journal), max_ram_mb=float(cfg.actor.max_ram_mb),
                                resend_s=float(cfg.actor.resend_s)),
        )
        for i in range(cfg.actors)
    )
    if not actors:
        raise ConfigError("actors must be at least 1")
    return TrainPlan(run_dir, learner, task, pol, actors, cfg.launcher.start_timeout_s,
                     cfg.launcher.shutdown_timeout_s)

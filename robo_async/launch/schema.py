"""Typed config: dataclass schemas for the run config and every group, registered in Hydra's
ConfigStore (`robo_async_schema/<group>`), checked at plan time, so a wrong type or unknown key,
also in `resume=` overrides, is one error line (`ConfigError: algo.batch_size: 'abc' is not an
int`) before anything starts.

Groups whose keys depend on the choice get their schema from the choice's own dataclass: `task`
from the task's config class (plus the sim imperfection keys), `algo` from the registered
algorithm's config, `buffer` from `StoreConfig`. Device groups (`robot`, `teleop`) are LeRobot
configs, checked by LeRobot when built.
"""

from __future__ import annotations

import functools
from dataclasses import MISSING, Field, dataclass, field, fields, make_dataclass
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from robo_async.buffer.lmdb_store import StoreConfig


class ConfigError(ValueError):
    pass


@dataclass
class BudgetSchema:
    seconds: float | None = 600  # wall-clock limit of the training phase
    env_steps: int | None = None


@dataclass
class TransportSchema:
    host: str = "127.0.0.1"
    data_port: int = 0
    weights_port: int = 0
    keys: str | None = None
    curve: str = "auto"
    max_message_mb: float = 64
    queue_mb: float = 64


@dataclass
class ActorSchema:
    flush_every: int = 32
    heartbeat_s: float = 1.0
    eval_every: int = 2
    journal: bool = True
    max_ram_mb: float = 256
    resend_s: float = 5.0
    learner_silent_s: float = 3.0
    inference: str = "auto"
    replan: str = "due"
    success_reward: float = 1.0
    inference_workers: int = 1
    inference_server: str | None = None
    server_wait_s: float = 600.0
    server_image_codec: str = "jpeg"
    guide: str | None = None
    guide_ticks: int = 60
    guide_step: int = 10
    guide_window: int = 10
    guide_threshold: float = 0.5


@dataclass
class WeightsSchema:  # robo_async/transport/weights.py PushConfig
    precision: str = "fp32"
    delta: bool = False
    keyframe_every: int = 20
    part_mb: float = 4


@dataclass
class LearnerSchema:
    publish_every: int = 10
    checkpoint_every_s: float = 30
    log_every_s: float = 1.0
    threads: int = 1
    weights: WeightsSchema = field(default_factory=WeightsSchema)
    device: str = "auto"


@dataclass
class SafetySchema:
    watchdog_s: float | None = None
    workspace_low: list[float] | None = None
    workspace_high: list[float] | None = None


@dataclass
class ResourcesSchema:
    lease_dir: str | None = None
    wait_s: float = 0
    sim_slots: int = 64


@dataclass
class SuperviseSchema:  # robo_async/launch/supervisor.py RestartPolicy
    restarts: int = 5
    window_s: float = 3600
    backoff_s: float = 1.0
    max_backoff_s: float = 30
    liveness_s: float = 30


@dataclass
class LauncherSchema:
    name: str = "local"
    start_timeout_s: float = 60
    shutdown_timeout_s: float = 20
    address: str | None = None  # ray
    num_cpus: int | None = None
    learner_num_cpus: float = 1
    actor_num_cpus: float = 0.5
    supervise: SuperviseSchema = field(default_factory=SuperviseSchema)


@dataclass
class DashboardSchema:
    port: int | None = 0


@dataclass
class ServeSchema:  # robo_async/serve: `robo-async serve`
    port: int = 5560
    weights: str | None = None
    key_id: int = 0
    max_batch: int = 16
    batch_window_ms: float = 2.0
    summary_s: float = 10.0


@dataclass
class TrainSchema:
    """`configs/train.yaml`; the groups (task, policy, algo, buffer, robot, teleop) are checked
    against their own schemas."""

    task: Any = None
    policy: Any = None
    algo: Any = None
    buffer: Any = None
    robot: Any = None
    teleop: Any = None
    launcher: LauncherSchema = field(default_factory=LauncherSchema)
    actors: int = 1
    robots: list[Any] = field(default_factory=list)
    seed: int = 0
    runs_root: str = "runs"
    run_dir: str | None = None
    resume: str | None = None
    budget: BudgetSchema = field(default_factory=BudgetSchema)
    reward_classifier: str | None = None
    stop_at_success: float | None = 0.9
    success_window: int = 20
    eval_episodes: int = 20
    video: bool = False
    transport: TransportSchema = field(default_factory=TransportSchema)
    dashboard: DashboardSchema = field(default_factory=DashboardSchema)
    actor: ActorSchema = field(default_factory=ActorSchema)
    learner: LearnerSchema = field(default_factory=LearnerSchema)
    safety: SafetySchema = field(default_factory=SafetySchema)
    resources: ResourcesSchema = field(default_factory=ResourcesSchema)
    serve: ServeSchema = field(default_factory=ServeSchema)


@functools.lru_cache(maxsize=None)
def _omegaconf_type(t: Any) -> Any:
    """`t` where OmegaConf can check it; `Any` where it cannot (e.g. tuples of mixed pairs, which
    the owning dataclass then checks itself)."""
    try:
        OmegaConf.structured(make_dataclass("_Probe", [("x", Optional[t], field(default=None))]))  # noqa: UP007
        return t
    except (OmegaConfBaseException, TypeError, ValueError):
        return Any


def _with_name(cls: type, extra: tuple[tuple[str, Any, Any], ...] = ()) -> type:
    """`cls`'s fields plus `name` (the group choice) and `extra` (name, type, field)."""
    specs = [(f.name, _omegaconf_type(f.type), field(default=f.default) if f.default_factory is MISSING
              else field(default_factory=f.default_factory)) for f in fields(cls)]
    specs += [("name", str, field(default="")),
              *((n, t, d if isinstance(d, Field) else field(default=d)) for n, t, d in extra)]
    return make_dataclass(f"{cls.__name__}Schema", specs)


def _buffer_schema() -> type:
    return _with_name(StoreConfig, (("mix", dict[str, float], field(default_factory=_mix)), ("prefetch", int, 2),
                                    ("imports", list[Any], field(default_factory=list))))


def _register() -> None:
    cs = ConfigStore.instance()
    cs.store(group="robo_async_schema", name="train", node=TrainSchema)
    cs.store(group="robo_async_schema", name="buffer", node=BufferSchema)


def _mix() -> dict[str, float]:
    return {"online": 0.5, "demos": 0.25, "interventions": 0.25}


BufferSchema = _buffer_schema()
_register()


def check(values: dict, schema: type, where: str) -> dict:
    """`values` checked against `schema` (types, unknown keys); returns them typed (ints as
    ints, lists as lists). Raises ConfigError with one line naming the key."""
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), values)
        return OmegaConf.to_container(merged, resolve=True)  # type: ignore[return-value]
    except (ValidationError, ConfigKeyError) as e:
        full = getattr(e, "full_key", None)
        key = (full if where == "config" else f"{where}.{full}") if full else where
        value = getattr(e, "value", None)
        line = str(e).splitlines()[0]
        if isinstance(e, ConfigKeyError):
            known = sorted(f.name for f in fields(schema))
            raise ConfigError(f"unknown key {key}; {where} has {', '.join(known)}") from None
        raise ConfigError(f"{key}: {value!r} is not valid ({line})") from None
    except OmegaConfBaseException as e:
        raise ConfigError(f"{where}: {str(e).splitlines()[0]}") from None


def check_train(cfg: dict) -> dict:
    return check(cfg, TrainSchema, "config")


def check_buffer(buf: dict) -> dict:
    return check(buf, BufferSchema, "buffer")


def check_algo(algo: dict) -> dict:
    from robo_async.learner.algorithms import config_class

    try:
        cls = config_class(str(algo.get("name")))
    except KeyError as e:
        raise ConfigError(str(e).strip("'\"")) from None
    return check(algo, _with_name(cls), "algo")


IMPERFECTION_FIELDS = (("realtime", bool, False), ("obs_latency_ticks", int, 0), ("action_latency_ticks", int, 0),
                       ("obs_noise_std", float, 0.0), ("action_noise_std", float, 0.0),
                       ("disconnect_after_ticks", int | None, None))


def check_task(task: dict, config_cls: type) -> dict:
    return check(task, _with_name(config_cls, IMPERFECTION_FIELDS), "task")

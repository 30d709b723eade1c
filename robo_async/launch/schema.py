"""Typed config: the component dataclasses are the schema.

Each section of the run config is one dataclass next to its component's code (`actor:` is
`robo_async.actor.options.ActorOptions`, `learner:` `robo_async.learner.options.LearnerOptions`, ...),
with one comment per field; each group choice (`task=reach`, `policy=flow`, `algo=sac`, ...) is the
choice's own dataclass (`group_schemas()`). Hydra gets a mirror of each (the same fields, defaults
and types, made mutable so overrides apply: `mirrors.py`) in its ConfigStore: `robo_async_schema` for the run and
`schema/<group>/<choice>` for the choices, which `configs/<group>/<choice>.yaml` only selects
(`defaults: [/schema/task/reach@_here_, _self_]`) and names. So the YAML files carry no defaults of
their own (`tests/launch/test_config_schema.py` fails if one states a different value).

`typed_config(cfg)` checks a composed (or resumed) config at plan time and returns `TrainConfig`, the
run as typed objects; a wrong type or unknown key is one `ConfigError` line
(`ConfigError: algo.batch_size: 'abc' is not valid (...)`); a key whose type is a `StrEnum` takes
only its members' names (`choice_line`: `actor.replan 'x' unknown: actor.replan must be auto, due,
end or continuous`), checked by Hydra when it composes. Device groups (`robot`, `teleop`) are
LeRobot configs, checked by LeRobot when built.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field, make_dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from policies.configs import (
    POLICY_CONFIGS,
    FlowPolicyConfig,
    SmolVLAPolicyConfig,
    TinyVLAPolicyConfig,
)
from robo_async.actor.options import ActorOptions, SafetyOptions
from robo_async.buffer.lmdb_store import TABLES, StoreConfig
from robo_async.buffer.sampler import DEFAULT_MIX, PREFETCH
from robo_async.dashboard.options import DashboardOptions
from robo_async.launch.mirrors import ConfigError, build, check, checked, mirror, open_maps
from robo_async.launch.options import LauncherConfig, RayLauncherConfig, ResourcesConfig
from robo_async.learner.algorithms.bc.config import BCOptions
from robo_async.learner.config import LearnerConfig
from robo_async.learner.options import BudgetOptions, LearnerOptions
from robo_async.serve.options import ServeOptions
from robo_async.transport.options import TransportOptions

GROUPS = ("task", "policy", "algo", "buffer", "launcher")  # typed groups; robot and teleop are LeRobot's


# -- choices whose schema is assembled here ------------------------------------------------------


@dataclass(frozen=True)
class _Named:
    name: str = ""  # the choice's registered name


@dataclass(frozen=True)
class SimTaskOptions:
    """Keys every simulated task takes besides its own config and `sim.SimImperfections`."""

    realtime: bool = False  # true: ticks take 1/hz of wall-clock time


def _mix() -> dict[str, float]:
    return dict(DEFAULT_MIX)


@dataclass(frozen=True)
class BufferConfig(StoreConfig):
    """`buffer=lmdb`: the persistent store (`StoreConfig`) and how the learner's batches are drawn from it."""

    name: str = "lmdb"  # the store kind (only lmdb)
    # retention per table, oldest first (null: none), e.g. buffer.max_rows.online=5000000
    max_rows: dict[str, int | None] = field(default_factory=lambda: dict.fromkeys(TABLES))
    # share of each training batch per table (RLPD-style: half online, half human data); a table with no data gives
    # its share to the others
    mix: dict[str, float] = field(default_factory=_mix)
    prefetch: int = PREFETCH  # batches assembled ahead on a background thread
    imports: tuple[
        dict[str, str], ...
    ] = ()  # earlier data, e.g. [{path: runs/old/replay, table: demos}, {path: data/my_lerobot_ds, table: demos}]


@dataclass(frozen=True)
class FlowPolicy(FlowPolicyConfig):
    """`policy=flow`: the flow chunk policy's keys plus its `bc:` section."""

    bc: BCOptions = field(default_factory=BCOptions)  # `robo-async bc`: the demonstrations and the training


@dataclass(frozen=True)
class TinyVLAPolicy(TinyVLAPolicyConfig):
    """`policy=tiny_vla`: the tiny VLA's keys plus its `bc:` section (60 demos per task)."""

    # `robo-async bc`: demos per task and the training
    bc: BCOptions = field(default_factory=lambda: BCOptions(demos=60, steps=10000, batch=128, max_delay=8))


@dataclass(frozen=True)
class SmolVLAPolicy(SmolVLAPolicyConfig):
    """`policy=smolvla`: LeRobot's SmolVLA keys plus its `bc:` section."""

    # `robo-async bc` (LeRobot's own loss)
    bc: BCOptions = field(default_factory=lambda: BCOptions(demos=50, steps=300, batch=16, lr=3e-4, max_delay=0))


_POLICIES: dict[str, type] = {**POLICY_CONFIGS, "flow": FlowPolicy, "tiny_vla": TinyVLAPolicy, "smolvla": SmolVLAPolicy}


@functools.cache
def task_schema(name: str) -> type:
    """`task=<name>`: the task's config class, `SimImperfections` and `SimTaskOptions`."""
    from sim import TASKS, SimImperfections

    _, cfg_cls = TASKS[name]
    cls = make_dataclass(
        f"{cfg_cls.__name__}Task",
        [("name", str, field(default=name))],
        bases=(SimImperfections, SimTaskOptions, cfg_cls, _Named),
        frozen=True,
    )
    cls.__module__ = __name__
    return cls


@functools.cache
def algo_schema(name: str) -> type:
    """`algo=<name>`: the registered algorithm's config class, plus its `name`."""
    from robo_async.learner.algorithms import config_class

    cfg_cls = config_class(name)
    cls = make_dataclass(
        f"{cfg_cls.__name__}Choice", [("name", str, field(default=name))], bases=(cfg_cls, _Named), frozen=True
    )
    cls.__module__ = __name__
    return cls


def group_schemas() -> dict[str, dict[str, type]]:
    """group -> choice name -> the dataclass whose fields are that choice's keys."""
    from robo_async.learner.algorithms import algorithms
    from sim import TASKS

    return {
        "task": {n: task_schema(n) for n in TASKS},
        "policy": dict(_POLICIES),
        "algo": {n: algo_schema(n) for n in algorithms()},
        "buffer": {"lmdb": BufferConfig},
        "launcher": {"serial": LauncherConfig, "local": LauncherConfig, "ray": RayLauncherConfig},
    }


# -- the run ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainConfig:
    """`configs/train.yaml`: the run. The groups are typed by their choice (`group_schemas()`)."""

    task: Any = None  # task=<name>: the simulated task or resource (its keys: task.*)
    policy: Any = None  # policy=<name>: the network the actors run
    algo: Any = None  # algo=<name>: the learning algorithm
    buffer: BufferConfig = field(default_factory=BufferConfig)  # buffer=lmdb: the replay store
    robot: dict | None = None  # robot=<name>: a LeRobot device instead of the simulator (keys checked by LeRobot)
    teleop: dict | None = None  # teleop=<name>: a LeRobot teleoperator or the virtual operator
    launcher: LauncherConfig = field(default_factory=LauncherConfig)  # launcher=serial|local|ray
    actors: int = 1  # actor processes, one robot (or simulator) each
    robots: tuple[
        dict, ...
    ] = ()  # per-actor robots (heterogeneous): e.g. [{type: sim_so101, id: a}, {}] ({} = the task's sim)
    seed: int = 0  # seed of the learner and (times 1000, plus the actor id) of each actor
    runs_root: str = "runs"  # each run gets runs/<date>-<time>-<task>/
    run_dir: str | None = None  # or an explicit directory
    resume: str | None = None  # a run directory to continue from its last checkpoint
    budget: BudgetOptions = field(default_factory=BudgetOptions)  # when training stops
    # a `robo-async reward train` directory: actors' reward and success come from camera frames
    reward_classifier: str | None = None
    # stop once the success rate over the last `success_window` deterministic episodes reaches this
    stop_at_success: float | None = LearnerConfig.stop_at_success
    success_window: int = LearnerConfig.success_window  # deterministic episodes the success rate is taken over
    eval_episodes: int = 20  # evaluation after training (deterministic policy); 0 to skip
    video: bool = False  # write eval.mp4 of one evaluation episode into the run directory
    transport: TransportOptions = field(default_factory=TransportOptions)  # learner endpoints and link security
    dashboard: DashboardOptions = field(default_factory=DashboardOptions)  # the live page
    actor: ActorOptions = field(default_factory=ActorOptions)  # the training actors
    learner: LearnerOptions = field(default_factory=LearnerOptions)  # the learner process
    safety: SafetyOptions = field(default_factory=SafetyOptions)  # the SafeRobot layer
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)  # leases of robots and simulators
    serve: ServeOptions = field(default_factory=ServeOptions)  # `robo-async serve`


TrainSchema = TrainConfig  # the name the docs hook walks


# -- mirrors for Hydra (made in mirrors.py) -------------------------------------------------------


_LOOSE = frozenset((*GROUPS, "robot", "teleop"))  # filled in by the group's choice


def _register() -> None:
    cs = ConfigStore.instance()
    cs.store(name="robo_async_schema", node=mirror(TrainConfig, _LOOSE))
    for group, named in group_schemas().items():
        for choice, cls in named.items():
            cs.store(group=f"schema/{group}", name=choice, node=open_maps(mirror(cls)))


_register()


# -- checking a run's config (against the mirrors: mirrors.py) ------------------------------------


def policy_schema(policy: dict) -> type:
    """The `policy=` choice a policy section is (by `name`, and `type` for LeRobot policies)."""
    name = str(policy.get("name"))
    choice = str(policy.get("type") or "act") if name == "lerobot" else name
    if name == "lerobot" and choice not in _POLICIES:
        return POLICY_CONFIGS["act"]  # another LeRobot type: the common LeRobot keys
    if choice not in _POLICIES:
        raise ConfigError(f"unknown policy '{name}'; available: {', '.join(sorted(_POLICIES))}")
    return _POLICIES[choice]


def typed_config(cfg: DictConfig | dict) -> TrainConfig:
    """The run config (composed, or a resumed run's) checked and typed, as `TrainConfig`."""
    values = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else copy.deepcopy(dict(cfg))
    assert isinstance(values, dict)
    groups = {g: values.pop(g, None) or {} for g in GROUPS}
    root = check(values, TrainConfig, "config", _LOOSE)
    for g in GROUPS:
        root.pop(g, None)
    task, algo, policy = (dict(groups[g]) for g in ("task", "algo", "policy"))
    from sim import TASKS

    if task.get("name") not in TASKS:
        raise ConfigError(f"unknown task '{task.get('name')}'; available: {sorted(TASKS)}")
    from robo_async.learner.algorithms import config_class

    try:
        config_class(str(algo.get("name")))
    except KeyError as e:
        raise ConfigError(str(e).strip("'\"")) from None
    launcher_cls = RayLauncherConfig if groups["launcher"].get("name") == "ray" else LauncherConfig
    return build(
        TrainConfig,
        {
            **root,
            "robot": root.get("robot") or None,
            "teleop": root.get("teleop") or None,
            "task": checked(task, task_schema(task["name"]), "task"),
            "algo": checked(algo, algo_schema(str(algo["name"])), "algo"),
            "policy": checked(policy, policy_schema(policy), "policy"),
            "buffer": checked(dict(groups["buffer"]), BufferConfig, "buffer"),
            "launcher": checked(dict(groups["launcher"]), launcher_cls, "launcher"),
        },
        "config",
    )


def check_buffer(buf: dict) -> dict:
    return check(buf, BufferConfig, "buffer")


def check_algo(algo: dict) -> dict:
    """`algo` checked against the chosen algorithm's config (name kept)."""
    from robo_async.learner.algorithms import config_class

    try:
        config_class(str(algo.get("name")))
    except KeyError as e:
        raise ConfigError(str(e).strip("'\"")) from None
    return check(algo, algo_schema(str(algo["name"])), "algo")


def check_task(task: dict, config_cls: type | None = None) -> dict:
    """`task` checked against its task's schema (the task's config, imperfections, realtime)."""
    return check(task, task_schema(str(task.get("name"))), "task")

"""Builders: the run's typed config (`schema.typed_config`) turned into the plan (`plan.TrainPlan`),
plain constructor arguments for the learner and each actor. Robots and teleops come from
`tasks.py`, policies from `policy_args.py` (re-exported here for the runners)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from hal.spec import RobotSpec
from robo_async.actor.actor import ActorConfig, lane_actor_id
from robo_async.actor.loop_config import LoopConfig
from robo_async.actor.options import InferenceMode
from robo_async.actor.uplink_config import UplinkConfig
from robo_async.buffer.lmdb_store import StoreConfig
from robo_async.buffer.sampler import check_mix
from robo_async.launch.checks import (  # noqa: F401  (resolve_precision, resolve_inference: re-exported)
    check_advertise,
    check_envs,
    check_her,
    check_key_lanes,
    check_replicas,
    check_start_range,
    check_wandb,
    one_line,
    resolve_inference,
    resolve_precision,
    resolve_replan,
    transport_keys,
)
from robo_async.launch.mirrors import ConfigError, as_dict, checked
from robo_async.launch.plan import TrainPlan
from robo_async.launch.policy_args import (  # noqa: F401
    PolicyArgs,
    acting_args,
    load_policy_file,
    make_actor_policy,
    vla_backbone,
    vla_inputs,
)
from robo_async.launch.schema import (  # noqa: F401
    BufferConfig,
    TrainConfig,
    check_algo,
    typed_config,
)
from robo_async.launch.tasks import (  # noqa: F401
    TaskArgs,
    make_robot,
    make_safe_robot,
    make_teleops,
    obs_dims,
    task_args,
    task_spec,
)
from robo_async.learner.algorithms import PolicySpec, config_class
from robo_async.learner.algorithms.bc.config import BCOptions
from robo_async.learner.config import LearnerConfig


def algo_of(algo: dict | object) -> tuple[str, object]:
    """(name, config dataclass) of an `algo` config section (a resolved mapping, or typed)."""
    if isinstance(algo, dict):
        algo = checked(dict(algo), _algo_schema(str(algo.get("name"))), "algo")
    name = str(algo.name)  # type: ignore[attr-defined]
    cls = config_class(name)
    return name, cls(**{f.name: getattr(algo, f.name) for f in fields(cls)})


def _algo_schema(name: str) -> type:
    from robo_async.launch.schema import algo_schema

    check_algo({"name": name})  # an unknown algorithm: one line naming the known ones
    return algo_schema(name)


def new_run_dir(root: str, task: str) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = Path(root) / f"{stamp}-{task}"
    n = 1
    while path.exists():
        n += 1
        path = Path(root) / f"{stamp}-{task}-{n}"
    return path


def batch_bytes(spec: RobotSpec, flush_every: int) -> int:
    """About the size of one actor batch message (raw frames: an upper bound), to size ZMQ queues in bytes."""
    vec = spec.state_dim + sum(n for _, n in spec.features)
    per = 4 * (2 * vec + 2 * spec.action_dim) + 16 + 2 * sum(c.height * c.width * 3 for c in spec.cameras)
    return flush_every * per


def build_plan(cfg: DictConfig | TrainConfig, run_dir: Path, resume_meta: dict | None = None) -> TrainPlan:
    """The plan of a run from its config (composed, or a resumed run's): checked and typed first
    (`typed_config`: one ConfigError line per wrong type, unknown key or choice), then each
    component's part made beside it (`LearnerConfig.from_options`, `ActorConfig.from_options`), and
    every choice that only fits together across them (robots and policy, algorithm and policy,
    inference and guide, envs and keys) refused here, before anything starts."""
    c = cfg if isinstance(cfg, TrainConfig) else typed_config(cfg)
    config_yaml = OmegaConf.to_yaml(cfg if isinstance(cfg, DictConfig) else as_dict(c), resolve=True)
    task, actor_tasks = plan_tasks(c)
    spec = task_spec(task)

    def plan_task(i: int) -> TaskArgs:
        return actor_tasks[i] if actor_tasks else task

    algo_name, algo_config, pol, policy_spec = plan_policy(c, spec, plan_task)
    t = c.transport
    keys_dir = transport_keys(t, c.actors)
    advertise = check_advertise(t.advertise)
    learner = plan_learner(c, run_dir, resume_meta, task.name, spec, algo_name, algo_config, policy_spec, keys_dir)
    learner = dataclasses.replace(learner, config_yaml=config_yaml)
    actors = plan_actors(c, run_dir, resume_meta, plan_task, algo_name, keys_dir, learner.max_actors)
    return TrainPlan(
        run_dir, learner, task, pol, actors, c.launcher, actor_tasks, c.resources, c.dashboard.port, advertise
    )


def plan_tasks(c: TrainConfig) -> tuple[TaskArgs, tuple[TaskArgs, ...]]:
    """The run's task and, with `robots`, each actor's (a LeRobot device, or the task's simulator
    with some task keys overridden); every actor's robot must fit the policy built for the task."""
    safety = as_dict(c.safety)
    task_values = as_dict(c.task)
    task = task_args(task_values, c.robot, safety, c.teleop)
    actor_tasks: tuple[TaskArgs, ...] = ()
    if c.robots:  # one entry per actor: a LeRobot device dict, or {} for the task's simulator
        if len(c.robots) != c.actors:
            raise ConfigError(f"robots lists {len(c.robots)} robots but actors={c.actors}; give one per actor")
        # an entry with `type` is a LeRobot device; one without is the task's simulator with
        # these task keys overridden (e.g. {disconnect_after_ticks: 300} to inject a fault)
        actor_tasks = tuple(
            task_args(task_values, r, safety, c.teleop)
            if r and r.get("type")
            else task_args({**task_values, **(r or {})}, None, safety, c.teleop)
            for r in c.robots
        )
    if c.reward_classifier:
        task = dataclasses.replace(task, reward_classifier=c.reward_classifier)
        actor_tasks = tuple(dataclasses.replace(t, reward_classifier=c.reward_classifier) for t in actor_tasks)
        make_safe_robot(task)  # refuses here, in one line, a classifier that is missing or does not fit
    spec = task_spec(task)
    for i, t in enumerate(actor_tasks):
        other = task_spec(t)
        if (other.action_dim, other.state_dim, other.features) != (spec.action_dim, spec.state_dim, spec.features):
            raise ConfigError(
                f"robots[{i}] ({other.name}) does not fit the policy built for {spec.name}: "
                f"{other.action_dim} joints, features {other.features}"
            )
    return task, actor_tasks


def plan_policy(
    c: TrainConfig, spec: RobotSpec, plan_task: Callable[[int], TaskArgs]
) -> tuple[str, object, PolicyArgs, PolicySpec]:
    """The algorithm (its acting delay as the actors will ask), the actors' policy and the policy
    spec the learner trains; the algorithm refuses a policy it cannot train, here."""
    a = c.actor
    server = a.inference_server or None
    algo_name, algo_config = algo_of(c.algo)
    pol = PolicyArgs.from_config(as_dict(c.policy))
    if getattr(algo_config, "max_delay", 0) is None:  # delay-consistent acting: as the actors will ask
        modes = {resolve_inference(a.inference, plan_task(i), server, pol.horizon) for i in range(c.actors)}
        ms = pol.option("inference_delay_ms") or 0
        injected = float(max(ms) if isinstance(ms, tuple) else ms) / 1000 / spec.dt
        bc_delay = getattr(c.policy, "bc", BCOptions()).max_delay
        delay = 0 if modes <= {"inline", "sync", "sync_bounded"} else max(bc_delay, math.ceil(injected - 1e-9) + 2)
        algo_config = dataclasses.replace(algo_config, max_delay=delay)  # type: ignore[type-var]
    cams = [str(cam) for cam in (pol.option("cameras") or ())]
    have = [cam.name for cam in spec.cameras]
    if pol.name != "lerobot" and [cam for cam in cams if cam not in have]:
        raise ConfigError(
            f"policy.cameras {[cam for cam in cams if cam not in have]} are not cameras of {spec.name} "
            f"(it has {have}); add them with task.cameras=[...]"
        )
    policy_spec = PolicySpec(
        pol.name,
        pol.obs_keys,
        obs_dims(spec, pol.obs_keys),
        spec.joint_low,
        spec.joint_high,
        pol.hidden,
        pol.action_mode,
        pol.delta_scale,
        dict(pol.obs_scale),
        spec.dt,
        dict(pol.options),
    )
    from robo_async.learner.algorithms import build_algorithm

    try:  # the algorithm refuses a policy it cannot train, here rather than in the learner process
        algo = build_algorithm(algo_name, algo_config, policy_spec)
    except (ValueError, KeyError) as e:
        raise ConfigError(str(e).strip("'\"")) from None
    algo_config = check_her(algo_name, algo_config, algo.window, spec, policy_spec.obs_keys, plan_task(0))
    return algo_name, algo_config, acting_args(pol, algo_name, algo_config), policy_spec


def plan_learner(
    c: TrainConfig,
    run_dir: Path,
    resume_meta: dict | None,
    task_name: str,
    spec: RobotSpec,
    algo_name: str,
    algo_config: object,
    policy_spec: PolicySpec,
    keys_dir: str | None,
) -> LearnerConfig:
    """The learner's part: `LearnerConfig.from_options` with the store, the transport and the
    plan-level checks of the learner section (W&B installed, replicas placeable)."""
    buf, t = c.buffer, c.transport
    if buf.name != "lmdb":
        raise ConfigError("only buffer=lmdb exists")
    with one_line():
        mix = check_mix(dict(buf.mix))
    store = StoreConfig(**{f.name: getattr(buf, f.name) for f in fields(StoreConfig)})
    check_wandb(c.learner.wandb)
    with one_line():
        learner = LearnerConfig.from_options(
            c.learner,
            c.budget,
            run_dir=str(run_dir),
            data_address=f"tcp://{t.host}:{t.data_port}",
            weights_address=f"tcp://{t.host}:{t.weights_port}",
            policy=policy_spec,
            algo=algo_name,
            algo_config=algo_config,
            store=store,
            mix=mix,
            prefetch=buf.prefetch,
            task=task_name,
            spec_signature=spec.signature(),
            stop_at_success=c.stop_at_success,
            success_window=c.success_window,
            seed=c.seed,
            resume=resume_meta is not None and not resume_meta.get("fresh_learner"),
            count_stored=bool(resume_meta and resume_meta.get("fresh_learner")),
            keys_dir=keys_dir,
            max_message_mb=t.max_message_mb,
            queue_mb=t.queue_mb,
            message_bytes=batch_bytes(spec, c.actor.flush_every),
        )
    check_replicas(c, algo_name, algo_config, policy_spec, learner.device)
    return learner


def plan_actors(
    c: TrainConfig,
    run_dir: Path,
    resume_meta: dict | None,
    plan_task: Callable[[int], TaskArgs],
    algo_name: str,
    keys_dir: str | None,
    max_actors: int,
) -> tuple[ActorConfig, ...]:
    """Each actor's part: `ActorConfig.from_options` with its loop (the inference mode and
    replanning rule resolved for its robot and the algorithm) and delivery; then what fits only
    across actors and tasks (a guide on inline simulators, envs, streams, keys' lanes)."""
    a, buf, t = c.actor, c.buffer, c.transport
    server = a.inference_server or None
    hw = (resume_meta or {}).get("high_water", {})
    eps = (resume_meta or {}).get("episode_counts", {})
    ranges = (resume_meta or {}).get("start_ranges", {})  # where each actor's start-range curriculum stood
    replan = resolve_replan(a.replan, algo_name)
    horizon = PolicyArgs.from_config(as_dict(c.policy)).horizon
    envs = int(a.envs)

    def episodes_of(i: int) -> int:  # all the episodes actor i's robots made (their numbers seed resets)
        return sum(int(eps.get(str(lane_actor_id(i, j)), 0)) for j in range(envs))

    if c.actors < 1:
        raise ConfigError("actors must be at least 1")
    actors = []
    for i in range(c.actors):
        ti = plan_task(i)
        with one_line():
            loop = LoopConfig.from_options(
                a,
                inference=resolve_inference(a.inference, ti, server, horizon),
                replan=replan,
                actor_id=i,
                episode_ticks=ti.episode_ticks(),
                realtime=ti.realtime,
                seed=c.seed * 1000 + i,
                start_episode=episodes_of(i),
                resumed_start_range=ranges.get(str(i)),
            )
            delivery = UplinkConfig.from_options(
                a,
                journal_dir=str(run_dir / "actors" / str(i) / "journal"),
                image_codec=buf.image_codec,
                jpeg_quality=buf.jpeg_quality,
                queue_mb=t.queue_mb,
                message_bytes=batch_bytes(task_spec(ti), a.flush_every),
            )
            actors.append(
                ActorConfig.from_options(
                    a, actor_id=i, loop=loop, delivery=delivery, start_seq=int(hw.get(str(i), 0)), keys_dir=keys_dir
                )
            )
    if a.guide:
        if any(cfg.loop.inference != InferenceMode.inline for cfg in actors):
            raise ConfigError(
                "actor.guide (JSRL) runs the guide on the control thread: simulators with "
                "actor.inference=inline (or auto) only"
            )
        if a.guide != "expert" and not Path(a.guide).exists():
            raise ConfigError(f"actor.guide={a.guide}: use expert or a `robo-async bc` run directory")
    check_start_range(a, c, plan_task)
    envs = check_envs(a, c, plan_task, server)
    if c.actors * envs > max_actors:  # each robot is a stream the learner keeps state for
        raise ConfigError(
            f"{c.actors} actors x {envs} envs = {c.actors * envs} streams; the learner keeps "
            f"{max_actors} (the rest would be refused): use fewer actors or envs"
        )
    check_key_lanes(keys_dir, c.actors, envs)
    return tuple(actors)

"""Builders: the only place a Hydra config is turned into plain constructor arguments."""

from __future__ import annotations

import dataclasses
import math
import datetime as dt
from dataclasses import dataclass, field, fields
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf

from hal.robot import Robot
from hal.safety import SafeRobot, WorkspaceBox
from hal.spec import RobotSpec
from policies.base import Policy, make_policy
from robo_async.actor.actor import ActorConfig
from robo_async.actor.inference import InferenceModeError, choose_inference
from robo_async.actor.loop import GuideConfig, LoopConfig
from robo_async.actor.uplink import UplinkConfig
from robo_async.buffer.lmdb_store import StoreConfig
from robo_async.buffer.sampler import check_mix
from robo_async.launch.supervisor import LauncherConfig, RayLauncherConfig, ResourcesConfig, RestartPolicy
from robo_async.launch.schema import ConfigError, check_algo, check_buffer, check_task, check_train
from robo_async.learner.algorithms import PolicySpec, config_class
from robo_async.learner.learner import LearnerConfig
from sim import TASKS, SimImperfections, SimRobot


@dataclass(frozen=True)
class TaskArgs:
    name: str
    options: dict  # the task's own config dataclass fields
    realtime: bool = False
    imperfections: dict = field(default_factory=dict)  # SimImperfections fields (latency, noise, faults)
    robot: dict | None = None  # a LeRobot device (type, port, id, ...) instead of the simulator
    safety: dict = field(default_factory=dict)  # watchdog_s, workspace_low/high (m)
    teleop: dict | None = None  # a LeRobot teleoperator (type, port, ...) or the virtual operator
    reward_classifier: str | None = None  # a `reward train` directory: reward and success from camera frames

    @property
    def resource_need(self) -> str:
        """What this actor leases: its robot, or a simulator slot of its task."""
        if self.robot is not None:
            return f"robot:{self.robot['type']}"
        return f"sim:{self.name}"

    def resource_id(self, index: int) -> str:
        if self.robot is not None:
            return f"robot:{self.robot['type']}/{self.robot.get('id') or self.robot.get('port') or index}"
        return f"sim:{self.name}/{index}"


_POLICY_KEYS = ("name", "obs_keys", "hidden", "action_mode", "delta_scale", "obs_scale")


@dataclass(frozen=True)
class PolicyArgs:
    name: str
    obs_keys: tuple[str, ...]
    hidden: tuple[int, ...]
    action_mode: str = "delta"
    delta_scale: float = 0.15
    obs_scale: tuple[tuple[str, float], ...] = ()
    options: tuple[tuple[str, object], ...] = ()  # the policy's other keys (horizon, cameras, path, ...)

    @staticmethod
    def from_config(policy: dict) -> "PolicyArgs":
        p = dict(policy)
        delay = p.get("inference_delay_ms")
        if delay is not None:
            lo_hi = delay if isinstance(delay, list | tuple) else [delay, delay]
            if (len(lo_hi) != 2 or not all(isinstance(x, int | float) for x in lo_hi)
                    or not 0 <= lo_hi[0] <= lo_hi[1]):
                raise ConfigError(f"policy.inference_delay_ms must be a number >= 0 or [low, high], not {delay!r}")
        scale = tuple((str(k), float(v)) for k, v in (p.get("obs_scale") or {}).items())
        options = tuple((k, _hashable(v)) for k, v in sorted(p.items()) if k not in _POLICY_KEYS and k != "bc")
        return PolicyArgs(p["name"], tuple(p["obs_keys"]), tuple(p.get("hidden") or ()),
                          p.get("action_mode", "delta"), float(p.get("delta_scale", 0.15)), scale, options)

    def option(self, key: str, default: object = None) -> object:
        return dict(self.options).get(key, default)


def _hashable(v: object) -> object:
    if isinstance(v, list | tuple):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple((k, _hashable(x)) for k, x in v.items())
    return v


@dataclass(frozen=True)
class TrainPlan:
    run_dir: Path
    learner: LearnerConfig
    task: TaskArgs
    policy: PolicyArgs
    actors: tuple[ActorConfig, ...]
    launcher: LauncherConfig = LauncherConfig()  # runner, timeouts, supervision
    actor_tasks: tuple[TaskArgs, ...] = ()  # per actor (heterogeneous robots); default: `task` for all
    resources: ResourcesConfig = ResourcesConfig()  # leases: lease_dir, wait_s, sim_slots
    dashboard_port: int | None = 0  # the live page on loopback (0: any free port; None: none)

    @property
    def start_timeout_s(self) -> float:
        return self.launcher.start_timeout_s

    @property
    def shutdown_timeout_s(self) -> float:
        return self.launcher.shutdown_timeout_s

    def task_of(self, actor_id: int) -> TaskArgs:
        return self.actor_tasks[actor_id] if self.actor_tasks else self.task


def _dataclass_kwargs(cls: type, values: dict, where: str) -> dict:
    names = {f.name for f in fields(cls)}
    unknown = set(values) - names
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}; known: {sorted(names)}")
    return {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}


IMPERFECTIONS = ("obs_latency_ticks", "action_latency_ticks", "obs_noise_std", "action_noise_std",
                 "disconnect_after_ticks")


def task_args(task: DictConfig | dict, robot: dict | None = None, safety: dict | None = None,
              teleop: dict | None = None) -> TaskArgs:
    values = OmegaConf.to_container(task, resolve=True) if isinstance(task, DictConfig) else dict(task)
    name = values.get("name")
    if name not in TASKS:
        raise ConfigError(f"unknown task '{name}'; available: {sorted(TASKS)}")
    _, cfg_cls = TASKS[name]
    given = set(values)
    values = {k: v for k, v in check_task(values, cfg_cls).items() if k in given}  # typed; unknown keys refused
    values.pop("name")
    realtime = bool(values.pop("realtime", False))
    imperfections = {k: values.pop(k) for k in IMPERFECTIONS if k in values}
    robot = dict(robot) if robot and robot.get("type") else None
    return TaskArgs(name, _dataclass_kwargs(cfg_cls, values, f"task {name}"), realtime,
                    {k: v for k, v in imperfections.items() if v}, robot, dict(safety or {}),
                    dict(teleop) if teleop and teleop.get("type") else None)


def make_robot(args: TaskArgs) -> Robot:
    """The robot an actor drives: a LeRobot device through the adapter, or a simulator."""
    if args.robot is not None:
        from hardware.lerobot_adapter import LeRobotRobot, make_lerobot_device

        opts = dict(args.robot)
        limits = opts.pop("joint_low", None), opts.pop("joint_high", None)
        hz = float(opts.pop("hz", args.options.get("hz", 30.0)))
        return LeRobotRobot(make_lerobot_device(opts), *(tuple(x) if x else None for x in limits), hz=hz)
    task_cls, cfg_cls = TASKS[args.name]
    made = task_cls(cfg_cls(**args.options))
    if isinstance(made, Robot):
        return made
    return SimRobot(made, imperfections=SimImperfections(**args.imperfections))


def make_teleops(args: TaskArgs, robot: SafeRobot) -> tuple:
    """The session's teleops, not yet connected: `teleop=virtual` (the simulated operator, which
    drives the task's scripted expert) or any LeRobot teleoperator (leader arms, gamepad,
    keyboard, sim_leader). One whose actions do not fit the robot is refused here."""
    if not args.teleop:
        return ()
    if args.teleop["type"] == "virtual":
        from sim.operator import make_virtual_operator

        try:
            teleops: tuple = (make_virtual_operator(robot, args.name, args.teleop),)
        except (TypeError, ValueError) as e:
            raise ConfigError(str(e)) from None
    else:
        from hardware.lerobot_adapter import LeRobotTeleop, make_lerobot_teleop_device

        opts = dict(args.teleop)
        buttons = opts.pop("events_from", None)  # a second device for the buttons: {type: keyboard_ee} ...
        teleops = (LeRobotTeleop(make_lerobot_teleop_device(opts)),)
        if buttons:
            teleops += (LeRobotTeleop(make_lerobot_teleop_device(dict(buttons))),)
    from robo_async.actor.takeover import TeleopMismatch, check_teleops

    try:
        check_teleops(teleops, robot.spec.action_dim)
    except TeleopMismatch as e:
        raise ConfigError(str(e)) from None
    return teleops


def make_safe_robot(args: TaskArgs) -> SafeRobot:
    """`make_robot` behind the safety layer, with the configured watchdog and workspace box (and
    the learned reward, `reward_classifier`, between the two)."""
    robot = make_robot(args)
    if args.reward_classifier:
        from policies.reward import ClassifierReward, RewardError, SuccessClassifier

        try:
            robot = ClassifierReward(robot, SuccessClassifier.load(args.reward_classifier))
        except RewardError as e:
            raise ConfigError(str(e)) from None
    workspace = None
    low, high = args.safety.get("workspace_low"), args.safety.get("workspace_high")
    if low is not None and high is not None:
        fk = getattr(robot, "ee_position", None)
        if fk is None:
            raise ConfigError(f"safety.workspace_* needs forward kinematics; {robot.spec.name} has none")
        workspace = WorkspaceBox(fk, tuple(low), tuple(high))
    return SafeRobot(robot, workspace=workspace, watchdog_s=args.safety.get("watchdog_s"))


def task_spec(args: TaskArgs) -> RobotSpec:
    return make_robot(args).spec


def obs_dims(spec: RobotSpec, keys: tuple[str, ...]) -> tuple[int, ...]:
    dims = {"state": spec.state_dim, **spec.feature_dims()}
    missing = [k for k in keys if k not in dims]
    if missing:
        raise ConfigError(f"policy.obs_keys {missing} are not observations of {spec.name}; "
                          f"it has {sorted(dims)}")
    return tuple(dims[k] for k in keys)


def vla_inputs(keys: tuple[str, ...], tasks: object) -> tuple[tuple[int, ...], list[str]]:
    """The tiny VLA's feature sizes (from whichever of `tasks` has each feature) and the
    instructions of those tasks."""
    from sim import INSTRUCTIONS

    names = [str(t) for t in (tasks or ())]  # type: ignore[union-attr]
    unknown = [t for t in names if t not in INSTRUCTIONS]
    if not names or unknown:
        raise ConfigError(f"policy.tasks must list sim tasks with instructions ({sorted(INSTRUCTIONS)}), got {names}")
    dims: dict[str, int] = {}
    for t in names:
        spec = task_spec(task_args({"name": t}))
        dims.update({"state": spec.state_dim, **spec.feature_dims()})
    missing = [k for k in keys if k not in dims]
    if missing:
        raise ConfigError(f"policy.obs_keys {missing} are not observations of any of {names}")
    return tuple(dims[k] for k in keys), [INSTRUCTIONS[t] for t in names]


def make_actor_policy(args: PolicyArgs, spec: RobotSpec, deterministic: bool = False) -> Policy:
    """The policy an actor runs: built from the config, weights from `path` when given, wrapped
    in an injected inference delay when `inference_delay_ms` is set (sim and tests)."""
    opts = {k: (dict(v) if k == "overrides" else v) for k, v in args.options}
    if args.name == "lerobot":
        policy = _make_lerobot_policy(args, spec, opts)
    elif args.name == "lerobot_dsrl":  # algo=dsrl steering a frozen LeRobot policy (policy.path)
        from policies.lerobot_chunk import SteeredLeRobotPolicy

        if not opts.get("path"):
            raise ConfigError("algo=dsrl steers a frozen policy: give policy.path=<a saved LeRobot policy directory>")
        try:
            policy = SteeredLeRobotPolicy(_make_lerobot_policy(args, spec, opts), float(opts.get("noise_bound", 1.5)),
                                          tuple(opts.get("noise_hidden") or (128, 128)))
        except ValueError as e:
            raise ConfigError(str(e)) from None
        policy.deterministic = deterministic
    else:
        extra: dict = {}
        if args.name == "tiny_vla":  # several tasks: features one task lacks are zero, words from all
            dims, extra["instructions"] = vla_inputs(args.obs_keys, opts.get("tasks") or ())
        else:
            dims = obs_dims(spec, args.obs_keys)
        policy = make_policy(args.name, obs_keys=args.obs_keys, obs_dims=dims,
                             action_low=spec.joint_low, action_high=spec.joint_high, hidden=args.hidden,
                             dt=spec.dt, deterministic=deterministic, action_mode=args.action_mode,
                             delta_scale=args.delta_scale, obs_scale=dict(args.obs_scale),
                             **extra, **{k: v for k, v in opts.items() if k not in ("path", "inference_delay_ms", "type",
                                                                                     "tasks", "bc")})
        policy.deterministic = deterministic
        if opts.get("path"):
            load_policy_file(policy, Path(str(opts["path"])))
    delay = opts.get("inference_delay_ms")
    if delay:
        from policies.delayed import DelayedPolicy

        lo, hi = (float(delay[0]), float(delay[1])) if isinstance(delay, tuple) else (float(delay), float(delay))
        policy = DelayedPolicy(policy, lo, hi - lo)
    return policy


def acting_args(pol: PolicyArgs, algo_name: str, algo_config: object) -> PolicyArgs:
    """The policy the actors run: `pol` itself, or what the algorithm publishes instead (e.g.
    `algo=qc` trains `policy=flow` on the learner and publishes its one-step actor)."""
    from robo_async.learner.algorithms.base import acting_policy

    acting = acting_policy(algo_name, algo_config, pol.name)  # type: ignore[arg-type]
    if acting is None:
        return pol
    name, extra = acting
    opts = dict(pol.options)
    opts.update({k: _hashable(v) for k, v in extra.items()})  # an extra of None removes the key
    return dataclasses.replace(pol, name=name, options=tuple(sorted((k, v) for k, v in opts.items() if v is not None)))


def algo_of(algo: dict) -> tuple[str, object]:
    """(name, config dataclass) of a resolved `algo` config section."""
    algo = check_algo(dict(algo))
    name = algo.pop("name")
    return name, config_class(name)(**{k: tuple(v) if isinstance(v, list) else v for k, v in algo.items()})


def load_policy_file(policy: Policy, path: Path) -> None:
    """Weights saved by `robo-async bc` (policy.safetensors, or the run directory holding it)."""
    from safetensors.numpy import load_file

    file = path / "policy.safetensors" if path.is_dir() else path
    if not file.is_file():
        raise ConfigError(f"policy.path={path}: no policy.safetensors there (train one with `robo-async bc`)")
    try:
        load_prior = getattr(policy, "load_prior", None)  # a steered policy: the file is its frozen prior
        load_prior(load_file(str(file))) if load_prior is not None else policy.load_weights(0, load_file(str(file)))
    except ValueError as e:
        raise ConfigError(f"policy.path={file}: {e}") from None


def _make_lerobot_policy(args: PolicyArgs, spec: RobotSpec, opts: dict) -> Policy:
    from policies.lerobot_chunk import LeRobotPolicyUnavailable, build_lerobot_policy, load_lerobot_policy

    env_keys = tuple(k for k in args.obs_keys if k != "state")
    cams = tuple(opts.get("cameras") or ())
    units = str(opts.get("units", "rad"))
    try:
        if opts.get("path"):
            return load_lerobot_policy(str(opts["path"]), action_low=spec.joint_low, action_high=spec.joint_high,
                                       env_keys=env_keys, cameras=cams, dt=spec.dt, units=units,
                                       task=str(opts.get("instruction", "")))
        sizes = {c.name: (c.height, c.width) for c in spec.cameras}
        missing = [c for c in cams if c not in sizes]
        if missing:
            raise ConfigError(f"policy.cameras {missing} are not cameras of {spec.name} (it has {sorted(sizes)})")
        dims = obs_dims(spec, env_keys) if env_keys else ()
        overrides = dict(opts.get("overrides") or {})
        if str(opts.get("type", "act")) == "smolvla":
            overrides["vlm_model_name"] = str(vla_backbone(opts.get("backbone")))
        return build_lerobot_policy(str(opts.get("type", "act")), state_dim=spec.state_dim,
                                    action_low=spec.joint_low, action_high=spec.joint_high, env_keys=env_keys,
                                    env_dim=int(sum(dims)), env_scale=float(opts.get("env_scale", 1.0)),
                                    cameras=tuple((c, *sizes[c]) for c in cams),
                                    chunk_size=int(opts.get("chunk_size", 10)), dt=spec.dt, units=units,
                                    task=str(opts.get("instruction", "")), **overrides)
    except LeRobotPolicyUnavailable as e:
        raise ConfigError(str(e)) from None


def vla_backbone(source: object) -> Path:
    """`policy.backbone`: `tiny` (a small random SmolVLM generated here, its tokenizer trained on
    the sim tasks' instructions) or a local SmolVLM directory (downloaded on a connected machine)."""
    from policies.tiny_backbone import BackboneFilesMissing, check_backbone_dir, tiny_smolvlm_for
    from sim import INSTRUCTIONS

    if not source:
        raise ConfigError("policy=smolvla needs policy.backbone: tiny (generated here, random weights) or a local "
                          "SmolVLM directory (config.json, processor and tokenizer files); the hub is unreachable")
    if str(source) == "tiny":
        return tiny_smolvlm_for(list(INSTRUCTIONS.values()))
    try:
        return check_backbone_dir(Path(str(source)).expanduser())
    except BackboneFilesMissing as e:
        raise ConfigError(f"policy.backbone: {e}") from None


def resolve_inference(mode: str, task: TaskArgs, server: str | None = None) -> str:
    """`actor.inference` for training actors: `choose_inference` (actor/inference.py) decides."""
    try:
        return choose_inference(mode, purpose="train", robot=task.robot["type"] if task.robot is not None else None,
                                realtime=task.realtime, server=server)
    except InferenceModeError as e:
        raise ConfigError(str(e)) from None


def resolve_device(name: str) -> str:
    """`learner.device`: auto picks the first GPU when torch sees one, else the CPU."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(name)
    except RuntimeError as e:
        raise ConfigError(f"learner.device '{name}' is not a torch device ({e}); use auto, cpu or cuda") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"learner.device={name} but torch sees no GPU here; use auto or cpu")
    return name


def new_run_dir(root: str, task: str) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = Path(root) / f"{stamp}-{task}"
    n = 1
    while path.exists():
        n += 1
        path = Path(root) / f"{stamp}-{task}-{n}"
    return path


def _plain(node: object) -> object:
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig | ListConfig) else node


def push_config(d: dict) -> "PushConfig":
    from robo_async.transport.weights import PushConfig

    try:
        return PushConfig(**d)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"learner.weights: {e}") from None


def batch_bytes(spec: RobotSpec, flush_every: int) -> int:
    """About the size of one actor batch message (raw frames: an upper bound), to size ZMQ queues in bytes."""
    vec = spec.state_dim + sum(n for _, n in spec.features)
    per = 4 * (2 * vec + 2 * spec.action_dim) + 16 + 2 * sum(c.height * c.width * 3 for c in spec.cameras)
    return flush_every * per


def transport_keys(t: DictConfig, actors: int) -> str | None:
    """The CURVE keys directory, or None for clear links (loopback, or an explicit opt-out)."""
    from robo_async.transport.curve import is_loopback

    mode, keys = str(t.get("curve", "auto")), t.get("keys")
    if mode not in ("auto", "on", "off"):
        raise ConfigError(f"transport.curve must be auto, on or off, not '{mode}'")
    if mode == "off":
        return None
    if not keys:
        if mode == "on":
            raise ConfigError("transport.curve=on needs transport.keys=<dir>: create one with "
                              "`robo-async keys dir=keys actors=N`")
        if not is_loopback(str(t.host)):
            raise ConfigError(f"transport.host={t.host} binds beyond loopback without keys: anyone who reaches "
                              f"the ports could read the weights and insert data. Create keys with "
                              f"`robo-async keys dir=keys actors={actors}` and set transport.keys=keys, or "
                              f"opt out with transport.curve=off")
        return None
    d = Path(str(keys)).expanduser().resolve()
    missing = [str(p) for p in (d / "learner.key_secret", d / "learner.key", d / "authorized") if not p.exists()]
    if missing:
        raise ConfigError(f"transport.keys={keys}: {', '.join(missing)} missing; create them with "
                          f"`robo-async keys dir={keys} actors={actors}`")
    return str(d)


def build_plan(cfg: DictConfig, run_dir: Path, resume_meta: dict | None = None) -> TrainPlan:
    check_train(OmegaConf.to_container(cfg, resolve=True))  # types and unknown keys, one line each
    safety = _plain(cfg.get("safety")) or {}
    robots = list(_plain(cfg.get("robots")) or [])
    teleop = _plain(cfg.get("teleop"))
    task = task_args(cfg.task, _plain(cfg.get("robot")), safety, teleop)
    actor_tasks: tuple[TaskArgs, ...] = ()
    if robots:  # one entry per actor: a LeRobot device dict, or {} for the task's simulator
        if len(robots) != cfg.actors:
            raise ConfigError(f"robots lists {len(robots)} robots but actors={cfg.actors}; give one per actor")
        # an entry with `type` is a LeRobot device; one without is the task's simulator with
        # these task keys overridden (e.g. {disconnect_after_ticks: 300} to inject a fault)
        actor_tasks = tuple(task_args(cfg.task, r, safety, teleop) if r and r.get("type")
                            else task_args({**_plain(cfg.task), **(r or {})}, None, safety, teleop) for r in robots)
    if cfg.get("reward_classifier"):
        clf = str(cfg.reward_classifier)
        task = dataclasses.replace(task, reward_classifier=clf)
        actor_tasks = tuple(dataclasses.replace(t, reward_classifier=clf) for t in actor_tasks)
        make_safe_robot(task)  # refuses here, in one line, a classifier that is missing or does not fit
    spec = task_spec(task)

    def plan_task(i: int) -> TaskArgs:
        return actor_tasks[i] if actor_tasks else task

    for i, t in enumerate(actor_tasks):
        other = task_spec(t)
        if (other.action_dim, other.state_dim, other.features) != (spec.action_dim, spec.state_dim, spec.features):
            raise ConfigError(f"robots[{i}] ({other.name}) does not fit the policy built for {spec.name}: "
                              f"{other.action_dim} joints, features {other.features}")
    algo_name, algo_config = algo_of(OmegaConf.to_container(cfg.algo, resolve=True))
    pol = PolicyArgs.from_config(OmegaConf.to_container(cfg.policy, resolve=True))
    if getattr(algo_config, "max_delay", 0) is None:  # delay-consistent acting: as the actors will ask
        modes = {resolve_inference(str(cfg.actor.get("inference", "auto")), plan_task(i),
                                   cfg.actor.get("inference_server") or None) for i in range(cfg.actors)}
        ms = pol.option("inference_delay_ms") or 0
        injected = float(max(ms) if isinstance(ms, tuple) else ms) / 1000 / spec.dt
        bc_delay = int((cfg.policy.get("bc") or {}).get("max_delay", 12))
        delay = 0 if modes <= {"inline", "sync"} else max(bc_delay, math.ceil(injected - 1e-9) + 2)
        algo_config = dataclasses.replace(algo_config, max_delay=delay)  # type: ignore[type-var]
    cams = [str(c) for c in (pol.option("cameras") or ())]
    have = [c.name for c in spec.cameras]
    if pol.name != "lerobot" and [c for c in cams if c not in have]:
        raise ConfigError(f"policy.cameras {[c for c in cams if c not in have]} are not cameras of {spec.name} "
                          f"(it has {have}); add them with task.cameras=[...]")
    policy_spec = PolicySpec(pol.name, pol.obs_keys, obs_dims(spec, pol.obs_keys), spec.joint_low, spec.joint_high,
                             pol.hidden, pol.action_mode, pol.delta_scale, dict(pol.obs_scale), spec.dt,
                             dict(pol.options))
    from robo_async.learner.algorithms import build_algorithm

    try:  # the algorithm refuses a policy it cannot train, here rather than in the learner process
        build_algorithm(algo_name, algo_config, policy_spec)
    except (ValueError, KeyError) as e:
        raise ConfigError(str(e).strip("'\"")) from None
    pol = acting_args(pol, algo_name, algo_config)
    buf = check_buffer(OmegaConf.to_container(cfg.buffer, resolve=True))
    if buf.pop("name") != "lmdb":
        raise ConfigError("only buffer=lmdb exists")
    mix = check_mix(buf.pop("mix"))
    prefetch = int(buf.pop("prefetch"))
    buf.pop("imports")
    try:
        store = StoreConfig(**buf)
    except ValueError as e:  # e.g. buffer.max_rows.online=0: named here, not by a learner that fails to start
        raise ConfigError(str(e)) from None
    t = cfg.transport
    keys_dir = transport_keys(t, cfg.actors)
    learner = LearnerConfig(
        run_dir=str(run_dir),
        data_address=f"tcp://{t.host}:{t.data_port}",
        weights_address=f"tcp://{t.host}:{t.weights_port}",
        policy=policy_spec, algo=algo_name, algo_config=algo_config,
        store=store, mix=mix, prefetch=prefetch, task=task.name, spec_signature=spec.signature(),
        config_yaml=OmegaConf.to_yaml(cfg, resolve=True),
        publish_every=cfg.learner.publish_every, checkpoint_every_s=cfg.learner.checkpoint_every_s,
        log_every_s=cfg.learner.log_every_s, budget_s=cfg.budget.seconds,
        budget_env_steps=cfg.budget.env_steps, stop_at_success=cfg.stop_at_success,
        success_window=cfg.success_window, seed=cfg.seed,
        resume=resume_meta is not None and not resume_meta.get("fresh_learner"),
        count_stored=bool(resume_meta and resume_meta.get("fresh_learner")),
        threads=cfg.learner.threads, device=resolve_device(str(cfg.learner.get("device", "auto"))),
        keys_dir=keys_dir, max_message_mb=float(t.get("max_message_mb", 64)),
        queue_mb=float(t.get("queue_mb", 64)), message_bytes=batch_bytes(spec, int(cfg.actor.flush_every)),
        push=push_config(_plain(cfg.learner.get("weights")) or {}),
    )
    inference = str(cfg.actor.get("inference", "auto"))
    server = cfg.actor.get("inference_server") or None
    if server is not None and not (isinstance(server, str) and server.startswith(("tcp://", "ipc://"))):
        raise ConfigError(f"actor.inference_server must be a ZMQ address like tcp://host:5560, not {server!r}")
    if str(cfg.actor.get("server_image_codec", "jpeg")) not in ("jpeg", "png", "qoi", "raw"):
        raise ConfigError(f"actor.server_image_codec must be jpeg, png, qoi or raw, not '{cfg.actor.server_image_codec}'")
    if server is not None and cfg.actor.get("guide"):
        raise ConfigError("actor.guide (JSRL) runs on the control thread; it cannot run with actor.inference_server")
    resolve_inference(inference, task, server)
    replan = str(cfg.actor.get("replan", "auto"))
    if replan not in ("auto", "due", "continuous", "end"):
        raise ConfigError(f"actor.replan must be auto, due, end or continuous, not '{cfg.actor.replan}'")
    if replan == "auto":  # chunked critics learn Q of chunks that ran whole: no action of a chunk is replaced
        from robo_async.learner.algorithms.base import whole_chunks

        replan = "end" if whole_chunks(algo_name) else "due"
    if int(cfg.actor.get("inference_workers", 1)) < 1:
        raise ConfigError(f"actor.inference_workers must be at least 1, not {cfg.actor.inference_workers}")
    guide_src = cfg.actor.get("guide")
    guide = None
    if guide_src:
        guide = GuideConfig(int(cfg.actor.guide_ticks), int(cfg.actor.guide_step), int(cfg.actor.guide_window),
                            float(cfg.actor.guide_threshold))
        if guide.ticks < 0 or guide.step < 0 or guide.window < 1:
            raise ConfigError("actor.guide_ticks and guide_step must be >= 0 and guide_window >= 1")
        for i in range(cfg.actors):
            if resolve_inference(inference, plan_task(i)) != "inline":
                raise ConfigError("actor.guide (JSRL) runs the guide on the control thread: simulators with "
                                  "actor.inference=inline (or auto) only")
        if str(guide_src) != "expert" and not Path(str(guide_src)).exists():
            raise ConfigError(f"actor.guide={guide_src}: use expert or a `robo-async bc` run directory")
    hw = (resume_meta or {}).get("high_water", {})
    eps = (resume_meta or {}).get("episode_counts", {})
    actors = tuple(
        ActorConfig(
            actor_id=i, data_address="", weights_address="",
            loop=LoopConfig(
                actor_id=i, episode_ticks=task.options.get("episode_ticks", 50), realtime=plan_task(i).realtime,
                seed=cfg.seed * 1000 + i, start_episode=int(eps.get(str(i), 0)), eval_every=cfg.actor.eval_every,
                heartbeat_s=cfg.actor.heartbeat_s, inference=resolve_inference(inference, plan_task(i), server),
                replan=replan, success_reward=float(cfg.actor.get("success_reward", 1.0)),
                inference_workers=int(cfg.actor.get("inference_workers", 1)), guide=guide,
                server_wait_s=float(cfg.actor.get("server_wait_s", 600.0))),
            flush_every=cfg.actor.flush_every, start_seq=int(hw.get(str(i), 0)),
            learner_silent_s=float(cfg.actor.get("learner_silent_s", 3.0)), keys_dir=keys_dir, guide=str(guide_src) if guide_src else None,
            inference_server=server, server_image_codec=str(cfg.actor.get("server_image_codec", "jpeg")),
            uplink=UplinkConfig(journal_dir=str(run_dir / "actors" / str(i) / "journal"),
                                journal=bool(cfg.actor.journal), max_ram_mb=float(cfg.actor.max_ram_mb),
                                resend_s=float(cfg.actor.resend_s), image_codec=str(cfg.buffer.image_codec),
                                queue_mb=float(t.get("queue_mb", 64)),
                                message_bytes=batch_bytes(task_spec(plan_task(i)), int(cfg.actor.flush_every)),
                                jpeg_quality=int(cfg.buffer.jpeg_quality)),
        )
        for i in range(cfg.actors)
    )
    if not actors:
        raise ConfigError("actors must be at least 1")
    launcher_opts = dict(_plain(cfg.launcher))  # type: ignore[arg-type]
    try:
        supervise = RestartPolicy(**(launcher_opts.pop("supervise", None) or {}))
        launcher = (RayLauncherConfig if launcher_opts.get("name") == "ray" else LauncherConfig)(
            supervise=supervise, **launcher_opts)
        resources = ResourcesConfig(**(_plain(cfg.get("resources")) or {}))  # type: ignore[arg-type]
    except (TypeError, ValueError) as e:
        raise ConfigError(str(e)) from None
    return TrainPlan(run_dir, learner, task, pol, actors, launcher, actor_tasks, resources,
                     (cfg.get("dashboard") or {}).get("port", 0))

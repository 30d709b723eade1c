"""Robots and teleops from the config: a task (or LeRobot device) as `TaskArgs`, and the robot,
safety layer and teleops an actor (or `robo-async teleop`, eval, bc) drives through."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from omegaconf import DictConfig, OmegaConf

from hal.robot import Robot
from hal.safety import SafeRobot
from hal.spec import RobotSpec
from hal.workspace import WorkspaceBox
from robo_async.launch.mirrors import ConfigError
from robo_async.launch.schema import check_task
from sim import TASKS, SimImperfections, SimRobot


@dataclass(frozen=True)
class TaskArgs:
    """What an actor drives: a sim task (its config, realtime, imperfections) or a LeRobot device,
    behind the configured safety layer, with the session's teleops."""

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

    @property
    def hz(self) -> float:
        """The control rate (ticks/s): the robot config's `hz`, else the task's."""
        return float((self.robot or {}).get("hz") or self.options.get("hz", 30.0))

    def episode_ticks(self) -> int:
        """Ticks per episode: a robot's `episode.seconds` at its rate, else `task.episode_ticks`
        (where the options leave it out: its default, the one in the task's config class)."""
        seconds = ((self.robot or {}).get("episode") or {}).get("seconds")
        if seconds is not None:
            return max(1, int(round(float(seconds) * self.hz)))
        if "episode_ticks" in self.options:
            return int(self.options["episode_ticks"])
        _, cfg_cls = TASKS[self.name]
        return int(next(f.default for f in fields(cfg_cls) if f.name == "episode_ticks"))

    def resource_id(self, index: int) -> str:
        if self.robot is not None:
            return f"robot:{self.robot['type']}/{self.robot.get('id') or self.robot.get('port') or index}"
        return f"sim:{self.name}/{index}"


def _dataclass_kwargs(cls: type, values: dict, where: str) -> dict:
    names = {f.name for f in fields(cls)}
    unknown = set(values) - names
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}; known: {sorted(names)}")
    return {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}


IMPERFECTIONS = (
    "obs_latency_ticks",
    "action_latency_ticks",
    "obs_noise_std",
    "action_noise_std",
    "disconnect_after_ticks",
)


def task_args(
    task: DictConfig | dict, robot: dict | None = None, safety: dict | None = None, teleop: dict | None = None
) -> TaskArgs:
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
    # a LeRobot device runs at its rate: the per-tick limits are velocities only at that rate
    realtime = realtime or robot is not None
    return TaskArgs(
        name,
        _dataclass_kwargs(cfg_cls, values, f"task {name}"),
        realtime,
        {k: v for k, v in imperfections.items() if v},
        robot,
        dict(safety or {}),
        dict(teleop) if teleop and teleop.get("type") else None,
    )


MOTION_LIMITS = ("max_step_rad", "max_velocity_rad_s", "max_accel_rad_s2")  # into the robot's spec
SAFETY_KEYS = (*MOTION_LIMITS, "watchdog_s", "torque_off_s", "workspace_low", "workspace_high")
OUR_ROBOT_KEYS = (
    "joint_low",
    "joint_high",
    "hz",
    "safety",
    "episode",
    "bus_timeout_ms",
)  # robot.* keys that are ours, not LeRobot's
# A real arm without a `safety` block of its own still gets every guard (SO-100/SO-101 sizes):
# 0.05 rad per tick, 1.5 rad/s, 12 rad/s^2, the watchdog holding after 0.25 s and turning the torque
# off after 2 s, and the end effector inside a box around the base (m)
REAL_ARM_SAFETY = {
    "max_step_rad": 0.05,
    "max_velocity_rad_s": 1.5,
    "max_accel_rad_s2": 12.0,
    "watchdog_s": 0.25,
    "torque_off_s": 2.0,
    "workspace_low": (-0.4, -0.4, 0.01),
    "workspace_high": (0.4, 0.4, 0.5),
}
SIMULATED_DEVICES = ("sim_so101",)


def robot_safety(args: TaskArgs) -> dict:
    """The safety settings for this actor's robot: the robot config's `safety` block (or, on a real
    arm without one, `REAL_ARM_SAFETY`), then every key the run's `safety` sets. A simulator gets
    the run's keys only."""
    merged: dict = {}
    if args.robot is not None:
        own = args.robot.get("safety")
        if own is None and args.robot.get("type") not in SIMULATED_DEVICES:
            own = REAL_ARM_SAFETY
        merged.update(own or {})
        unknown = set(merged) - set(SAFETY_KEYS)
        if unknown:
            raise ConfigError(f"robot.safety: unknown keys {sorted(unknown)}; known: {list(SAFETY_KEYS)}")
    merged.update({k: v for k, v in args.safety.items() if v is not None})
    return merged


def make_robot(args: TaskArgs) -> Robot:
    """The robot an actor drives: a LeRobot device through the adapter, or a simulator."""
    if args.robot is not None:
        from hardware.lerobot_adapter import LeRobotRobot, make_lerobot_device, set_bus_timeout

        opts = {k: v for k, v in args.robot.items() if k not in OUR_ROBOT_KEYS}
        limits = args.robot.get("joint_low"), args.robot.get("joint_high")
        hz = args.hz
        safety = robot_safety(args)
        motion = {k: safety[k] for k in MOTION_LIMITS if k in safety and safety[k] is not None}
        device = make_lerobot_device(opts)
        set_bus_timeout(device, args.robot.get("bus_timeout_ms"))
        return LeRobotRobot(
            device, *(tuple(x) if x else None for x in limits), hz=hz, limits=motion, kind=str(args.robot["type"])
        )
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
        from hardware.lerobot_adapter import set_bus_timeout
        from hardware.lerobot_teleop import LeRobotTeleop, make_lerobot_teleop_device

        opts = dict(args.teleop)
        buttons = opts.pop("events_from", None)  # a second device for the buttons: {type: keyboard_ee} ...
        timeout_ms = opts.pop("bus_timeout_ms", None)
        device = make_lerobot_teleop_device(opts)
        set_bus_timeout(device, timeout_ms)
        main = LeRobotTeleop(device, kind=str(opts["type"]))
        teleops = (end_effector_teleop(main, robot) if main.gives_ee else main,)
        if buttons:  # its events only (its takeover hands control to the leader arm)
            teleops += (LeRobotTeleop(make_lerobot_teleop_device(dict(buttons))),)
    from robo_async.actor.takeover import TeleopMismatch, check_teleops

    try:
        check_teleops(teleops, robot.spec.action_dim)
    except TeleopMismatch as e:
        raise ConfigError(str(e)) from None
    return teleops


def end_effector_teleop(device, robot: SafeRobot):
    """An end-effector device (gamepad, keyboard_ee) on `robot`: straight into an end-effector
    action space (gym_hil: the robot's `ee_action_space`), or through inverse kinematics on a
    joint-space arm with forward kinematics (`ee_position`). On a robot with neither it gives its
    events only (labels; a takeover is logged and ignored), said once in the log."""
    import logging

    from hal.ee_teleop import EndEffectorTeleop
    from hal.robot import RobotError, innermost

    inner = innermost(robot)
    space = getattr(inner, "ee_action_space", None)
    fk = None if space is not None else getattr(inner, "ee_position", None)
    try:
        return EndEffectorTeleop(device, robot.spec, fk=fk, ee_space=space)
    except RobotError as e:
        logging.getLogger(__name__).warning("%s; it gives events only", e)
        return device


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
    safety = robot_safety(args)
    workspace = None
    low, high = safety.get("workspace_low"), safety.get("workspace_high")
    if low is not None and high is not None:
        fk = getattr(robot, "ee_position", None)
        asked = args.safety.get("workspace_low") is not None or bool((args.robot or {}).get("safety"))
        if fk is None and asked:
            raise ConfigError(f"safety.workspace_* needs forward kinematics; {robot.spec.name} has none")
        if fk is None:  # only the built-in default asked for a box: a robot we have no kinematics for
            import logging

            logging.getLogger(__name__).warning(
                "robot %s: no forward kinematics here, so no workspace box (the joint limits, the per-tick, "
                "velocity and acceleration caps, the watchdog and the e-stop still apply)",
                robot.spec.name,
            )
        else:
            workspace = WorkspaceBox(fk, tuple(low), tuple(high))
    safe = SafeRobot(
        robot, workspace=workspace, watchdog_s=safety.get("watchdog_s"), torque_off_s=safety.get("torque_off_s")
    )
    if args.robot is not None:  # a real arm: home and the scene's reset between episodes
        from hal.episodes import EpisodeReset

        try:
            safe.episode_reset = EpisodeReset.from_config(args.robot.get("episode"))
        except (TypeError, ValueError) as e:
            raise ConfigError(f"robot.episode: {e}") from None
    return safe


def task_spec(args: TaskArgs) -> RobotSpec:
    return make_robot(args).spec


def obs_dims(spec: RobotSpec, keys: tuple[str, ...]) -> tuple[int, ...]:
    dims = {"state": spec.state_dim, **spec.feature_dims()}
    missing = [k for k in keys if k not in dims]
    if missing:
        raise ConfigError(f"policy.obs_keys {missing} are not observations of {spec.name}; it has {sorted(dims)}")
    return tuple(dims[k] for k in keys)


def import_target(args: TaskArgs):
    """What a LeRobotDataset imported for this task must fit, and what an export of its rows is
    written for (LeRobot's units converted to and from, or refused): the task's name, its robot's
    spec and the ranges the task declares (`dataset_rescales`). The robot is built, not connected."""
    from robo_async.buffer.lerobot_io import ImportTarget

    robot = make_robot(args)
    try:
        return ImportTarget.of(args.name if args.robot is None else f"{args.name} on {args.robot['type']}", robot)
    finally:
        robot.close()

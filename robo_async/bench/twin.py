"""`robo-async bench twin`: the safety layer and the control loop on the SO-101 twin, through
LeRobot's own `so101_follower` / `so101_leader` code and the twin's Feetech servo bus on
pseudo-terminals (`hardware/twin`, in its own process: its physics does not share the control
loop's GIL). The robot is what `robot=so101` builds (`make_safe_robot`: `REAL_ARM_SAFETY`, 0.05 rad
per tick, 1.5 rad/s, 12 rad/s^2, watchdog 0.25 s, torque off after 2 s, the workspace box), driven
by the one control loop at 30 Hz in real time. In order, on one connection:

1. cap and jitter: for `seconds` a policy commands jumps between two far poses (shoulder_pan,
   wrist_roll and gripper over their full range), switching every 2 s; the largest change between
   two consecutive goal writes that any servo saw (the twin's `max_goal_step`) over the cap plus
   one encoder tick (LeRobot sends goals in whole ticks), the safety layer's own `max_step_seen`
   over the cap, and the loop's tick lateness (p50, p99, max);
2. e-stop: while moving, an operator's button gives ESTOP (the loop's teleop poll, as the space
   bar does); ticks from that tick on in which the servos' goal still changed;
3. HIL: `episodes` episodes of `episode_s`: a virtual operator's hand moves the leader arm along a
   minimum-jerk reach (`reach_s`) to a random target pose and its button takes over, so the
   follower follows the leader through the loop's takeover path; success: the follower's end
   effector (forward kinematics of the twin's true joints) within `tolerance_m` of the target
   pose's at the episode's last tick;
4. watchdog: the loop stalls (its observer blocks); from the last action to the twin's first
   hold write (a goal repeated) and to all torque off.
"""

from __future__ import annotations

import math
import os
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from rich.console import Console
from rich.table import Table

from hal.safety import SafeRobot, SafetyStats
from hal.teleop import Teleop, TeleopEvent, TeleopEventKind
from hardware.twin.process import TwinProcess
from robo_async.bench import emit, register
from robo_async.commands.args import arg

if TYPE_CHECKING:
    from hal.spec import RobotSpec
    from policies.base import Policy
    from robo_async.actor.loop import ControlLoop, LoopResult, TickInfo

TICK_RAD = 2 * math.pi / 4096  # one encoder tick of the STS3215, rad
# the jump policy's two poses (rad): shoulder_pan, wrist_roll and gripper over their full range;
# shoulder_lift, elbow_flex and wrist_flex only as far as keeps every pose between the two (each
# joint ramps on its own) inside the workspace box (end effector at least 6 cm up), so the box
# never holds the arm still
JUMP_A = (-1.92, -0.6, 1.0, -1.2, -2.74, -0.17)
JUMP_B = (1.92, 0.6, -1.0, 1.2, 2.84, 1.75)
JUMP_EVERY_S = 2.0
# the virtual operator's target poses (rad): uniform in this box, inside the one above
TARGET_LOW = (-1.5, -0.6, -1.0, -1.2, -1.5, 0.0)
TARGET_HIGH = (1.5, 0.6, 1.0, 1.2, 1.5, 1.0)
ESTOP_AFTER_TICKS, ESTOP_WATCH_TICKS = 20, 15  # the e-stop comes while moving; ticks watched after it
STALL_AFTER_TICKS = 15  # the loop stalls while moving


class Buttons(Teleop):
    """An operator's buttons (events only): `press(kind)` queues an event for the loop's next poll."""

    def __init__(self) -> None:
        self._pending: list[TeleopEvent] = []

    @property
    def name(self) -> str:
        return "bench-buttons"

    def connect(self) -> None:
        pass

    def press(self, kind: TeleopEventKind) -> None:
        self._pending.append(TeleopEvent(kind))

    def get_action(self) -> np.ndarray | None:
        return None

    def events(self) -> list[TeleopEvent]:
        out, self._pending = self._pending, []
        return out

    def close(self) -> None:
        pass


class ReachingHand(Buttons):
    """The HIL figure's virtual operator: at each episode's first tick its hand starts moving the
    twin's leader arm from where it is to that episode's target (rad) along a minimum-jerk path of
    `reach_ticks`, and its button takes over (control goes to the leader arm); at the episode's
    last tick it hands back. Episodes are `episode_ticks` long (the loop truncates them there)."""

    def __init__(self, twin: TwinProcess, targets: list[np.ndarray], episode_ticks: int, reach_ticks: int) -> None:
        super().__init__()
        self.twin, self.targets = twin, targets
        self.episode_ticks, self.reach_ticks = episode_ticks, reach_ticks
        self._tick = 0
        self._start = np.zeros(6)

    @property
    def name(self) -> str:
        return "virtual-hand"

    def observe(self, obs: Mapping[str, np.ndarray], evaluation: bool) -> None:
        k, episode = self._tick % self.episode_ticks, self._tick // self.episode_ticks
        self._tick += 1
        target = self.targets[min(episode, len(self.targets) - 1)]
        if k == 0:
            self._start = np.asarray(self.twin.state("leader")["q"])
            self.press(TeleopEventKind.INTERVENTION_ON)
        elif k == self.episode_ticks - 1:
            self.press(TeleopEventKind.INTERVENTION_OFF)
        s = min(1.0, (k + 1) / self.reach_ticks)
        blend = s**3 * (10 - 15 * s + 6 * s * s)
        self.twin.control("hand", role="leader", q=self._start + (target - self._start) * blend)


def jump_policy(spec: RobotSpec, start: np.ndarray) -> Policy:
    """Joint targets jumping between `JUMP_A` and `JUMP_B` every `JUMP_EVERY_S`, first to the one
    farther from `start` (rad)."""
    from policies.scripted import ScriptedPolicy

    poses = [np.asarray(JUMP_A, np.float32), np.asarray(JUMP_B, np.float32)]
    if np.abs(poses[0] - start).max() > np.abs(poses[1] - start).max():
        poses.reverse()
    every = max(1, round(JUMP_EVERY_S / spec.dt))
    ticks = iter(range(1 << 62))
    return ScriptedPolicy(lambda: poses[1 - (next(ticks) // every) % 2], spec.dt, "jump")


def run_loop(
    robot: SafeRobot,
    policy: Policy,
    ticks: int,
    *,
    teleops: tuple[Teleop, ...] = (),
    observer: Callable[[TickInfo], None] | None = None,
    episode_ticks: int | None = None,
    stop: threading.Event | None = None,
) -> tuple[LoopResult, ControlLoop]:
    """The control loop at the robot's rate in real time for `ticks` (episodes of `episode_ticks`)."""
    from robo_async.actor.loop import ControlLoop, LoopConfig

    cfg = LoopConfig(episode_ticks=episode_ticks or ticks + 1, realtime=True, max_steps=ticks, eval_every=0)
    loop = ControlLoop(robot, policy, cfg, teleops=teleops, observer=observer)
    return loop.run(stop), loop


def measure_cap(twin: TwinProcess, robot: SafeRobot, seconds: float) -> dict[str, float]:
    """Figure 1 and 4: the jump policy for `seconds`; steps at the servos and in the layer; lateness."""
    twin.control("reset_stats")
    robot.stats = SafetyStats()
    start = robot.get_observation().state
    result, _ = run_loop(robot, jump_policy(robot.spec, start), max(1, round(seconds / robot.spec.dt)))
    st = twin.state()
    cap = min(robot.spec.max_step_rad, *(v * robot.spec.dt for v in robot.spec.velocity_limits()))
    servo_step = max(st["max_goal_step"])
    return {
        "max_step_seen_over_cap": round(servo_step / (cap + TICK_RAD), 6),
        "safety_max_step_over_cap": round(robot.stats.max_step_seen / cap, 6),
        "max_goal_step_rad": round(servo_step, 6),
        "cap_rad": round(cap, 6),
        "tick_rad": round(TICK_RAD, 6),
        "clipped_share": round(robot.stats.clipped / max(1, robot.stats.actions), 3),
        "jitter_p50_ms": round(result.lateness_p50_ms, 3),
        "jitter_p99_ms": round(result.lateness_p99_ms, 3),
        "jitter_max_ms": round(result.lateness_max_ms, 3),
        "missed_ticks": result.missed_ticks,
        "cap_ticks": result.ticks,
        "goal_writes": st["goal_writes"],
    }


def measure_estop(twin: TwinProcess, robot: SafeRobot) -> dict[str, object]:
    """Figure 2: ESTOP from a button while moving; per tick after it, the largest goal change at
    the servos (rad); the last tick (1: the e-stop's own) in which a goal still changed."""
    buttons, changes, q = Buttons(), [], []
    stop = threading.Event()

    def observe(info: TickInfo) -> None:
        if info.tick == ESTOP_AFTER_TICKS - 1:  # polled in the next tick
            buttons.press(TeleopEventKind.ESTOP)
            twin.control("reset_stats")
            q.append(twin.state()["q"])
        elif info.tick >= ESTOP_AFTER_TICKS:
            st = twin.state()
            changes.append(max(st["max_goal_step"]))
            twin.control("reset_stats")
            if len(changes) >= ESTOP_WATCH_TICKS:
                q.append(st["q"])
                stop.set()

    start = robot.get_observation().state
    run_loop(
        robot,
        jump_policy(robot.spec, start),
        ESTOP_AFTER_TICKS + ESTOP_WATCH_TICKS + 5,
        teleops=(buttons,),
        observer=observe,
        stop=stop,
    )
    moving = [i + 1 for i, c in enumerate(changes) if c > 0]
    travel = float(np.abs(np.subtract(q[-1], q[0])).max()) if len(q) == 2 else float("nan")
    robot.clear_estop()
    return {
        "estop_ticks": max(moving, default=0),
        "estop_travel_rad": round(travel, 4),
        "estop_goal_changes_ticks": [round(c / TICK_RAD, 2) for c in changes],
        "estop_stops": robot.stats.stops,
    }


def measure_hil(
    twin: TwinProcess,
    robot: SafeRobot,
    leader: Teleop,
    episodes: int,
    episode_s: float,
    reach_s: float,
    tolerance_m: float,
    seed: int,
) -> dict[str, object]:
    """Figure 5: the follower follows `leader` (the twin's leader arm, connected; moved by
    `ReachingHand`) through the takeover path."""
    from hardware.lerobot_adapter import ArmKinematics
    from policies.scripted import HoldPolicy

    if episodes <= 0:
        return {"hil_success": None, "hil_errors_m": []}
    rng = np.random.default_rng(seed)
    targets = [rng.uniform(TARGET_LOW, TARGET_HIGH) for _ in range(episodes)]
    dt = robot.spec.dt
    episode_ticks, reach_ticks = max(2, round(episode_s / dt)), max(1, round(reach_s / dt))
    hand = ReachingHand(twin, targets, episode_ticks, reach_ticks)
    fk, errors = ArmKinematics(), []

    def observe(info: TickInfo) -> None:
        if info.episode_tick == episode_ticks - 1:
            q = np.asarray(twin.state()["q"])
            errors.append(float(np.linalg.norm(fk(q) - fk(targets[info.episode]))))

    twin.control("hand", role="leader", q=twin.state()["q"])  # the leader starts where the follower is
    try:
        _, loop = run_loop(
            robot,
            HoldPolicy(robot.spec),
            episodes * episode_ticks,
            teleops=(hand, leader),
            observer=observe,
            episode_ticks=episode_ticks,
        )
    finally:
        twin.control("hand", role="leader", q=None)
    ops = loop.operators
    return {
        "hil_success": round(sum(e <= tolerance_m for e in errors) / max(1, len(errors)), 3),
        "hil_errors_m": [round(e, 4) for e in errors],
        "hil_takeovers": ops.takeovers if ops else 0,
        "hil_operator_ticks": ops.operator_ticks if ops else 0,
    }


def measure_watchdog(twin: TwinProcess, robot: SafeRobot, timeout_s: float = 5.0) -> dict[str, object]:
    """Figure 3: the loop stalls after a moving tick; ms from that tick's action to the twin's first
    hold write and to every servo's torque off (polled every ~2 ms)."""
    out: dict[str, object] = {"watchdog_ms": None, "torque_off_ms": None}
    stop = threading.Event()

    def stall(info: TickInfo) -> None:
        if info.tick != STALL_AFTER_TICKS:
            return
        t0 = info.chosen_at  # the action was sent right after this
        twin.control("reset_stats")
        while time.monotonic() - t0 < timeout_s:
            st = twin.state()
            now = time.monotonic()
            if out["watchdog_ms"] is None and st["goal_writes"] > 0:
                out["watchdog_ms"] = round((now - t0) * 1000, 1)
                out["watchdog_hold_step_ticks"] = round(max(st["max_goal_step"]) / TICK_RAD, 2)
            if not any(st["torque"]):
                out["torque_off_ms"] = round((now - t0) * 1000, 1)
                break
            time.sleep(0.002)
        stop.set()

    start, holds = robot.get_observation().state, robot.stats.watchdog_holds
    run_loop(robot, jump_policy(robot.spec, start), 100, observer=stall, stop=stop)
    out.update(watchdog_holds=robot.stats.watchdog_holds - holds, torque_offs=robot.stats.torque_offs)
    return out


@dataclass(frozen=True, kw_only=True)
class TwinKeys:
    """The keys of `robo-async bench twin`."""

    seconds: float = arg(10.0, help="seconds of jumps between two far poses (cap and jitter)")
    episodes: int = arg(5, help="HIL episodes (the virtual operator takes over with the leader arm)")
    episode_s: float = arg(4.0, help="seconds per HIL episode")
    reach_s: float = arg(1.5, help="seconds of the operator's minimum-jerk reach")
    tolerance_m: float = arg(0.03, help="a HIL episode succeeds within this distance of the target, m")
    seed: int = arg(0, help="seed of the HIL targets")
    dir: Path | None = arg(None, help="working directory, kept (none: a temporary one, removed unless errors)")


ROWS = (  # (JSON key, what it means)
    (
        "max_step_seen_over_cap",
        "largest goal change between two writes at any servo / (cap + 1 encoder tick): "
        "LeRobot sends goals in whole ticks (<= 1: the cap held)",
    ),
    ("safety_max_step_over_cap", "the safety layer's own max_step_seen / cap"),
    ("max_goal_step_rad", "that largest goal change at the servos, rad (cap 0.05 + tick 0.0015)"),
    ("jitter_p99_ms", "control loop tick lateness p99 at 30 Hz, through LeRobot's bus code, ms"),
    ("jitter_max_ms", "... its largest, ms (missed ticks: > half a period late)"),
    ("estop_ticks", "ticks from the e-stop's poll until the servos' goal stopped changing (1: that tick)"),
    ("estop_travel_rad", "largest joint travel in the 0.5 s after the e-stop (arm coasting to rest), rad"),
    ("watchdog_ms", "stalled loop: last action -> the twin's first hold write (watchdog 250 ms, looks every 62.5 ms)"),
    ("torque_off_ms", "stalled loop: last action -> every servo's torque off (torque_off_s 2 s)"),
    ("hil_success", "share of HIL episodes ending with the follower's end effector within tolerance of the target's"),
    ("hil_errors_m", "per episode: follower end effector to the target pose's, m"),
)


def run_phases(
    twin: TwinProcess, robot: SafeRobot, leader: Teleop, opts: TwinKeys
) -> tuple[dict[str, object], list[str]]:
    """The four measurements in order, into `figures`; what went wrong (a phase that raised ends
    the run: the arm's state is then unknown), threads' deaths included (the watchdog's)."""
    figures: dict[str, object] = {}
    phases: list[tuple[str, Callable[[], dict]]] = [
        ("cap", lambda: measure_cap(twin, robot, opts.seconds)),
        ("estop", lambda: measure_estop(twin, robot)),
        (
            "hil",
            lambda: measure_hil(
                twin,
                robot,
                leader,
                opts.episodes,
                opts.episode_s,
                opts.reach_s,
                opts.tolerance_m,
                opts.seed,
            ),
        ),
        ("watchdog", lambda: measure_watchdog(twin, robot)),  # last: it ends with the torque off
    ]
    errors: list[str] = []
    hook = threading.excepthook

    def record(a: threading.ExceptHookArgs) -> None:
        errors.append(f"thread {a.thread.name if a.thread else '?'} died: {a.exc_type.__name__}: {a.exc_value}")
        hook(a)

    threading.excepthook = record
    try:
        for name, phase in phases:
            try:
                figures.update(phase())
            except RuntimeError as e:  # a bus error (RobotError), the twin's control socket
                errors.append(f"{name}: {type(e).__name__}: {' '.join(str(e).split())}")
                break
    finally:
        threading.excepthook = hook
    return figures, errors


@register("twin", TwinKeys)
def bench_twin(args: TwinKeys) -> int:
    opts = args
    root = Path(args.dir or tempfile.mkdtemp(prefix="bench-twin-"))
    from robo_async.launch.tasks import make_safe_robot, make_teleops, task_args

    t_start, load = time.monotonic(), os.getloadavg()[0]
    twin = TwinProcess(root / "twin")
    figures: dict[str, object] = {}
    errors: list[str] = []
    try:
        twin.start()
        task = task_args({"name": "reach"}, twin.robot(), teleop=twin.leader())
        robot = make_safe_robot(task)
        # the leader first: once the follower is connected, 2 s without an action turn its torque off
        (leader,) = make_teleops(task, robot)
        leader.connect()
        try:
            robot.connect()
            try:
                figures, errors = run_phases(twin, robot, leader, opts)
            finally:
                robot.close()
        finally:
            leader.close()
    except RuntimeError as e:  # the twin did not start, a device did not connect (RobotError)
        errors.append(f"setup: {type(e).__name__}: {' '.join(str(e).split())}")
    finally:
        twin.close()
        if not args.dir and not errors:  # a scratch twin: nothing there to keep (kept on errors: twin.log)
            import shutil

            shutil.rmtree(root, ignore_errors=True)
    figures = {
        **dict.fromkeys(k for k, _ in ROWS),
        **figures,
        "errors": errors,
        "seconds": opts.seconds,
        "episodes": opts.episodes,
        "episode_s": opts.episode_s,
        "tolerance_m": opts.tolerance_m,
        "bench_s": round(time.monotonic() - t_start, 1),
        "load_avg_1m": [round(load, 2), round(os.getloadavg()[0], 2)],
        "cpus": os.cpu_count(),
    }
    table = Table(
        title=f"bench twin (SO-101 twin, LeRobot so101_follower/leader, 30 Hz; {opts.seconds:g} s of "
        f"jumps, HIL: {opts.episodes} x {opts.episode_s:g} s)"
    )
    for c in ("figure", "value", "what it means"):
        table.add_column(c, justify="right" if c == "value" else "left")
    for key, meaning in ROWS:
        table.add_row(key, str(figures.get(key)), meaning)
    Console(width=160).print(table)
    for err in errors:
        print(f"error: {err}")
    emit(figures)
    return 1 if errors else 0

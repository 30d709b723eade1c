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

The virtual operator is in `bench.twin_operator`, the four measurements in `bench.twin_measure`;
here, the keys, the phases in order on one connection, and the report.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from hal.safety import SafeRobot
from hal.teleop import Teleop
from hardware.twin.process import TwinProcess
from robo_async.bench import emit, register
from robo_async.bench.twin_measure import measure_cap, measure_estop, measure_hil, measure_watchdog
from robo_async.commands.args import arg


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

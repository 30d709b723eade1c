"""The four measurements of `robo-async bench twin`, each a run of the one control loop in real time
on the SO-101 twin through LeRobot's bus code: the safety layer's cap and the loop's jitter under a
policy jumping between two far poses (`measure_cap`), an e-stop from a button while moving
(`measure_estop`), HIL episodes through the takeover path (`measure_hil`), and the watchdog of a
stalled loop (`measure_watchdog`); with the jump policy and the loop they share."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from hal.safety import SafeRobot, SafetyStats
from hal.teleop import Teleop, TeleopEventKind
from hardware.twin.process import TwinProcess
from robo_async.bench.twin_operator import Buttons, ReachingHand

if TYPE_CHECKING:
    from hal.spec import RobotSpec
    from policies.base import Policy
    from robo_async.actor.loop import ControlLoop
    from robo_async.actor.loop_config import LoopResult, TickInfo

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
    from robo_async.actor.loop import ControlLoop
    from robo_async.actor.loop_config import LoopConfig

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

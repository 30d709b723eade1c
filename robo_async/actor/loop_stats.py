"""A `ControlLoop`'s heartbeat figures, gathered from its parts: the safety layer's counters over
its robots, tick lateness, JSRL guide ticks and training jerk (`robot_stats`), and the asynchronous
inference's latency, holds and dropped chunks (`inference_stats`). The loop merges these with the
operators', a remote policy's and its actor's own (`ControlLoop.actor_stats`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from robo_async.actor.curriculum import StartCurriculum
from robo_async.actor.guide import JsrlGuide
from robo_async.actor.inference import AsyncChunkRunner
from robo_async.actor.lane import Lane
from robo_async.actor.records import LatenessTracker
from robo_async.transport.stats import ActorStats, histogram


def robot_stats(
    lanes: Sequence[Lane],
    lateness: LatenessTracker,
    nonfinite: int,
    guide: JsrlGuide | None,
    train_jerk: Iterable[float],
    curriculum: StartCurriculum | None = None,
) -> ActorStats:
    """Safety counters summed over the lanes' robots, rows not kept for a NaN or infinity, tick
    lateness, the guide's ticks, the start range of training episodes and the mean jerk of recent training episodes."""
    sts = [ln.robot.stats for ln in lanes]
    jerk = list(train_jerk)
    return ActorStats(
        clipped=sum(st.clipped for st in sts),
        rejected=sum(st.rejected for st in sts),
        workspace=sum(st.workspace for st in sts),
        estopped=sum(st.estopped for st in sts),
        clipped_step=sum(st.clipped_step + st.clipped_velocity for st in sts),
        clipped_accel=sum(st.clipped_accel for st in sts),
        max_step_rad=round(max(min(st.max_step_seen, 1e6) for st in sts), 6),
        watchdog_holds=sum(st.watchdog_holds for st in sts),
        torque_offs=sum(st.torque_offs for st in sts),
        stops=sum(st.stops for st in sts),
        nonfinite=nonfinite,
        late_p99_ms=round(lateness.percentile_ms(99), 3),
        missed_ticks=lateness.missed,
        late_hist=histogram(np.asarray(lateness.samples) * 1000, "late_hist") if lateness.samples else None,
        guide_ticks=guide.ticks if guide is not None else None,
        start_range=curriculum.fraction if curriculum is not None else None,
        train_jerk=round(float(np.mean(jerk)), 1) if jerk else None,
    )


def inference_stats(runner: AsyncChunkRunner) -> ActorStats:
    """The asynchronous inference's figures: latency, held ticks, bad and hung inferences, stale
    chunks dropped, the latency in ticks."""
    e = runner.engine
    return ActorStats(
        infer_p50_ms=round(e.latency.percentile(50) * 1000, 2),
        infer_p95_ms=round(e.latency.percentile(95) * 1000, 2),
        infer_hist=histogram(np.asarray(e.latency.samples) * 1000, "infer_hist") if e.latency.samples else None,
        held_ticks=runner.holds,
        bad_chunks=e.bad_chunks,
        hung=e.hung_reports,
        stale_dropped=runner.schedule.stale_dropped,
        latency_ticks=runner.latency_ticks(),
    )

"""An actor's running figures, as its heartbeat carries them to the learner (and on to the
dashboard): one declared field per figure, so the actor that writes them, the wire check that
refuses a bad one (`kind_checks.actor_stats`) and the learner and dashboard that read them name the same
thing. Every field is optional: None means this actor has no such part (no teleop, no inference
thread, no policy server) and is left out on the wire.

    parts = [ActorStats(clipped=3, late_p99_ms=1.2), operators.stats(), ActorStats(unacked=64)]
    beat = Heartbeat(actor_id, env_steps, version, ActorStats.merge(*parts))

Counts are totals since the actor process started (ints, never negative); figures are finite
floats, never negative, in the unit their name ends with (`_ms`: milliseconds). Histograms
(`*_hist`) are counts per bin of `HIST_EDGES_MS[name]` (the last bin open-ended), over the actor's
recent window: a fixed length each, so the wire check holds them to it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, get_args, get_type_hints

import numpy as np

Figure = int | float | bool | tuple[int, ...]
# histogram fields: lower bin edges (ms); the last bin holds everything above its edge
HIST_EDGES_MS: dict[str, tuple[float, ...]] = {
    "late_hist": (0, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50),
    "infer_hist": (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000),
}


def histogram(samples_ms: np.ndarray | list[float], name: str) -> tuple[int, ...]:
    """Counts of `samples_ms` per bin of `HIST_EDGES_MS[name]`."""
    edges = np.asarray(HIST_EDGES_MS[name], np.float64)
    idx = np.searchsorted(edges, np.asarray(samples_ms, np.float64), side="right") - 1
    return tuple(int(c) for c in np.bincount(np.clip(idx, 0, len(edges) - 1), minlength=len(edges)))


@dataclass(frozen=True)
class ActorStats:
    """What an actor reports in each heartbeat (every `actor.heartbeat_s`)."""

    # the safety layer (hal.safety.SafeRobot.stats): actions it changed, counted
    clipped: int | None = None  # actions with a joint clipped (joint limits or max step per tick)
    rejected: int | None = None  # NaN/Inf or wrong-shape actions replaced by holding position
    workspace: int | None = None  # targets outside the workspace replaced by holding position
    estopped: int | None = None  # ticks held while the e-stop was latched
    clipped_step: int | None = None  # actions clipped by the per-tick change or the velocity limit
    clipped_accel: int | None = None  # actions clipped by the acceleration limit (a ramp)
    max_step_rad: float | None = None  # the largest per-tick change of a joint target sent, rad
    watchdog_holds: int | None = None  # holds the watchdog commanded (the loop sent nothing in time)
    torque_offs: int | None = None  # times the torque was turned off (watchdog, request)
    stops: int | None = None  # e-stops that stopped the arm within the tick
    nonfinite: int | None = None  # rows not kept for a NaN or infinity (the episode ended there)
    # the control loop's timing
    late_p99_ms: float | None = None  # p99 of how late ticks started against their schedule, ms (recent ticks)
    late_hist: tuple[int, ...] | None = None  # tick lateness of recent ticks per bin of HIST_EDGES_MS (ms)
    missed_ticks: int | None = None  # ticks that started more than half a period late
    guide_ticks: int | None = None  # JSRL: ticks the guide still acts for at the start of training episodes
    start_range: float | None = None  # the fraction of the task's start range training episodes draw from now
    train_jerk: float | None = None  # mean |d3 action / dt3| of recent training episodes, rad/s^3
    # asynchronous chunk inference (actor/inference.py)
    infer_p50_ms: float | None = None  # median inference time (request to chunk), ms
    infer_p95_ms: float | None = None  # p95 inference time, ms
    infer_hist: tuple[int, ...] | None = None  # recent inference times per bin of HIST_EDGES_MS (ms)
    held_ticks: int | None = None  # ticks the robot held because no chunk covered them
    bad_chunks: int | None = None  # chunks refused (wrong shape, NaN, the policy raised)
    hung: int | None = None  # inferences reported running past actor.inference_timeout_s
    stale_dropped: int | None = None  # chunk actions already in the past when their chunk landed
    latency_ticks: int | None = None  # inference delay the runner plans with, ticks (p95 of recent chunks)
    # a policy on a policy server (actor/remote.py)
    server_rtt_p95_ms: float | None = None  # p95 request -> reply round trip, ms
    rerequests: int | None = None  # requests sent again (no reply in time)
    stale_replies: int | None = None  # replies to an older request, dropped
    bad_replies: int | None = None  # malformed replies, dropped
    server_refused: int | None = None  # refusals (another robot spec, policy or architecture)
    server_infer_ms: float | None = None  # the server's compute time for the last reply's batch, ms
    # operators (actor/takeover.py)
    operator: bool | None = None  # an operator drives now
    operator_ticks: int | None = None  # ticks an operator drove
    takeovers: int | None = None  # times an operator took control
    teleops_lost: int | None = None  # teleops dropped from the session (unplugged, failed)
    label_success: int | None = None  # episodes an operator labelled success
    label_failure: int | None = None  # ... failure
    label_rerecord: int | None = None  # ... to be recorded again
    # the link to the learner (actor/actor.py, actor/uplink.py)
    unacked: int | None = None  # transitions sent but not yet committed by the learner (RAM and journal)
    resends: int | None = None  # times unacked batches were sent again (learner restart, acks stalled)
    gate_waits: int | None = None  # ticks that waited for the learner's allowance (as-fast sim mode)
    learner_outages: int | None = None  # times the learner fell silent for actor.learner_silent_s
    ticks_learner_away: int | None = None  # real-time ticks run while the learner was silent
    weights_refused: int | None = None  # weight pushes refused (checksum, shape) or not applicable

    def __post_init__(self) -> None:  # numpy scalars become plain values (msgpack); ints may fill float fields
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, np.generic):
                v = v.item()
            if FIELD_TYPES[f.name] is float and type(v) is int:
                v = float(v)
            if FIELD_TYPES[f.name] is tuple and isinstance(v, list):
                v = tuple(v)
            object.__setattr__(self, f.name, v)

    def figures(self) -> dict[str, Figure]:
        """The fields this actor filled (not None), by name: what the heartbeat carries."""
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not None}

    @staticmethod
    def merge(*parts: ActorStats) -> ActorStats:
        """One report from the parts' filled fields; a later part's value wins."""
        values: dict[str, Any] = {}  # (checked by the constructor: declared names only)
        for p in parts:
            values.update(p.figures())
        return ActorStats(**values)


# each field's type without None: what the wire check holds a value to
FIELD_TYPES: dict[str, type] = {
    name: (lambda t: getattr(t, "__origin__", t))(next(a for a in get_args(hint) if a is not type(None)))
    for name, hint in get_type_hints(ActorStats).items()
}

"""The actors' figures as the learner reports them (`Learner.progress`: `metrics.jsonl`, the
progress line, the dashboard), summed or maxed over the latest heartbeat of each actor. A group
appears only when some actor has that part (chunk inference, a policy server, operators)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from robo_async.transport.stats import ActorStats


def actor_figures(stats: Sequence[ActorStats]) -> dict[str, float]:
    """`actors/*` (and `weights/refused_by_actors`) over the actors' latest heartbeats."""
    out: dict[str, float] = {
        "weights/refused_by_actors": sum(s.weights_refused or 0 for s in stats),
        "actors/unacked": sum(s.unacked or 0 for s in stats),
        "actors/resends": sum(s.resends or 0 for s in stats),
        "actors/clipped": sum(s.clipped or 0 for s in stats),
        "actors/estopped": sum(s.estopped or 0 for s in stats),  # held ticks
        # rows not kept for a NaN or infinity (robot or policy), each ending its episode
        "actors/nonfinite": sum(s.nonfinite or 0 for s in stats),
        # the safety layer on every robot: what it clipped, held, stopped (docs/guides/real-robot.md)
        "safety/clipped_step": sum(s.clipped_step or 0 for s in stats),
        "safety/clipped_accel": sum(s.clipped_accel or 0 for s in stats),
        "safety/max_step_rad": max((s.max_step_rad or 0.0 for s in stats), default=0.0),
        "safety/watchdog_holds": sum(s.watchdog_holds or 0 for s in stats),
        "safety/torque_offs": sum(s.torque_offs or 0 for s in stats),
        "safety/stops": sum(s.stops or 0 for s in stats),
        "actors/missed_ticks": sum(s.missed_ticks or 0 for s in stats),
        # real-time actors kept executing while the learner was away (restarts, network)
        "actors/ticks_learner_away": sum(s.ticks_learner_away or 0 for s in stats),
        "actors/learner_outages": max((s.learner_outages or 0 for s in stats), default=0),
    }
    jerk = [s.train_jerk for s in stats if s.train_jerk is not None]
    if jerk:  # commanded-action jerk of training episodes (rad/s^3): what exploration asks of a motor
        out["actors/train_jerk"] = float(np.mean(jerk))
    guided = [s.guide_ticks for s in stats if s.guide_ticks is not None]
    if guided:  # JSRL: ticks the guide still acts for at the start of training episodes
        out["actors/guide_ticks"] = max(guided)
    ranges = [s.start_range for s in stats if s.start_range is not None]
    if ranges:  # the start-range curriculum: the fraction of the task's start range training episodes draw from
        out["actors/start_range"] = min(ranges)
    infer = [s for s in stats if s.infer_p95_ms is not None]
    if infer:  # actors running asynchronous chunk inference
        out["actors/infer_p50_ms"] = max(s.infer_p50_ms or 0.0 for s in infer)
        out["actors/infer_p95_ms"] = max(s.infer_p95_ms or 0.0 for s in infer)
        out["actors/held_ticks"] = sum(s.held_ticks or 0 for s in infer)
        out["actors/bad_chunks"] = sum(s.bad_chunks or 0 for s in infer)
        out["actors/latency_ticks"] = max(s.latency_ticks or 0 for s in infer)
    remote = [s for s in stats if s.server_rtt_p95_ms is not None]
    if remote:  # actors whose policy runs on a policy server (actor.inference_server)
        out["actors/server_rtt_p95_ms"] = max(s.server_rtt_p95_ms or 0.0 for s in remote)
        out["actors/server_rerequests"] = sum(s.rerequests or 0 for s in remote)
        out["actors/server_stale_replies"] = sum(s.stale_replies or 0 for s in remote)
        out["actors/server_bad_replies"] = sum(s.bad_replies or 0 for s in remote)
    return out


def operator_figures(stats: Sequence[ActorStats]) -> dict[str, float]:
    """`hil/*` from the actors with operators: who is in control now, takeovers, teleops lost."""
    teleops = [s for s in stats if s.operator is not None]
    return {
        "hil/in_control": sum(int(bool(s.operator)) for s in teleops),
        "hil/takeovers": sum(s.takeovers or 0 for s in teleops),
        "hil/teleops_lost": sum(s.teleops_lost or 0 for s in teleops),
    }

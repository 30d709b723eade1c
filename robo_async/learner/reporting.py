"""What a learner reports: its metrics now (`progress`: `metrics.jsonl`, the progress line, the
dashboard) and each actor's row (`actor_rows`: the dashboard's actor table), read from the
learner's state; the actors' own figures are summed in figures.py. `Learner` inherits this: the
learner keeps the state, this class only reads it."""

from __future__ import annotations

import time

import numpy as np

from robo_async.learner.figures import actor_figures, operator_figures


def utd(updates_per_s: float, env_steps_per_s: float) -> float:
    """Updates per env step from the two rates over one window (0 while no env step came)."""
    return updates_per_s / env_steps_per_s if env_steps_per_s > 0 else 0.0


class LearnerReporting:
    """The reporting half of `Learner` (see the module's docstring); reads the attributes the
    learner sets (counters, deques of recent episodes, the store, the sockets, heartbeats)."""

    def progress(self) -> dict[str, float]:
        """The learner's metrics now (`metrics.jsonl`, the progress line, the dashboard): counters,
        rates, versions, the store, transport, the actors' figures from their latest heartbeats,
        and the latest update's losses."""
        stats = [h.stats for h in self.heartbeats.values()]
        rates = self.rates.rates(time.monotonic(), {"env_steps": self.env_steps, "updates": self.updates})
        out = {
            "time/elapsed_s": time.monotonic() - self._t0,
            "time/env_steps": self.env_steps,
            "time/updates": self.updates,
            "time/episodes": self.episodes,
            "supervisor/learner_restarts": self.config.restarted,
            **rates,
            # the update-to-data ratio reached: what a real-time robot's learner managed, under its cap (algo.utd_ratio)
            "time/utd_10s": utd(rates["time/updates_per_s_10s"], rates["time/env_steps_per_s_10s"]),
            "time/utd_60s": utd(rates["time/updates_per_s_60s"], rates["time/env_steps_per_s_60s"]),
            "time/utd_cap": self.limiter.updates_per_insert if self.config.algo_config.limit_to_data else 0.0,
            "charts/policy_version": self.version,
            "charts/version_lag": float(np.mean(self.lags)) if self.lags else 0.0,
            "charts/version_lag_p95": float(np.percentile(self.lags, 95)) if self.lags else 0.0,
            "charts/version_lag_max": float(max(self.lags)) if self.lags else 0.0,
            "buffer/dropped_stale": self.sampler.dropped_stale,
            "buffer/rejected_outcome": self.sampler.rejected_outcome,
            "buffer/her_relabelled": self.sampler.relabelled,  # rows given a goal their episode achieved (algo.her)
            "buffer/embedded_rows": self.embedded_rows,  # embedded here (the actor did not, or another encoder did)
            "buffer/dropped_embeddings": self.sampler.dropped_embeddings,  # sampled rows of another encoder, left out
            "charts/actor_policy_version": self.newest_actor_version,
            "charts/replay_size": len(self.store),
            "buffer/online": self.store.counts["online"],
            "buffer/demos": self.store.counts["demos"],
            "buffer/interventions": self.store.counts["interventions"],
            "buffer/commit_interval_ms": self._commit_interval_ms(),
            "buffer/write_errors": self.store.write_errors,
            "buffer/first_online": self.store.first["online"],  # rows below were evicted by retention
            "buffer/held": len(self.store),
            "buffer/archived": self.store.archived,
            "buffer/disk_free_gb": min(self.store.disk_free_gb, 1e6),
            "buffer/frames_as_sent": self.store.frames_as_sent,  # encoded by actors, stored as they came
            "buffer/frames_encoded": self.store.frames_encoded,  # encoded by the store (raw pixels arrived)
            "buffer/rejected_batches": self.rejected_batches,
            "buffer/rows_refused": getattr(self.store, "rows_refused", 0),  # passed over, never stored
            "transport/malformed": self._receiver.dropped if self._receiver is not None else 0,
            "transport/refused": self.refused_messages,
            "weights/push_ms": (self._publisher.last_push_s * 1000) if self._publisher is not None else 0.0,
            "weights/push_mb": (self._publisher.push_bytes / 2**20) if self._publisher is not None else 0.0,
            "weights/fp16_too_wide": self._publisher.fp16_too_wide if self._publisher is not None else 0,
            "transport/id_mismatch": self._receiver.id_mismatch if self._receiver is not None else 0,
            "transport/auth_denied": self._auth.denied if self._auth is not None else 0,
            **actor_figures(stats),
        }
        if any(s.operator is not None for s in stats) or self.operator_ticks:  # human in the loop
            out.update(operator_figures(stats))
            out["hil/operator_ticks"] = self.operator_ticks
            out["hil/intervention_rate"] = float(np.mean(self.operated)) if self.operated else 0.0
            if self.correction_s:  # a correction's commit -> the first version trained after it acting
                out["hil/correction_to_policy_s"] = float(np.median(self.correction_s))
            out.update({f"hil/label_{k}": v for k, v in self.labels.items()})
        if self.train_successes:
            out["charts/train_success_rate"] = float(np.mean(self.train_successes))
        if self.successes:
            out["charts/success_rate"] = float(np.mean(self.successes))
            out["charts/episodic_return"] = float(np.mean(self.returns))
        out.update(self._last_update_metrics)  # the latest update's losses (the dashboard's curves too)
        return out

    def actor_rows(self) -> dict[int, dict[str, float]]:
        """Per actor, its latest heartbeat figures (ticks, lateness, inference, control, unacked),
        episodes, seconds since it was last heard from and its latest camera frames (JPEG data
        URLs): the dashboard's actor table."""
        now = time.monotonic()
        return {
            a: {
                **h.stats.figures(),
                "env_steps": h.env_steps,
                "policy_version": h.policy_version,
                "episodes": self.episode_counts.get(a, 0),
                "heard_s": now - self._heard.get(a, now),
                "frames": self.frames.urls(a),
            }
            for a, h in self.heartbeats.items()
        }

    def _commit_interval_ms(self) -> float:
        t = self.store.commit_times[-100:]
        return float(np.mean(np.diff(t)) * 1000) if len(t) > 1 else 0.0

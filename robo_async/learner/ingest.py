"""What a learner does with each message it takes from the actors (`LearnerIngest`, inherited by
`Learner`): transition batches checked against the run's spec, (re-)embedded for a frozen encoder,
inserted in the store (or refused and passed over, named); refused batches and declared gaps passed
over in their stream's order; episode summaries and heartbeats recorded; and, once the store has
committed them, transitions counted as env steps for the rate limiter."""

from __future__ import annotations

import logging
import time

import numpy as np

from robo_async.buffer.codec import CorruptRecord
from robo_async.buffer.embeddings import embed_batch
from robo_async.buffer.store import ReplayError
from robo_async.transport.channels import RefusedBatch
from robo_async.transport.wire import EpisodeStats, Heartbeat, StreamGap, TransitionBatch

log = logging.getLogger("robo_async.learner.learner")  # the learner's log, as before the split


class LearnerIngest:
    """The ingest half of `Learner` (see the module's docstring); it updates the state the learner
    set up (store, counters, the per-actor tables, the recent episodes)."""

    def _check_batch(self, msg: TransitionBatch) -> str | None:
        """What is wrong with a batch against this run's spec, or None."""
        p = self.config.policy
        want = {"action": (len(p.action_low),)}
        for k, d in zip(p.obs_keys, p.obs_dims, strict=False):
            want[f"obs/{k}"] = want[f"next_obs/{k}"] = (d,)
        for k, shape in want.items():
            a = msg.arrays.get(k)
            if a is None:
                return f"'{k}' is missing"
            if a.shape[1:] != shape or a.dtype != np.float32:
                return f"'{k}' is {a.dtype}{a.shape[1:]}, this run expects float32{shape}"
        return None

    def _count_committed(self) -> None:
        """Env steps and the limiter count transitions once they are durable; new corrections
        (interventions) start a correction -> policy clock."""
        iv = self.store.counts["interventions"]
        if iv > self._corrections_seen:
            self._corrections_seen = iv
            # the first version whose updates drew batches after this commit (prefetched ones predate it)
            left = self.config.options.publish_every - self.updates % self.config.options.publish_every
            target = self.version + 1 + (left <= self.config.prefetch)
            if not self._pending_corrections or self._pending_corrections[-1][1] != target:
                self._pending_corrections.append((time.monotonic(), target))
        n = self.store.counts["online"] - self._online_seen
        if n > 0:
            self._online_seen += n
            self.env_steps += n
            self.limiter.inserted += n
            self.high_water = self.store.high_water()

    def _ingest(self, msg: object) -> None:
        actor = getattr(msg, "actor_id", None)
        if (
            actor is not None
            and actor not in self._heard
            and actor not in self.high_water
            and len(self._heard) >= self.config.max_actors
        ):
            self.refused_messages += 1  # per-peer state stays bounded: a flood of new ids is dropped
            if self.refused_messages <= 10 or self.refused_messages % 1000 == 0:
                log.error(
                    "refused a message from actor %d: already %d actors (learner.max_actors)", actor, len(self._heard)
                )
            return
        if isinstance(msg, TransitionBatch):
            problem = self._check_batch(msg)
            try:
                if problem:
                    raise ReplayError(problem)
                if self.encoder is not None:  # rows the actor did not embed with this encoder: embedded here
                    try:
                        msg, made = embed_batch(msg, self.encoder)
                    except (ValueError, CorruptRecord) as e:
                        raise ReplayError(str(e)) from None
                    self.embedded_rows += made
                n = self.store.insert(msg, "online")
                self.frames.note(msg, self.store.schema)
            except ReplayError as e:
                self.rejected_batches += 1
                if self.rejected_batches <= 10 or self.rejected_batches % 1000 == 0:
                    log.error("rejected transitions from actor %d (seq %d): %s", msg.actor_id, msg.seq, e)
                # resent, it would be refused again, and the stream would wait for it forever: passed
                # over (counted, named), the actor's journal lets it go once the ack moves past it
                self.store.refuse(msg.actor_id, msg.seq, msg.count, str(e))
                return
            if n:
                operated = msg.arrays["intervention"][-n:] > 0
                self.operated.extend(operated.tolist())
                self.operator_ticks += int(operated.sum())
                versions = msg.arrays["policy_version"][-n:]
                self.lags.extend((self.version - versions).tolist())
                self.newest_actor_version = max(self.newest_actor_version, int(versions.max()))
                while self._pending_corrections and self._pending_corrections[0][1] <= self.newest_actor_version:
                    self.correction_s.append(time.monotonic() - self._pending_corrections.popleft()[0])
        elif isinstance(msg, RefusedBatch):  # refused for what it holds: its range is passed over
            self.rejected_batches += 1
            self.store.refuse(msg.actor_id, msg.seq, msg.count, msg.reason)
        elif isinstance(msg, StreamGap):  # the actor no longer has these rows: pass over them, in order
            self.store.refuse(msg.actor_id, msg.seq, msg.count, f"the actor lost them: {msg.reason}")
        elif isinstance(msg, EpisodeStats):
            self.episodes += 1
            self.episode_counts[msg.actor_id] = msg.episode + 1
            if msg.label:
                self.labels[msg.label] = self.labels.get(msg.label, 0) + 1
            if msg.evaluation:  # success is judged on deterministic episodes
                self.successes.append(msg.success)
                self.returns.append(msg.episode_return)
            else:
                self.train_successes.append(msg.success)
        elif isinstance(msg, Heartbeat):
            self.heartbeats[msg.actor_id] = msg
        if actor is not None:
            self._heard[actor] = time.monotonic()

"""The learner: ingests transitions, runs its `Algorithm` (SAC, BC, ...; see algorithms/base.py)
under the rate limiter, publishes weights, logs metrics, writes checkpoints, decides when to stop.
One instance per run (its own process, a Ray actor, or beside an actor in `launcher=serial`).

    learner = Learner(config)           # a LearnerConfig (config.py); no I/O
    learner.open()                      # bind sockets, restore a checkpoint if resuming
    while not learner.done():
        learner.step()                  # drain messages, maybe update, publish, log, checkpoint
    learner.save(); learner.close()
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import deque
from pathlib import Path

import numpy as np
import torch

from robo_async.buffer.embeddings import EmbeddingMismatch, check_store_versions
from robo_async.buffer.lmdb_store import PersistentReplayStore
from robo_async.buffer.sampler import Sampler
from robo_async.buffer.store import ReplayError, SampleToInsertRatio
from robo_async.learner import checkpoint
from robo_async.learner.config import LearnerConfig
from robo_async.learner.frames import LatestFrames
from robo_async.learner.ingest import LearnerIngest
from robo_async.learner.metrics import MetricsLogger, RateWindows
from robo_async.learner.options import StaleEmbeddings
from robo_async.learner.replicas import ReplicaGroup, build_learner_algorithm, join_primary, update_autocast
from robo_async.learner.reporting import LearnerReporting
from robo_async.transport.channels import TransitionReceiver
from robo_async.transport.publisher import WeightPublisher
from robo_async.transport.snapshots import snapshot_bytes
from robo_async.transport.wire import (
    MAX_ACTOR_ID,
    Heartbeat,
    LearnerStatus,
    Weights,
    WireError,
)

log = logging.getLogger(__name__)

UPDATE_BURST_S = 0.25  # a learner step starts no update after this long (status, acks and ingest go between)


class Learner(LearnerIngest, LearnerReporting):
    """One run's learner. It owns ingest (the transition socket; batches checked against the
    policy spec), the replay store and its sampler, the rate limiter (updates per env step,
    `limit_to_data`), weight publishing (every `publish_every` updates), checkpoints (every
    `checkpoint_every_s`), metrics (`metrics.jsonl`, TensorBoard) and the stop rules (success
    over the window, time or env-step budget); its `Algorithm` only does the math. As
    `launch.wiring.learner_loop` drives it:

        learner.open()                      # store, sockets, resume; publishes the current weights
        while not learner.done() and not stop():
            learner.step()                  # never blocks long: ingest, up to 8 updates, status, log
        learner.save(); learner.close()     # final checkpoint; `stop_reason` says why it ended"""

    def __init__(self, config: LearnerConfig) -> None:
        self.config = config
        self.run_dir = Path(config.run_dir)
        self.algorithm = build_learner_algorithm(config)  # seeded, on its device
        ac = config.algo_config
        mix = (
            dict.fromkeys(self.algorithm.tables, 1.0 / len(self.algorithm.tables))
            if self.algorithm.tables
            else config.mix
        )
        self.store = PersistentReplayStore(self.run_dir / "replay", config.store)
        # a frozen camera encoder: every stored row carries its embeddings, batches bring no frames
        self.encoder = self.algorithm.frozen_encoder()
        enc = self.encoder
        self.sampler = Sampler(
            self.store,
            ac.batch_size * config.options.replicas,
            mix,
            config.seed,
            config.prefetch,
            window=self.algorithm.window,
            max_lag=ac.max_version_lag,
            successful_only=self.algorithm.successful_only,
            lookback=self.algorithm.lookback,
            exclude=frozenset(f"{p}{c}" for p in ("obs/", "next_obs/") for c in enc.cameras)
            if enc is not None
            else frozenset(),
            embedding_version=enc.version if enc is not None else None,
            her=ac.relabelling(),
        )
        self.embedded_rows = 0  # rows this learner (re-)embedded: from actors that did not, or with another encoder
        self.boot_id = uuid.uuid4().hex[:12]
        self._online_seen = 0  # committed online transitions already counted as env steps
        self.rejected_batches = 0
        self.refused_messages = 0  # well-formed messages this learner does not take (unknown actors past the cap)
        self.heartbeats: dict[int, Heartbeat] = {}  # each actor's latest
        self.limiter = SampleToInsertRatio(ac.utd_ratio, ac.warmup_steps, ac.limiter_slack)
        self.version = 0
        self.updates = 0
        self.env_steps = 0
        self.episodes = 0
        self.high_water: dict[int, int] = {}  # next seq per actor, restored on resume
        self.episode_counts: dict[int, int] = {}
        # the start-range curriculum's fraction per actor, as a resumed checkpoint had it (until its heartbeats say)
        self.start_ranges: dict[int, float] = {}
        self.successes: deque[bool] = deque(maxlen=config.success_window)
        self.returns: deque[float] = deque(maxlen=config.success_window)
        self.train_successes: deque[bool] = deque(maxlen=config.success_window)
        self.lags: deque[int] = deque(maxlen=256)
        self.operated: deque[bool] = deque(maxlen=2000)  # who drove the latest ingested ticks (True: an operator)
        self.operator_ticks = 0
        self.labels: dict[str, int] = {}  # operators' episode labels (success, failure, rerecord)
        # correction -> policy: (when corrections were committed, the first version trained after it)
        self._corrections_seen = 0
        self._pending_corrections: deque[tuple[float, int]] = deque(maxlen=100)
        self.correction_s: deque[float] = deque(maxlen=100)  # commit -> that version acting on a robot
        self.newest_actor_version = -1  # newest policy version seen in incoming transitions
        self.stop_reason: str | None = None
        self._last_update_metrics: dict[str, float] = {}
        self.frames = LatestFrames()  # each actor's latest camera frame (the dashboard)
        self.rates = RateWindows((10.0, 60.0))  # env steps/s and updates/s over sliding windows
        self._heard: dict[int, float] = {}  # actor id -> monotonic time of its last heartbeat
        self._receiver: TransitionReceiver | None = None
        self._publisher: WeightPublisher | None = None
        self._metrics: MetricsLogger | None = None
        self._auth = None  # transport.curve.LearnerAuth when CURVE is on
        self._elapsed_before = 0.0  # run time before a supervised restart (from the checkpoint)
        self._group: ReplicaGroup | None = None  # learner.replicas > 1: the other ranks (replicas.py)

    # --- lifecycle -----------------------------------------------------------------------
    def open(self) -> None:
        torch.set_num_threads(self.config.options.threads)
        (self.run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
        self.store.open()
        problem = check_store_versions(
            self.store.embedding_versions(),
            self.encoder,
            f"replay store {self.store.path}",
            skip=self.config.options.stale_embeddings == StaleEmbeddings.skip,
        )
        if problem:
            self.store.close()
            raise EmbeddingMismatch(problem)
        if self.store.repaired:
            log.warning("replay store recovered with repairs: %s", "; ".join(self.store.repaired))
        self._online_seen = 0 if self.config.count_stored else self.store.counts["online"]
        if self.config.resume:
            self.restore(checkpoint.resolve(self.run_dir))
        self.high_water = self.store.high_water()
        self._group = join_primary(self.config, self.algorithm)  # learner.replicas > 1: from this state
        self.sampler.start()
        if self.config.keys_dir is not None:
            from robo_async.transport.curve import LearnerAuth

            self._auth = LearnerAuth(self.config.keys_dir).start()
        c = self.config
        self._receiver = TransitionReceiver(
            c.data_address,
            max_message_mb=c.max_message_mb,
            auth=self._auth,
            queue_mb=c.queue_mb,
            message_bytes=c.message_bytes,
        )
        weights = self.algorithm.policy_weights()
        kept = self.algorithm.frozen_weights() | self._owned()
        self._publisher = WeightPublisher(
            c.weights_address,
            auth=self._auth,
            queue_mb=c.queue_mb,
            weights_bytes=sum(a.nbytes for a in weights.values()),
            push=c.options.weights,
            snapshot_bytes=snapshot_bytes(weights, kept, c.options.weights.precision),
        )
        self._metrics = MetricsLogger(self.run_dir, self.config.tensorboard, wandb=self.config.options.wandb)
        now = time.monotonic()
        self._t0 = now - self._elapsed_before
        self._next = {
            "status": 0.0,
            "log": now + self.config.options.log_every_s,
            "ckpt": now + self.config.options.checkpoint_every_s,
        }
        self.publish()

    @property
    def addresses(self) -> tuple[str, str]:
        assert self._receiver is not None and self._publisher is not None
        return self._receiver.address, self._publisher.address

    def close(self) -> None:
        if self._group is not None:  # the replicas end first: they wait on this rank
            self._group.finish()
        if self._metrics is not None:
            self._log()  # the final counters, so metrics.jsonl ends where the run ended
        if self._publisher is not None:
            self._publisher.publish_status(self.status(stopping=True))
        for part in (self._receiver, self._publisher, self._metrics, self.sampler, self.store):
            if part is not None:
                part.close()
        if self._auth is not None:
            self._auth.stop()

    # --- the loop ------------------------------------------------------------------------
    def step(self) -> None:
        """One iteration: ingest, then update while the rate limiter allows (bounded)."""
        assert self._receiver is not None and self._publisher is not None
        self.store.check()  # a dead writer/committer thread is a learner failure, not silence
        if self.store.accepting():  # else leave data in the socket: backpressure to the actors
            for msg in self._receiver.poll(timeout_ms=0 if self._may_update() else 1):
                try:
                    self._ingest(msg)
                except (ReplayError, WireError, ValueError, KeyError, TypeError, IndexError) as e:
                    self.refused_messages += 1  # a message this learner cannot use: dropped, counted
                    log.error("dropped a %s message: %s: %s", type(msg).__name__, type(e).__name__, e)
        else:  # not listening (disk full, writer behind): their silence is ours, not a hang of theirs
            self._heard = dict.fromkeys(self._heard, time.monotonic())
        self._count_committed()
        # up to 8 updates, but none started after UPDATE_BURST_S: slow updates (pixels end to end, ~0.3 s)
        # must not hold back the acks and ingest (8 of them once stalled acks past the actors' resend_s)
        until = time.monotonic() + UPDATE_BURST_S
        for _ in range(8):
            if not (self._may_update() and self._update()) or time.monotonic() >= until:
                break
        if self._group is not None:
            self._group.keepalive()  # replicas waiting for a shard hear this rank is alive
        now = time.monotonic()
        if now >= self._next["status"]:
            self._next["status"] = now + self.config.status_every_s
            if self._auth is not None and not self._auth.alive():  # watched: no silent loss of authentication
                raise RuntimeError("the CURVE authenticator (ZAP) thread died")
            self._publisher.publish_status(self.status())
            self._publisher.check()  # a dead publisher thread is a learner failure, not silence
        if now >= self._next["log"]:
            self._next["log"] = now + self.config.options.log_every_s
            self._log()
        if now >= self._next["ckpt"]:
            self._next["ckpt"] = now + self.config.options.checkpoint_every_s
            self.save()
        self._check_stop(now)

    def _may_update(self) -> bool:
        return self.limiter.can_update() if self.config.algo_config.limit_to_data else True

    def _update(self) -> bool:
        """One algorithm update on a prefetched batch; False if no batch is ready yet."""
        if self.config.algo_config.max_version_lag is not None:
            self.sampler.version_floor = self.version - self.config.algo_config.max_version_lag
        b = self.sampler.get()
        if b is not None and self._group is not None:  # the combined batch: a shard to each rank, this one's here
            b = self._group.send(b)
        if b is None:
            return False
        with update_autocast(self.config.precision, self.algorithm):  # learner.precision=bf16
            self._last_update_metrics = self.algorithm.update(b)
        self.updates += 1
        self.limiter.updates += 1
        if self.updates % self.config.options.publish_every == 0:
            self.version += 1
            self.publish()
        return True

    def publish(self) -> None:
        assert self._publisher is not None
        self._publisher.publish(
            Weights(self.version, self.algorithm.policy_weights(), self.algorithm.architecture),
            frozen=self.algorithm.frozen_weights(),
            owned=self._owned(),
        )

    def _owned(self) -> frozenset[str]:
        """The policy's arrays copied off a GPU by policy_weights(): snapshots already."""
        policy = getattr(self.algorithm, "policy", None)
        return policy.off_cpu() if hasattr(policy, "off_cpu") else frozenset()

    def status(self, stopping: bool = False) -> LearnerStatus:
        allowed = self.limiter.allowed_inserts() if self.config.algo_config.limit_to_data else 1 << 62
        now = time.monotonic()
        actors = sum(now - t < 10.0 for t in self._heard.values())
        return LearnerStatus(
            self.updates,
            self.version,
            self.limiter.inserted,
            allowed,
            stopping,
            self.boot_id,
            tuple(sorted((a, q) for a, q in self.store.high_water().items() if a <= MAX_ACTOR_ID)),
            max(actors, 1),  # (imported data is numbered from 2**40: no actor waits for its acks)
            paused=not self.store.accepting(),
        )

    @property
    def success_rate(self) -> float | None:
        return float(np.mean(self.successes)) if self.successes else None

    def _check_stop(self, now: float) -> None:
        c = self.config
        if (
            c.stop_at_success is not None
            and len(self.successes) >= c.success_window
            and (self.success_rate or 0.0) >= c.stop_at_success
        ):
            self.stop_reason = f"solved: success {self.success_rate:.0%} over the last {c.success_window} episodes"
        elif c.budget_s is not None and now - self._t0 >= c.budget_s:
            self.stop_reason = f"time budget of {c.budget_s:.0f} s reached"
        elif c.budget_env_steps is not None and self.env_steps >= c.budget_env_steps:
            self.stop_reason = f"env-step budget of {c.budget_env_steps} reached"

    def done(self) -> bool:
        return self.stop_reason is not None

    # --- reporting (the figures themselves: reporting.py) ----------------------------------
    def _log(self) -> None:
        assert self._metrics is not None
        values = self.progress()
        self._metrics.write(self.env_steps, values)
        self.last_progress = values

    # --- checkpoints ---------------------------------------------------------------------
    def counters(self) -> dict[str, object]:
        return {
            "updates": self.updates,
            "version": self.version,
            "env_steps": self.env_steps,
            "episodes": self.episodes,
            "high_water": {str(k): v for k, v in self.high_water.items()},
            "episode_counts": {str(k): v for k, v in self.episode_counts.items()},
            # where each actor's start-range curriculum stands: a resumed run goes on from there
            "start_ranges": {
                str(k): v
                for k, v in {
                    **self.start_ranges,
                    **{a: h.stats.start_range for a, h in self.heartbeats.items() if h.stats.start_range is not None},
                }.items()
            },
            "limiter": self.limiter.state_dict(),
            "store_counts": dict(self.store.counts),
            "elapsed_s": time.monotonic() - self._t0,
        }

    def save(self) -> Path:
        meta = {
            **self.counters(),
            "task": self.config.task,
            "spec": self.config.spec_signature,
            "architecture": self.algorithm.architecture,
            "algo": self.config.algo,
            "obs_keys": list(self.config.policy.obs_keys),
            "config": self.config.config_yaml,
        }
        return checkpoint.save(self.run_dir / "checkpoints", self.algorithm, meta)

    def restore(self, path: Path) -> None:
        tensors, metadata = checkpoint.read(path)
        meta = checkpoint.meta_of(metadata)
        if meta.get("architecture") != self.algorithm.architecture or meta.get("algo", "sac") != self.config.algo:
            raise checkpoint.CheckpointError(
                f"{path} holds {meta.get('algo', 'sac')} for {meta.get('architecture')}, this run builds "
                f"{self.config.algo} for {self.algorithm.architecture}"
            )
        checkpoint.restore(self.algorithm, tensors, metadata)
        self.updates, self.version = int(meta["updates"]), int(meta["version"])
        self.env_steps, self.episodes = int(meta["env_steps"]), int(meta["episodes"])
        self.episode_counts = {int(k): int(v) for k, v in meta.get("episode_counts", {}).items()}
        self.start_ranges = {int(k): float(v) for k, v in meta.get("start_ranges", {}).items()}
        # The store kept everything committed, including what arrived after this checkpoint:
        # count that too, so the limiter and env steps pick up where the data ends.
        self.limiter.load_state_dict(meta["limiter"])
        since = self.store.counts["online"] - int(meta.get("store_counts", {}).get("online", 0))
        self.limiter.inserted += max(since, 0)
        self.env_steps += max(since, 0)
        if self.config.restarted:  # the same run, restarted by its supervisor: its clock goes on
            self._elapsed_before = float(meta.get("elapsed_s", 0.0))
        log.info(
            "resumed from %s: %d updates, %d env steps, policy v%d", path, self.updates, self.env_steps, self.version
        )

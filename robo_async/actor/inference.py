"""Asynchronous action-chunk inference beside the control loop, with latency-aware state forwarding.

The control loop calls `AsyncChunkRunner.tick(t, obs)` once per control tick; it never waits on
the policy. An `InferenceEngine` thread runs `policy.predict_chunk`; when the actions still
committed fall to the measured inference latency (p95, in ticks) plus a margin, the runner asks
for the next chunk about the state the robot will be in when that chunk starts: the current state
rolled forward through the committed actions (`forward_state`). Arriving chunks are merged into
the schedule by `ChunkSchedule.merge`:

- `drop_stale`: actions for ticks already past are dropped, the rest replace what was scheduled;
- `blend`: overlapping ticks average the old and new action (temporal ensembling);
- `rtc`: the committed prefix was held fixed while sampling (real-time chunking), so the new chunk
  continues it exactly; it replaces the schedule from its first new tick.

`sync_bounded` (a one-step policy's default where ticks keep wall-clock time) asks about each
tick's own observation and waits for the answer on the inference thread for at most `SYNC_BOUND`
of a control period; an answer later than that starts when it lands (the robot held meanwhile).

Bad chunks (NaN, wrong shape) are dropped and counted; an inference running past `timeout_s` is
reported and the loop keeps holding the last action until it returns.

Which mode a run uses (and `auto`'s rule) is `actor/inference_modes.py`; the latency windows the
runner plans by, `actor/latency.py`.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from hal.spec import RobotSpec
from policies.base import ActionChunk, Policy, call_policy
from robo_async.actor.inference_modes import REPLAN, SYNC, SYNC_BOUND
from robo_async.actor.latency import LatencyTracker, TickLatency
from robo_async.actor.schedule import ChunkSchedule

log = logging.getLogger(__name__)


def forward_state(state: np.ndarray, committed: np.ndarray, spec: RobotSpec) -> np.ndarray:
    """The joint state expected after the committed actions run (DESIGN's timing model): the
    robot's own forward model, `RobotSpec.forward_state` (position control: the last committed
    target; velocity control: the integral; else `state`)."""
    return spec.forward_state(state, committed)


@dataclass(frozen=True)
class ChunkResult:
    """A finished inference, as `InferenceEngine.poll()` hands it to `AsyncChunkRunner`, which
    merges `chunk` into its schedule from `start_tick` on, unless `tag` is an earlier episode's or
    a chunk from a newer observation (`obs_tick`) already landed. `latency_s`: seconds the policy
    call took (also fed to the engine's latency tracker)."""

    chunk: ActionChunk
    start_tick: int  # the tick the chunk's first action is for
    latency_s: float
    tag: int = 0  # the submitter's epoch (results from an earlier episode are discarded)
    obs_tick: int = 0  # the tick whose observation the chunk was computed from


class _Slot:
    """One inference worker: its job (None when idle), when it started, and its wake-up."""

    def __init__(self) -> None:
        self.job: tuple | None = None
        self.started = 0.0
        self.reported = -1.0
        self.wake = threading.Event()


class InferenceEngine:
    """Inference on daemon threads beside the control loop; the caller polls for results.

    `workers=1` (default): one inference at a time. `workers=N`: up to N in flight (pipelined,
    the runner staggers them), so a change in the world waits for at most 1/N of an inference
    before one starts that sees it; this costs N times the inference compute.

    One spare worker serves a new episode: requests carry their episode (`tag`), and up to
    `workers` of each tag run at once, so a new episode's first request starts at once instead of
    waiting out an inference about the episode that just ended (its result is discarded). Without
    it every episode after the first would begin with up to two latencies of holding."""

    def __init__(self, policy: Policy, action_dim: int, horizon: int, timeout_s: float = 2.0, workers: int = 1) -> None:
        if workers < 1:
            raise ValueError(f"inference workers must be at least 1, not {workers}")
        self.policy = policy
        self.action_dim, self.horizon = action_dim, horizon
        self.timeout_s = timeout_s
        self.latency = LatencyTracker()
        self.bad_chunks = 0
        self.hung_reports = 0
        self.rejected_weights = 0  # weight sets refused (another architecture); the old ones kept
        self.workers = workers
        self._lock = threading.Lock()
        self._results: deque[ChunkResult] = deque()
        self._stop = threading.Event()
        self._model = threading.Condition()  # weights are swapped only while no inference runs
        self._running = 0
        self._loading = False  # a worker is loading weights (no inference may start)
        # The control thread only ever touches `_pending_weights` under this tiny lock (a pointer
        # swap), never `_model`: a load in progress cannot make the loop wait.
        self._pending_lock = threading.Lock()
        self._pending_weights: tuple[int, Mapping[str, np.ndarray]] | None = None
        self._slots = [_Slot() for _ in range(workers + 1)]  # + the spare (see the class doc)
        self._threads = [
            threading.Thread(target=self._run, args=(slot,), name=f"inference-{i}", daemon=True)
            for i, slot in enumerate(self._slots)
        ]
        for t in self._threads:
            t.start()

    @property
    def busy(self) -> bool:
        """True when `workers` inferences are running (whatever their episodes)."""
        return self.in_flight >= self.workers

    def can_take(self, tag: int = 0) -> bool:
        """Whether `submit(..., tag)` would start now: fewer than `workers` inferences of this tag
        are running and a worker is idle (the spare covers an earlier tag's last inference)."""
        running = [s.job for s in self._slots if s.job is not None]
        return sum(j[4] == tag for j in running) < self.workers and len(running) < len(self._slots)

    @property
    def in_flight(self) -> int:
        return sum(s.job is not None for s in self._slots)

    def submit(
        self,
        obs: Mapping[str, np.ndarray],
        forwarded_state: np.ndarray | None,
        prefix: np.ndarray | None,
        start_tick: int,
        tag: int = 0,
        obs_tick: int = 0,
    ) -> bool:
        """Start an inference; False if every worker is still busy. The policy is told the chunk
        starts `start_tick - obs_tick` ticks after its observation (`delay_ticks`)."""
        with self._lock:
            if not self.can_take(tag):
                return False
            slot = next(s for s in self._slots if s.job is None)
            slot.job = (dict(obs), forwarded_state, prefix, start_tick, tag, obs_tick)
            slot.started = time.monotonic()
        slot.wake.set()
        return True

    def warmup(self, obs: Mapping[str, np.ndarray], calls: int = 2) -> None:
        """Run the policy `calls` times before the control loop starts (never on it): torch's first
        call is slow, and the last call seeds the latency tracker so the first request of the run
        already asks about the right tick. A failing policy is reported here, not raised."""
        for i in range(calls):
            t0 = time.monotonic()
            try:
                self.policy.predict_chunk(obs, forwarded_state=np.asarray(obs["state"], np.float32), prefix=None)
            except Exception as e:  # noqa: BLE001 - the loop's own checks report it again per chunk
                log.error("inference warm-up failed: %s", e)
                return
            if i == calls - 1:
                self.latency.add(time.monotonic() - t0)

    def swap_weights(self, version: int, arrays: Mapping[str, np.ndarray]) -> None:
        """New weights, loaded by an inference thread between inferences (never mid-chunk)."""
        with self._pending_lock:  # never waits on a load or an inference in progress
            self._pending_weights = (version, arrays)
        self._slots[0].wake.set()

    def hung(self) -> bool:
        """True (and reported once per inference) when a running inference is past the timeout."""
        now, hung = time.monotonic(), False
        for s in self._slots:
            if s.job is not None and now - s.started > self.timeout_s:
                hung = True
                if s.reported != s.started:
                    s.reported = s.started
                    self.hung_reports += 1
                    log.error(
                        "inference running for %.1f s (timeout %.1f s): holding position",
                        now - s.started,
                        self.timeout_s,
                    )
        return hung

    def poll(self) -> ChunkResult | None:
        """The oldest finished result not yet taken, or None."""
        with self._lock:
            return self._results.popleft() if self._results else None

    def _swap_if_pending(self) -> None:
        if self._pending_weights is None:
            return
        with self._model:
            if self._loading:
                return  # another worker is loading; it takes what is pending after
            while self._running and not self._stop.is_set():  # let running inferences finish
                self._model.wait(0.05)
            with self._pending_lock:
                pending, self._pending_weights = self._pending_weights, None
            if pending is None:
                return
            self._loading = True
        try:  # outside `_model`: nothing the control thread calls waits on this
            self.policy.load_weights(*pending)
        except ValueError as e:
            self.rejected_weights += 1
            log.error("inference: rejected weights v%d, keeping v%d: %s", pending[0], self.policy.version, e)
        finally:
            with self._model:
                self._loading = False
                self._model.notify_all()

    def _run(self, slot: _Slot) -> None:
        while not self._stop.is_set():
            slot.wake.wait(0.05)
            slot.wake.clear()
            self._swap_if_pending()
            job = slot.job
            if job is None:
                continue
            obs, fstate, prefix, start, tag, obs_tick = job
            with self._model:
                while (
                    self._loading or (self._pending_weights is not None and self._running)
                ) and not self._stop.is_set():
                    self._model.wait(0.05)  # a swap is waiting or loading: no inference starts first
                self._running += 1
            t0 = time.monotonic()
            try:
                delay = len(prefix) if prefix is not None and len(prefix) else max(start - obs_tick, 0)
                chunk = call_policy(self.policy, obs, fstate, prefix, delay)
                a = np.asarray(chunk.actions, np.float32)
                if a.ndim != 2 or a.shape[1] != self.action_dim or len(a) == 0 or not np.all(np.isfinite(a)):
                    raise ValueError(
                        f"policy returned actions of shape {a.shape}"
                        + ("" if a.size == 0 or np.all(np.isfinite(a)) else " with NaN/Inf")
                    )
                result: ChunkResult | None = ChunkResult(chunk, start, time.monotonic() - t0, tag, obs_tick)
                self.latency.add(time.monotonic() - t0)
            except Exception as e:  # noqa: BLE001 - a broken policy never takes the control loop down
                self.bad_chunks += 1
                log.error("inference: dropped a chunk: %s", e)
                result = None
            finally:
                with self._model:
                    self._running -= 1
                    self._model.notify_all()
            with self._lock:
                if result is not None:
                    self._results.append(result)
                slot.job = None
            self._swap_if_pending()

    def close(self) -> None:
        self._stop.set()
        for s in self._slots:
            s.wake.set()
        for t in self._threads:
            t.join(timeout=1)


class AsyncChunkRunner:
    """Per-tick glue between the control loop, the schedule and the inference engine."""

    def __init__(
        self,
        engine: InferenceEngine,
        spec: RobotSpec,
        mode: str = "rtc",
        forward: bool = True,
        margin_ticks: int | None = None,
        replan: str = "due",
    ) -> None:
        if replan not in REPLAN:
            raise ValueError(f"replan must be one of {REPLAN}, not '{replan}'")
        self.engine, self.spec = engine, spec
        self.schedule = ChunkSchedule("drop_stale" if mode in SYNC else mode)
        # sync runs each chunk to its end before asking again (LeRobot's synchronous loop); async
        # modes ask when what is left falls to the latency plus this margin
        margin = (0 if mode in SYNC else 1) if margin_ticks is None else margin_ticks
        self.mode, self.forward, self.margin = mode, forward, margin
        # due: ask when the committed actions fall to latency + margin; continuous: whenever the
        # engine is idle (async modes), so a change in the world is seen one inference sooner
        self.continuous = replan == "continuous"
        # end: ask at the same moment, but about the tick where the current chunk ends, so every
        # action of every chunk executes (what chunked critics learn from: Q of a chunk that ran)
        self.to_end = replan == "end" and mode in ("drop_stale", "blend") and forward
        self.superseded = 0  # results dropped because a newer observation's chunk had landed
        self._merged_obs_tick = -1
        self._last_submit = -(10**9)
        self.holds = 0
        self.late = 0  # sync_bounded: ticks whose inference missed the bound (the robot held, or ran the last plan)
        self._last: np.ndarray | None = None
        self.versions: deque[int] = deque(maxlen=1000)  # policy versions of the latest merged chunks
        self.chunks_merged = 0
        self.epoch = 0
        # measured in ticks (request -> merge); the engine's clock estimate (warm-up) until then
        self.tick_latency = TickLatency()

    def reset(self) -> None:
        """A new episode: forget the plan; a chunk still being computed is discarded on arrival."""
        self.schedule.clear()
        self._last = None
        self.epoch += 1
        self._merged_obs_tick = -1
        self._last_submit = -(10**9)

    def drop_plan(self, hold: np.ndarray | None = None) -> None:
        """An operator took over or handed control back: forget the schedule and the chunks in
        flight (like `reset`); until the next chunk lands the robot holds `hold` (the operator's
        last target), not a jump back to where the old plan was."""
        self.reset()
        self._last = None if hold is None else np.asarray(hold, np.float32).copy()

    @property
    def version(self) -> int:
        """Policy version of the action returned by the last `tick`."""
        return self.schedule.popped_version

    def _take(self, now: int) -> None:
        while (r := self.engine.poll()) is not None:
            if r.tag != self.epoch:
                continue  # from an earlier episode
            if r.obs_tick < self._merged_obs_tick:  # overtaken by a chunk from a newer observation
                self.superseded += 1
                continue
            self._merged_obs_tick = r.obs_tick
            self.tick_latency.add(now - r.obs_tick)  # asked at its observation's tick
            # sync_bounded: a chunk that missed its tick's bound starts when it lands (as async_naive would)
            start = max(r.start_tick, now) if self.mode == "sync_bounded" else r.start_tick
            self.schedule.merge(r.chunk.actions, start, now, r.chunk.policy_version, r.obs_tick)
            self.versions.append(r.chunk.policy_version)
            self.chunks_merged += 1

    def tick(self, now: int, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """The action for tick `now`. Never waits on the policy, except in `sync` mode (the baseline)
        and, for at most `SYNC_BOUND` of a control period, in `sync_bounded`."""
        self._take(now)
        d = 0 if self.mode in SYNC else self.latency_ticks()
        left = self.schedule.remaining(now)
        due = left <= d + self.margin or (self.continuous and self.mode not in SYNC)
        # with several workers, requests are spread over the latency so one always starts soon
        spaced = self.engine.in_flight == 0 or now - self._last_submit >= max(1, -(-d // self.engine.workers))
        if due and spaced and self.engine.can_take(self.epoch):
            self._last_submit = now
            ahead = left if self.to_end and left > d else d  # the new chunk starts `ahead` ticks from now
            committed = self.schedule.upcoming(now, ahead)
            if len(committed) < d:  # the schedule runs out before the chunk lands: the robot holds
                hold = committed[-1] if len(committed) else self._hold(obs)
                committed = np.concatenate(
                    [
                        committed.reshape(-1, len(hold)),
                        np.repeat(np.asarray(hold, np.float32)[None], d - len(committed), 0),
                    ]
                )
            fstate = forward_state(obs["state"], committed, self.spec) if self.forward else None
            # rtc: the chunk starts now and continues the committed prefix of d actions, so it brings
            # H - d new ones per d ticks of waiting; below d new ones (latency over half the chunk, RTC's
            # own bound d <= H - d) the robot would hold between chunks: ask as async_forward does
            if self.mode == "rtc" and 2 * d <= getattr(self.engine.policy, "horizon", 2 * d):
                self.engine.submit(obs, fstate, committed, now, self.epoch, now)
            else:  # about tick now + d, when it lands (naive: about now; its first d actions go stale)
                self.engine.submit(
                    obs, fstate, None, now + max(d, len(committed)) if self.forward else now, self.epoch, now
                )
            if self.mode in SYNC:  # sync, the baseline: the robot waits for the policy; sync_bounded: up to the bound
                end = math.inf if self.mode == "sync" else time.monotonic() + SYNC_BOUND * self.spec.dt
                while self.engine.in_flight and time.monotonic() < end:
                    time.sleep(0.0002)
                self.late += bool(self.engine.in_flight)
                self._take(now)
        self.engine.hung()
        a = self.schedule.pop(now)
        if a is None:  # nothing scheduled: hold
            self.holds += 1
            a = self._hold(obs)
        self._last = a
        return a

    def latency_ticks(self) -> int:
        """Ticks from asking for a chunk to being able to use it (p95): measured by the loop once
        a few chunks have landed, the engine's clock estimate (its warm-up) before."""
        measured = self.tick_latency.ticks()
        return measured if measured is not None else self.engine.latency.ticks(self.spec.dt)

    def _hold(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        return self._last if self._last is not None else self.spec.hold_action(obs["state"])

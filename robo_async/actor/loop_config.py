"""What a `ControlLoop` is given and what it gives back: `LoopConfig` (how one loop runs, made from
the `actor:` options for training actors or filled directly by eval, bc and the benchmarks),
`TickInfo` (what an observer sees after each tick) and `LoopResult` (what `ControlLoop.run` returns).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from robo_async.actor.curriculum import StartRangeConfig
from robo_async.actor.guide import GuideConfig
from robo_async.actor.options import ActorOptions, InferenceMode, Replan
from robo_async.transport.options import as_choices
from robo_async.transport.wire import EpisodeStats


@dataclass(frozen=True)
class LoopConfig:
    """How one `ControlLoop` runs: episode length, pacing, seeds, the inference mode and replanning,
    heartbeats. Training actors get it from `from_options` (the `actor:` section, `ActorOptions`);
    eval, bc and benchmarks fill it directly. A field named as an `actor.*` key takes its default
    from `ActorOptions` (the one definition); `inference`, `replan`, `guide_schedule` and
    `start_schedule` are derived: the mode and rule `auto` resolved to, JSRL's and the start range's
    curricula."""

    actor_id: int = 0  # stamped on episode summaries and heartbeats
    episode_ticks: int = 50  # truncate episodes after this many ticks (training: the task's `episode_ticks`)
    realtime: bool = False  # pace ticks at the robot's hz (real robots always); else as fast as possible
    seed: int = 0  # episode k resets with seed * 100_003 + k
    start_episode: int = 0
    eval_every: int = ActorOptions.eval_every  # every n-th episode runs the deterministic policy (1: all, 0: never)
    max_steps: int | None = None  # stop after this many ticks
    max_episodes: int | None = None  # stop after this many finished episodes
    heartbeat_s: float = ActorOptions.heartbeat_s
    # resolved (never auto): inline is the policy on this thread (sim only); `actor.inference` asks for one
    inference: InferenceMode = InferenceMode.inline
    inference_timeout_s: float = 2.0  # an inference running longer is reported; the robot holds
    inference_workers: int = ActorOptions.inference_workers  # inferences in flight at once (pipelined when > 1)
    # resolved (never auto): due: next chunk when the committed actions fall to latency + 1; end: the same
    # moment, about the tick the current chunk ends (every action executes: chunked critics); continuous:
    # whenever the engine is idle
    replan: Replan = Replan.due
    explore_until_weights: bool = True  # uniform random actions while the policy has no weights (v < 0)
    end_on_terminated: bool = True  # False: run on to episode_ticks after the task ends (expert demos)
    warmup_inference: bool = True  # run the policy twice before the first tick (torch's slow first call)
    # JSRL: a guide acts first in training episodes (inline, sim only), on this curriculum
    guide_schedule: GuideConfig | None = None
    # a scene that starts at random: training episodes start from a range widening with success (actor/curriculum.py)
    start_schedule: StartRangeConfig | None = None
    success_reward: float = ActorOptions.success_reward  # an operator's success label: the reward is at least this
    teleop_drives: bool = False  # a teleop session: the operator drives from the first tick (robo-async teleop)
    server_wait_s: float = ActorOptions.server_wait_s  # a policy on a server: wait this long for it to answer first

    def __post_init__(self) -> None:
        as_choices(self, "loop")

    @classmethod
    def from_options(
        cls,
        options: ActorOptions,
        *,
        inference: InferenceMode,
        replan: Replan,
        actor_id: int = 0,
        episode_ticks: int = 50,
        realtime: bool = False,
        seed: int = 0,
        start_episode: int = 0,
        resumed_start_range: float | None = None,
    ) -> LoopConfig:
        """A training actor's loop: `options`' keys as they are, the inference mode and replanning
        rule as resolved (the launch layer decides `auto`: it knows the task and the algorithm), the
        JSRL curriculum where `actor.guide` is set, the start-range one where `actor.start_range` is.
        A resumed run's start range goes on from `resumed_start_range` (where its curriculum stood).
        A ValueError names a key that cannot run."""
        start = StartRangeConfig.from_options(options)
        if start is not None and resumed_start_range is not None:
            start = dataclasses.replace(start, start=min(1.0, max(start.start, float(resumed_start_range))))
        return cls(
            actor_id=actor_id,
            episode_ticks=episode_ticks,
            realtime=realtime,
            seed=seed,
            start_episode=start_episode,
            eval_every=options.eval_every,
            heartbeat_s=options.heartbeat_s,
            inference=inference,
            inference_workers=options.inference_workers,
            replan=replan,
            guide_schedule=GuideConfig.from_options(options) if options.guide else None,
            start_schedule=start,
            success_reward=options.success_reward,
            server_wait_s=options.server_wait_s,
        )


@dataclass(frozen=True)
class TickInfo:
    """What an observer sees after each tick (benchmarks, video)."""

    tick: int  # since the loop started
    episode_tick: int  # since the episode started (0-based)
    episode: int
    action: np.ndarray  # what the loop chose (before safety)
    applied: np.ndarray  # what the robot got
    chosen_at: float  # monotonic time the action was chosen
    lateness_s: float  # how late this tick started against its schedule (0 when not real time)
    obs_tick: int  # the tick whose observation the action was computed from (-1: hold / inline)
    new_chunks: int  # chunks merged into the schedule so far (async modes)
    lane: int = 0  # which of the loop's robots (a vectorized actor's simulators)


@dataclass
class LoopResult:
    """What `ControlLoop.run()` returns: ticks run, per-episode stats, tick lateness (ms) and why it stopped."""

    ticks: int = 0
    episodes: list[EpisodeStats] = field(default_factory=list)
    lateness_p50_ms: float = 0.0
    lateness_p99_ms: float = 0.0
    lateness_max_ms: float = 0.0
    missed_ticks: int = 0  # ticks that started more than half a period late
    stop_reason: str = ""
    seconds: float = 0.0  # wall-clock time from the first tick to the end (excludes connect/warm-up)

"""Jump-start RL (JSRL, Uchendu et al. 2023): a guide policy (a scripted expert or a BC policy)
acts for the first `ticks` of each training episode and the learning policy takes over from there;
each time the success of the last `window` training episodes reaches `threshold`, the guide hands
over `step` ticks earlier, down to 0. Evaluation episodes are never guided.

`JsrlGuide` wraps the guide policy for the control loop (actor/loop.py), which asks it per tick:

    guide = JsrlGuide(expert_policy, GuideConfig(ticks=60))
    if guide.acts(episode_tick, evaluation):
        action = guide.action(obs)       # its chunks executed whole
    guide.episode_ended(success)         # training episodes: the curriculum
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from policies.base import ActionChunk, Policy
from robo_async.actor.curriculum import SuccessGate
from robo_async.actor.options import ActorOptions


@dataclass(frozen=True)
class GuideConfig:
    """JSRL's curriculum (see the module's docstring): `actor.guide_*` (`ActorOptions`), whose
    defaults these are."""

    ticks: int = ActorOptions.guide_ticks
    step: int = ActorOptions.guide_step
    window: int = ActorOptions.guide_window
    threshold: float = ActorOptions.guide_threshold

    @classmethod
    def from_options(cls, options: ActorOptions) -> GuideConfig:
        """The curriculum of `actor.guide_*`; a ValueError naming the keys when it cannot run."""
        if options.guide_ticks < 0 or options.guide_step < 0 or options.guide_window < 1:
            raise ValueError("actor.guide_ticks and guide_step must be >= 0 and guide_window >= 1")
        return cls(options.guide_ticks, options.guide_step, options.guide_window, options.guide_threshold)


class JsrlGuide:
    """The guide policy and its hand-over schedule (see the module's docstring)."""

    def __init__(self, policy: Policy, config: GuideConfig) -> None:
        self.policy, self.config = policy, config
        self.ticks = config.ticks  # the guide acts for this many ticks of a training episode now
        self._chunk: ActionChunk | None = None
        self._i = 0
        self._gate = SuccessGate(config.window, config.threshold)

    def acts(self, episode_tick: int, evaluation: bool) -> bool:
        """Whether the guide chooses this tick's action."""
        return episode_tick < self.ticks and not evaluation

    def action(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """The guide's action; each of its chunks is executed whole."""
        if self._chunk is None or self._i >= len(self._chunk.actions):
            self._chunk, self._i = self.policy.predict_chunk(obs), 0
        self._i += 1
        return self._chunk.actions[self._i - 1]

    def reset(self) -> None:
        """A new episode: no chunk of the last one runs into it."""
        self._chunk = None

    def episode_ended(self, success: bool) -> None:
        """A training episode's outcome: hand over earlier once the recent ones succeed enough."""
        if self._gate.passed(success):
            self.ticks = max(0, self.ticks - self.config.step)

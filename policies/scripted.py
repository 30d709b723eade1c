"""A scripted controller (e.g. a simulator's expert) behind the `Policy` interface, so demo
recording and guided episodes run through the one control loop like any policy.

Scripted experts read the simulator's own state, so they run `inline` (on the control thread,
never beside a stepping simulator)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch

from policies.base import ActionChunk, Policy


class ScriptedPolicy(Policy):
    """`act()` -> joint targets for this tick; one-action chunks; no weights."""

    def __init__(self, act: Callable[[], np.ndarray], dt: float, name: str = "scripted") -> None:
        self._act, self.dt, self._name = act, dt, name
        self.version = 0
        self._module = torch.nn.Identity()

    @property
    def architecture(self) -> str:
        return f"scripted:{self._name}"

    def predict_chunk(
        self,
        obs: Mapping[str, np.ndarray],
        *,
        forwarded_state: np.ndarray | None = None,
        prefix: np.ndarray | None = None,
        delay_ticks: int = 0,
    ) -> ActionChunk:
        return ActionChunk(np.asarray(self._act(), np.float32)[None], self.dt, self.version)

    def module(self) -> torch.nn.Module:
        return self._module


class HoldPolicy(ScriptedPolicy):
    """Holds where the robot is (`spec.hold_action`): what acts in a teleop session when no
    operator drives (their device was lost)."""

    def __init__(self, spec) -> None:
        super().__init__(lambda: np.zeros(spec.action_dim, np.float32), spec.dt, "hold")
        self.spec = spec

    def predict_chunk(
        self,
        obs: Mapping[str, np.ndarray],
        *,
        forwarded_state: np.ndarray | None = None,
        prefix: np.ndarray | None = None,
        delay_ticks: int = 0,
    ) -> ActionChunk:
        return ActionChunk(np.asarray(self.spec.hold_action(obs["state"]), np.float32)[None], self.dt, self.version)

"""Workspace checks for the safety layer (safety.py): a check takes a joint target and says why it
is outside the workspace, or None; `WorkspaceBox` keeps the end effector inside an axis-aligned box
using the robot's forward kinematics. `SafeRobot` holds position instead of sending a target a check
refuses.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

WorkspaceCheck = Callable[[np.ndarray], str | None]  # joint target -> None, or why it is outside


class WorkspaceBox:
    """End effector inside an axis-aligned box (m), using the robot's forward kinematics."""

    def __init__(
        self, fk: Callable[[np.ndarray], np.ndarray], low: tuple[float, float, float], high: tuple[float, float, float]
    ) -> None:
        self._fk, self.low, self.high = fk, np.asarray(low), np.asarray(high)

    def __call__(self, q: np.ndarray) -> str | None:
        p = self._fk(q)
        if np.all(p >= self.low) and np.all(p <= self.high):
            return None
        return f"end effector would be at {np.round(p, 3).tolist()}, outside {self.low.tolist()}..{self.high.tolist()}"

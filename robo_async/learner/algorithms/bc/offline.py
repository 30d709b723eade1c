"""Behaviour cloning offline (`robo-async bc`, benchmarks, tests): recorded episodes, the `algo=bc`
`Algorithm` built for the policy, and `update` on batches shaped as the learner's `Sampler` makes
them (`DemoWindows`), `steps` times.

    losses = clone(policy, episodes, 4000, BCConfig(batch_size=256, max_delay=12))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from policies.base import Policy
from robo_async.learner.algorithms.base import PolicySpec, build_algorithm
from robo_async.learner.algorithms.bc.config import BCConfig
from robo_async.learner.algorithms.bc.demos import DemoWindows


def spec_of(policy: Policy, name: str = "flow") -> PolicySpec:
    """The plain description of a policy built by hand (its inputs and joint limits)."""
    low = tuple(float(x) for x in getattr(policy, "low", ()))
    high = tuple(float(x) for x in getattr(policy, "high", ()))
    return PolicySpec(
        name,
        tuple(getattr(policy, "obs_keys", ())),
        tuple(getattr(policy, "obs_dims", ())),
        low,
        high,
        obs_scale=dict(getattr(policy, "obs_scale", {})),
        dt=float(getattr(policy, "dt", 1 / 30)),
    )


def clone(
    policy: Policy,
    episodes: Sequence[dict[str, np.ndarray]],
    steps: int,
    config: BCConfig,
    *,
    spec: PolicySpec | None = None,
    on_step: Callable[[int, float], None] | None = None,
    log_every: int = 0,
) -> list[float]:
    """Train `policy` in place for `steps` updates of `build_algorithm("bc", ...)` on windows of
    `episodes` (each `obs/<key>` and `action` per tick); the loss of each step."""
    torch.manual_seed(config.seed)
    algo = build_algorithm("bc", config, spec or spec_of(policy), trained=policy)
    windows = DemoWindows(episodes, window=algo.window, lookback=algo.lookback, seed=config.seed)
    if hasattr(algo, "fit_normalization"):  # statistics of many windows, not just the first batch's
        algo.fit_normalization(windows.sample(max(config.batch_size, min(8192, 4 * windows.transitions))))
    key = algo.loss_key  # type: ignore[attr-defined]
    losses: list[float] = []
    for step in range(steps):
        losses.append(algo.update(windows.sample(config.batch_size))[key])
        if on_step is not None:
            on_step(step + 1, losses[-1])
        if log_every and (step + 1) % log_every == 0:
            print(f"  bc step {step + 1}/{steps}: loss {np.mean(losses[-log_every:]):.4f}", flush=True)
    return losses

"""Behaviour cloning of chunk policies from windows of demonstrations (`algo=bc`), delay-consistent.

A batch is what the `Sampler` gives with `window=H` and `lookback=max_delay`: windows of H
executed actions, each with a lag d and the observation d ticks before it (`lag_obs/*`) and the
d actions executed since (`lag_actions`). Each window trains what the asynchronous actor will ask
at inference, for a delay d of up to `max_delay` ticks, half the rows each way:
- `rtc`-style: the window's own first observation, its first d actions as a committed prefix
  (d drawn from 0..max_delay, within the episode), the state forwarded to the last of them
  (position control: the last committed target); the whole window is the target chunk, scored
  after the prefix;
- `forward`-style: the lagged observation, the state forwarded through the d actions since, the
  window (which starts d ticks after that observation) as the target chunk, no prefix.
Both tell the network d (`delay_ticks` at inference).
So the policy learns to act from forwarded states and stale observations, as it will run.

LeRobot policies (ACT, SmolVLA, diffusion) learn with their own loss and preprocessor: the
window's first observation and its actions, padded where the episode ended inside it.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from policies.flow import FlowChunkPolicy


def delay_consistent(
    policy: FlowChunkPolicy, batch: Mapping[str, np.ndarray], max_delay: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """(condition, normalized target chunk, delay in ticks, committed-prefix length, camera frames
    or None) per window; see the module docstring."""
    acts = np.asarray(batch["actions"], np.float32)
    b, rows = len(acts), np.arange(len(acts))
    rtc = rng.integers(0, 2, size=b).astype(bool)
    d_rtc = np.minimum(rng.integers(0, max_delay + 1, size=b), batch["steps"])  # a prefix ends with the episode
    last = acts[rows, np.maximum(d_rtc - 1, 0)]  # the last committed target
    delay = d_rtc
    if "lag" in batch:  # forward-style rows: the lagged observation and the actions run since
        lag = np.asarray(batch["lag"], np.int64)
        delay = np.where(rtc, d_rtc, lag)
        last = np.where(rtc[:, None], last, batch["lag_actions"][rows, np.maximum(lag - 1, 0)])
    obs = {}
    for k, v in batch.items():
        if k.startswith("obs/"):
            pick = rtc.reshape(-1, *([1] * (v.ndim - 1)))
            obs[k.removeprefix("obs/")] = np.where(pick, v, batch.get("lag_" + k, v))
    fstate = np.array(obs["state"], np.float32)
    a = acts.shape[2]
    fstate[delay > 0, :a] = last[delay > 0]  # forwarded joints (position control), the rest as observed
    return (
        policy.condition(obs, fstate),
        policy.normalize(acts, fstate),
        delay,
        np.where(rtc, delay, 0),
        policy.images(obs),
    )


def lerobot_batch(policy, batch: Mapping[str, np.ndarray]) -> dict[str, object]:
    """Windows as a LeRobot training batch (before its preprocessor): the first observation,
    `action` [n, H, A] in the policy's units, `action_is_pad` where the episode ended inside."""
    obs = {k.removeprefix("obs/"): v for k, v in batch.items() if k.startswith("obs/")}
    parts = [policy.batch({k: v[i] for k, v in obs.items()}) for i in range(len(batch["actions"]))]
    out: dict[str, object] = {k: torch.stack([p[k] for p in parts]) for k in parts[0] if k != "task"}
    out["task"] = [p["task"] for p in parts]
    out["action"] = torch.as_tensor(policy._from_robot(np.asarray(batch["actions"], np.float32)), dtype=torch.float32)
    out["action_is_pad"] = torch.as_tensor(np.asarray(batch["mask"]) == 0)
    return out

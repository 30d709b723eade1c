"""Behaviour cloning of chunk policies (`robo-async bc`) from demonstration episodes, delay-consistent.

Each training sample is what the asynchronous actor will ask at inference, for a delay d drawn
from [0, max_delay] ticks:
- `rtc`-style: observation at tick t, the expert's actions for t..t+d-1 as a committed prefix,
  the forwarded state (position control: the last committed target), target chunk t..t+H-1
  (scored after the prefix);
- `forward`-style: observation at tick t, forwarded state after d committed actions, target chunk
  t+d..t+d+H-1 (no prefix).
Both tell the network d (`delay_ticks` at inference).
So the policy learns to act from forwarded states and stale observations, as it will run.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from policies.flow import FlowChunkPolicy


def delay_samples(episodes: list[dict[str, np.ndarray]], policy: FlowChunkPolicy, max_delay: int,
                  rng: np.random.Generator, n: int
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """n (condition, normalized chunk, delay in ticks, committed-prefix length, camera frames or
    None) samples; see the module docstring."""
    h = policy.horizon
    conds, chunks, delays, prefixes, frames = [], [], [], [], []
    for _ in range(n):
        ep = episodes[rng.integers(len(episodes))]
        acts = ep["action"]
        t = int(rng.integers(0, len(acts)))
        d = int(rng.integers(0, max_delay + 1))
        rtc = bool(rng.integers(0, 2))
        start = t if rtc else t + d
        idx = np.minimum(np.arange(start, start + h), len(acts) - 1)
        committed = acts[t:t + d]
        state = ep["obs/state"][t]
        fstate = committed[-1] if len(committed) else state
        obs = {k.removeprefix("obs/"): v[t] for k, v in ep.items() if k.startswith("obs/")}
        conds.append(policy.condition(obs, fstate))
        if policy.cameras:
            frames.append(policy.images(obs))
        chunks.append(policy.normalize(acts[idx], fstate))
        delays.append(len(committed))
        prefixes.append(len(committed) if rtc else 0)
    return (torch.as_tensor(np.stack(conds)), torch.as_tensor(np.stack(chunks)), torch.as_tensor(delays),
            torch.as_tensor(prefixes), torch.as_tensor(np.stack(frames)) if frames else None)


def train_bc(policy: FlowChunkPolicy, episodes: list[dict[str, np.ndarray]], steps: int, batch: int = 256,
             lr: float = 1e-3, max_delay: int = 10, seed: int = 0, log_every: int = 0,
             on_step: Callable[[int, float], None] | None = None, prefix_noise: float = 0.0,
             prefix_hide: float = 0.0) -> list[float]:
    """Adam on the flow-matching loss; returns the loss per step. `prefix_noise` / `prefix_hide`:
    REMAC-style perturbed and partly hidden committed prefixes (`FlowChunkPolicy.bc_loss`)."""
    rng = np.random.default_rng(seed)
    opt = torch.optim.Adam(policy.net.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        cond, chunks, delays, prefixes, frames = delay_samples(episodes, policy, max_delay, rng, batch)
        loss = policy.bc_loss(cond, chunks, delays, frames, prefixes, prefix_noise=prefix_noise,
                              prefix_hide=prefix_hide)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if on_step is not None:
            on_step(step + 1, losses[-1])
        if log_every and (step + 1) % log_every == 0:
            print(f"  bc step {step + 1}/{steps}: loss {np.mean(losses[-log_every:]):.4f}", flush=True)
    return losses


def lerobot_samples(episodes: list[dict[str, np.ndarray]], policy, rng: np.random.Generator, n: int) -> dict:
    """n (observation at tick t, the next chunk of expert actions) samples as a LeRobot training
    batch (before its preprocessor): `action` [n, H, A] in the policy's units, `action_is_pad`
    where the episode ended inside the chunk."""
    h = policy.horizon
    parts, actions, pads = [], [], []
    for _ in range(n):
        ep = episodes[rng.integers(len(episodes))]
        acts = ep["action"]
        t = int(rng.integers(0, len(acts)))
        idx = np.arange(t, t + h)
        pads.append(idx >= len(acts))
        actions.append(policy._from_robot(acts[np.minimum(idx, len(acts) - 1)]))
        parts.append(policy.batch({k.removeprefix("obs/"): v[t] for k, v in ep.items() if k.startswith("obs/")}))
    batch = {k: torch.stack([p[k] for p in parts]) for k in parts[0] if k != "task"}
    batch["task"] = [p["task"] for p in parts]
    batch["action"] = torch.as_tensor(np.stack(actions), dtype=torch.float32)
    batch["action_is_pad"] = torch.as_tensor(np.stack(pads))
    return batch


def train_lerobot_bc(policy, episodes: list[dict[str, np.ndarray]], steps: int, batch: int = 32, lr: float = 1e-4,
                     seed: int = 0, on_step: Callable[[int, float], None] | None = None) -> list[float]:
    """Behaviour cloning of a LeRobot chunk policy (SmolVLA, ACT, ...) with its own training loss
    (`PreTrainedPolicy.forward`) and its own preprocessor (normalization, tokenization); only
    the parameters the policy trains (SmolVLA: the action expert, not the frozen VLM)."""
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    params = [p for p in policy.policy.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr)
    policy.policy.train()
    losses = []
    try:
        for step in range(steps):
            out = policy.policy.forward(policy.pre(lerobot_samples(episodes, policy, rng, batch)))
            loss = out[0] if isinstance(out, tuple) else out
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 10.0)
            opt.step()
            losses.append(float(loss.detach()))
            if on_step is not None:
                on_step(step + 1, losses[-1])
    finally:
        policy.policy.eval()
    return losses

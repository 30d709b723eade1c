"""A flow-matching action-chunk policy (pi0-style, small): observations -> H x A joint targets.

Training (behaviour cloning): for data chunks x1 (normalized to [-1, 1]), noise x0 and t ~ U(0, 1),
the network learns the velocity x1 - x0 at x_t = (1 - t) x0 + t x1. Sampling integrates
`steps` Euler steps from noise. Real-time chunking: when the first `d`
actions are already committed (`prefix`), they condition the sampling and are returned exactly,
so the rest of the chunk is sampled consistent with them. Two ways (`prefix_mode`), trained the
way they are sampled:
- `path` (ours): the prefix is held on its data path, x_t[:d] = (1 - t) x0[:d] + t prefix
  (inpainting along the flow);
- `clean`: training-time RTC (Black et al. 2025, the variant LeRobot added for pi0.5): the prefix
  is given clean at every step, x_t[:d] = prefix, with the mask telling the network which
  positions are given; no guidance at inference.
BC can also train with perturbed and partly hidden prefixes (REMAC-style masked action chunking,
`bc_loss(prefix_noise=, prefix_hide=)`), so a chunk stays consistent when what ran differs from
what was planned. The network (`networks.FlowNet`) also sees `d` (the inference delay in ticks) and the forwarded state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from policies.base import ActionChunk, ChunkRequest, Policy, camera_frames, register
from policies.networks import ChunkNorm, FlowNet


@register("flow")
class FlowChunkPolicy(Policy):
    """The `flow` policy: flow-matching action chunks of H joint targets from the state, features and camera
    frames, with real-time chunking (see the module's docstring). Actions are normalized per `action_mode`
    (`absolute`: the joint range; `delta`: around the forwarded state)."""

    def __init__(
        self,
        obs_keys: tuple[str, ...],
        obs_dims: tuple[int, ...],
        action_low: tuple[float, ...],
        action_high: tuple[float, ...],
        horizon: int = 10,
        steps: int = 5,
        hidden: tuple[int, ...] = (256, 256),
        dt: float = 1 / 30,
        obs_scale: Mapping[str, float] | None = None,
        seed: int = 0,
        action_mode: str = "absolute",
        delta_range: float = 0.5,
        cameras: tuple[str, ...] = (),
        image_size: int = 64,
        prefix_mode: str = "path",
        gripper: str = "binary",
        **_: object,
    ) -> None:
        if action_mode not in ("absolute", "delta"):
            raise ValueError(f"flow policy action_mode must be 'absolute' or 'delta', not '{action_mode}'")
        if prefix_mode not in ("path", "clean"):
            raise ValueError(f"flow policy prefix_mode must be 'path' or 'clean', not '{prefix_mode}'")
        if gripper not in ("binary", "continuous"):
            raise ValueError(f"flow policy gripper must be 'binary' or 'continuous', not '{gripper}'")
        self.prefix_mode, self.gripper = prefix_mode, gripper
        torch.manual_seed(seed)
        self.action_mode, self.delta_range = action_mode, float(delta_range)
        self.obs_keys, self.obs_dims = tuple(obs_keys), tuple(obs_dims)
        self.low = np.asarray(action_low, np.float32)
        self.high = np.asarray(action_high, np.float32)
        self.horizon, self.steps, self.dt = horizon, steps, dt
        self.obs_scale = dict(obs_scale or {})
        self.cameras, self.image_size = tuple(cameras), int(image_size)
        self.net = FlowNet(sum(obs_dims), horizon, len(action_low), tuple(hidden), len(self.cameras), self.image_size)
        self._gen = torch.Generator().manual_seed(seed)
        self.deterministic = False  # True: integrate from zero noise (the mode of the flow, repeatable)

    @property
    def architecture(self) -> str:
        cams = f"+{len(self.cameras)}cam{self.image_size}" if self.cameras else ""
        clean = "-rtcclean" if self.prefix_mode == "clean" else ""  # the same shapes, another conditioning
        return f"flow-{self.action_mode}{clean}:{sum(self.obs_dims)}{cams}-H{self.horizon}x{len(self.low)}-" + "-".join(
            str(m.out_features) for m in self.net.net if isinstance(m, nn.Linear)
        )

    def module(self) -> nn.Module:
        return self.net

    # --- normalization -----------------------------------------------------------------------
    # absolute: joint range -> [-1, 1]; delta: ref +- delta_range -> [-1, 1], where ref is the
    # (forwarded) joint state the chunk starts from: finer resolution where the arm actually goes.
    # Then, once fitted on demonstrations (`fit_normalization`), each action dimension's demonstrated
    # range -> [-1, 1] (the gripper's closing inside one chunk no longer clips), and the gripper (the
    # last joint) snapped to the nearer of the two levels the demonstrations use.
    @property
    def norm(self) -> ChunkNorm:
        """The normalisation this policy acts with (its network's)."""
        return self.net.norm

    def _stats(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        n = self.norm
        if not float(n.fitted[0]):
            return None
        return n.act_low.cpu().numpy(), n.act_high.cpu().numpy(), n.grip_levels.cpu().numpy()

    def _coarse(self, actions: np.ndarray, ref: np.ndarray | None) -> np.ndarray:
        if self.action_mode == "delta":
            r = np.asarray(ref, np.float32)[..., None, : len(self.low)] if actions.ndim > 1 else ref[: len(self.low)]
            return ((actions - r) / self.delta_range).astype(np.float32)
        return (2 * (actions - self.low) / (self.high - self.low) - 1).astype(np.float32)

    def normalize(self, actions: np.ndarray, ref: np.ndarray | None = None) -> np.ndarray:
        """Joint targets [..., A] (rad) -> the network's [-1, 1] space (`delta` mode: relative to `ref`, the
        state the chunk starts from; fitted: each dimension's demonstrated range)."""
        x = self._coarse(np.asarray(actions, np.float32), ref)
        stats = self._stats()
        if stats is not None:
            lo, hi, _ = stats
            x = 2 * (x - lo) / (hi - lo) - 1
        return x.astype(np.float32)

    def denormalize(self, x: np.ndarray, ref: np.ndarray | None = None) -> np.ndarray:
        """The network's [-1, 1] space -> joint targets (rad), clipped to the joint limits; the inverse of
        `normalize` (fitted: with the gripper snapped to its nearer demonstrated level)."""
        x = np.clip(x, -1, 1)
        stats = self._stats()
        if stats is not None:
            lo, hi, _ = stats
            x = lo + (x + 1) / 2 * (hi - lo)
        if self.action_mode == "delta":
            r = np.asarray(ref, np.float32)[..., None, : len(self.low)] if x.ndim > 1 else ref[: len(self.low)]
            out = np.clip(r + x * self.delta_range, self.low, self.high)
        else:
            out = self.low + (np.clip(x, -1, 1) + 1) / 2 * (self.high - self.low)
        if stats is not None and self.gripper == "binary" and stats[2][1] > stats[2][0]:
            closed, opened = stats[2]
            out[..., -1] = np.where(out[..., -1] < (closed + opened) / 2, closed, opened)
        return out.astype(np.float32)

    def fit_normalization(self, cond: np.ndarray, chunks: np.ndarray, targets: np.ndarray) -> None:
        """Fit the input and action normalisation on demonstrations: `cond` [N, D] conditioning vectors
        (`condition`), `chunks` [N, H, A] their target chunks in the coarse space (before fitting,
        `normalize` gives it), `targets` [M] the gripper's demonstrated targets (rad). Inputs: mean and
        std (at least 1e-2); actions: each dimension's range with a 10% margin (at least 0.05 wide);
        gripper: two levels by 2-medians, used when they are at least a fifth of its range apart."""
        net = self.norm
        with torch.no_grad():
            cond = np.asarray(cond, np.float32)[:, : len(net.obs_shift)]  # (the tiny VLA's token ids follow)
            net.obs_shift.copy_(torch.as_tensor(cond.mean(0)))
            net.obs_scale.copy_(torch.as_tensor(np.maximum(cond.std(0), 1e-2)))
            flat = np.asarray(chunks, np.float32).reshape(-1, chunks.shape[-1])
            lo, hi = flat.min(0), flat.max(0)
            mid, half = (lo + hi) / 2, np.maximum((hi - lo) / 2 * 1.1, 0.025)
            net.act_low.copy_(torch.as_tensor(mid - half))
            net.act_high.copy_(torch.as_tensor(mid + half))
            g = np.asarray(targets, np.float32)
            levels = np.array([g.min(), g.max()], np.float32)
            for _ in range(20):  # 2-medians in one dimension
                near = np.abs(g[:, None] - levels[None]).argmin(1)
                levels = np.array(
                    [np.median(g[near == i]) if (near == i).any() else levels[i] for i in (0, 1)], np.float32
                )
            span = float(self.high[-1] - self.low[-1])
            net.grip_levels.copy_(
                torch.as_tensor(levels if levels[1] - levels[0] >= span / 5 else np.zeros(2, np.float32))
            )
            net.fitted.fill_(1.0)

    def condition(self, obs: Mapping[str, np.ndarray], forwarded_state: np.ndarray | None = None) -> np.ndarray:
        """Flat conditioning vector(s); `state` is replaced by the forwarded state when given.
        Works on single observations ([D]) and batches ([B, D])."""
        parts = []
        for k in self.obs_keys:
            v = forwarded_state if (k == "state" and forwarded_state is not None) else obs[k]
            parts.append(np.asarray(v, np.float32) * self.obs_scale.get(k, 1.0))
        return np.concatenate(parts, axis=-1).astype(np.float32)

    def images(self, obs: Mapping[str, np.ndarray]) -> np.ndarray | None:
        """Camera frames [n_cams, H, W, 3] (or [B, n_cams, H, W, 3] for batched observations)."""
        return camera_frames(obs, self.cameras, "flow policy")

    # --- sampling -----------------------------------------------------------------------------
    def sample(
        self,
        cond: torch.Tensor,
        prefix: torch.Tensor | None = None,
        delay: int | torch.Tensor = 0,
        images: torch.Tensor | None = None,
        noise: torch.Tensor | None = None,
        encoded: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Normalized chunks [B, H, A]; `prefix` [B, d, A] (normalized) is kept exactly; `delay`:
        ticks between the observation and the chunk's start (one, or [B]); `noise` [B, H, A]: the
        starting noise (default: drawn, or zero when deterministic); `encoded`: `net.encode(cond,
        images)` when the caller has it already."""
        b, h, a = cond.shape[0], self.horizon, len(self.low)
        with torch.no_grad():
            cond = self.net.encode(cond, images) if encoded is None else encoded
        if noise is not None:
            x0 = noise
        else:
            x0 = torch.zeros(b, h, a) if self.deterministic else torch.randn(b, h, a, generator=self._gen)
            x0 = x0.to(cond.device)
        d = 0 if prefix is None else min(prefix.shape[1], h)
        dev = cond.device
        mask = torch.zeros(b, h, device=dev)
        mask[:, :d] = 1
        delay_t = (
            delay.float().to(dev) / h if isinstance(delay, torch.Tensor) else torch.full((b,), delay / h, device=dev)
        )
        x = x0.clone()
        with torch.no_grad():
            for k in range(self.steps):
                t = k / self.steps
                if d:
                    x[:, :d] = prefix[:, :d] if self.prefix_mode == "clean" else (1 - t) * x0[:, :d] + t * prefix[:, :d]
                v = self.net(x, torch.full((b,), t, device=dev), cond, delay_t, mask)
                x = x + v / self.steps
        if d:
            x[:, :d] = prefix[:, :d]
        return x

    def predict_chunk(
        self,
        obs: Mapping[str, np.ndarray],
        *,
        forwarded_state: np.ndarray | None = None,
        prefix: np.ndarray | None = None,
        delay_ticks: int = 0,
    ) -> ActionChunk:
        cond = torch.as_tensor(self.condition(obs, forwarded_state))[None]
        ref = np.asarray(obs["state"] if forwarded_state is None else forwarded_state, np.float32)
        p = None
        if prefix is not None and len(prefix):
            p = torch.as_tensor(self.normalize(np.asarray(prefix, np.float32)[: self.horizon], ref))[None]
        imgs = self.images(obs)
        x = self.sample(
            cond,
            p,
            delay=len(prefix) if prefix is not None and len(prefix) else delay_ticks,
            images=None if imgs is None else torch.as_tensor(imgs)[None],
        )[0].numpy()
        actions = self.denormalize(x, ref)
        if prefix is not None and len(prefix):
            actions[: len(prefix)] = np.asarray(prefix, np.float32)[: self.horizon]  # exact, no round trip
        return ActionChunk(actions, self.dt, self.version)

    def predict_chunks(self, requests: Sequence[ChunkRequest]) -> list[ActionChunk]:
        """One forward pass per prefix length for a batch of requests (the policy server, a
        vectorized actor). A subclass that acts otherwise (its own `predict_chunk`: the one-step
        actor, the noise-steered prior) is answered one by one, never with this flow sampler."""
        if type(self).predict_chunk is not FlowChunkPolicy.predict_chunk:
            return Policy.predict_chunks(self, requests)
        out: list[ActionChunk | None] = [None] * len(requests)
        groups: dict[int, list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault(0 if r.prefix is None else min(len(r.prefix), self.horizon), []).append(i)
        for d, rows in groups.items():
            if len(rows) == 1:
                r = requests[rows[0]]
                out[rows[0]] = self.predict_chunk(
                    r.obs, forwarded_state=r.forwarded_state, prefix=r.prefix, delay_ticks=r.delay_ticks
                )
                continue
            rs = [requests[i] for i in rows]
            obs = {k: np.stack([np.asarray(r.obs[k]) for r in rs]) for k in rs[0].obs}
            states = np.stack(
                [np.asarray(r.obs["state"] if r.forwarded_state is None else r.forwarded_state, np.float32) for r in rs]
            )
            cond = np.stack([self.condition(r.obs, r.forwarded_state) for r in rs])
            p = None
            if d:
                p = torch.as_tensor(
                    np.stack(
                        [
                            self.normalize(np.asarray(r.prefix, np.float32)[:d], s)
                            for r, s in zip(rs, states, strict=False)
                        ]
                    )
                )
            delays = torch.as_tensor([d if d else r.delay_ticks for r in rs])
            imgs = self.images(obs)
            x = self.sample(
                torch.as_tensor(cond), p, delay=delays, images=None if imgs is None else torch.as_tensor(imgs)
            ).numpy()
            for j, (i, r) in enumerate(zip(rows, rs, strict=False)):
                actions = self.denormalize(x[j], states[j])
                if d:
                    actions[:d] = np.asarray(r.prefix, np.float32)[:d]
                out[i] = ActionChunk(actions, self.dt, self.version)
        return out  # type: ignore[return-value]

    # --- training -----------------------------------------------------------------------------
    def bc_loss(
        self,
        cond: torch.Tensor,
        chunks: torch.Tensor,
        delays: torch.Tensor,
        images: torch.Tensor | None = None,
        prefix_len: torch.Tensor | None = None,
        weights: torch.Tensor | None = None,
        prefix_noise: float = 0.0,
        prefix_hide: float = 0.0,
        encoded: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Flow-matching loss on normalized data chunks [B, H, A]. `delays`: ticks between the
        observation and the chunk's start (an input of the network); rows with `prefix_len` p > 0
        (default: the delay) are given their first p actions as a committed prefix (as at
        inference, `prefix_mode`) and scored on the rest. `weights` [B]: per-sample loss weights.
        REMAC-style robustness: `prefix_noise` (std, normalized units) perturbs the given prefix
        (the target stays the demonstration's continuation); `prefix_hide` hides each committed
        position with this probability (it is then sampled and scored like a free one). `encoded`:
        `net.encode(cond, images)` computed by the caller (gradients flow through it)."""
        b, h, _ = chunks.shape
        cond = self.net.encode(cond, images) if encoded is None else encoded
        x0 = torch.randn_like(chunks)
        t = torch.rand(b, device=chunks.device)
        plen = delays if prefix_len is None else prefix_len
        mask = (torch.arange(h, device=chunks.device)[None] < plen[:, None]).float()  # [B, H]
        if prefix_hide > 0:
            mask = mask * (torch.rand_like(mask) >= prefix_hide).float()
        given = chunks
        if prefix_noise > 0:
            given = chunks + prefix_noise * torch.randn_like(chunks) * mask[..., None]
        tt = t[:, None, None]
        m = mask[..., None]
        if self.prefix_mode == "clean":
            xt = m * given + (1 - m) * ((1 - tt) * x0 + tt * chunks)
        else:
            xt = (1 - tt) * x0 + tt * (m * given + (1 - m) * chunks)
        v = self.net(xt, t, cond, delays.float() / h, mask)
        err = ((v - (chunks - x0)) ** 2).mean(-1)  # [B, H]
        free = 1 - mask
        if weights is not None:
            free = free * weights[:, None]
        return (err * free).sum() / free.sum().clamp(min=1e-6)

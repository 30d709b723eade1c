"""Behaviour cloning (`algo=bc`, and `robo-async bc` offline): one imitation step per `update` for
whichever policy it was built for:
- `policy=mlp` (one step): maximum likelihood of the demonstrated action under the policy's
  Gaussian (before the tanh), so both the mean and the exploration noise are learned; batches of
  single transitions;
- chunk policies (`policy=flow`, `policy=tiny_vla`): delay-consistent flow matching on windows of
  H demonstrated actions with a lookback of `max_delay` ticks (`chunk.py`);
- LeRobot policies (ACT, SmolVLA, diffusion): their own loss through their own preprocessor, on
  windows of their chunk size; only the parameters they train (SmolVLA: not the frozen VLM).

On the learner it builds `policy=mlp` or `policy=flow` from the `PolicySpec`; `robo-async bc`
hands it the policy the actors will run (`policy=`), built by the launch layer.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

from policies.augment import random_shift
from policies.base import Policy
from policies.flow import FlowChunkPolicy
from policies.mlp import MLPPolicy
from robo_async.learner.algorithms.base import Algorithm, PolicySpec, mlp_policy, refuse_dagger, register
from robo_async.learner.algorithms.bc.chunk import delay_consistent, lerobot_batch
from robo_async.learner.algorithms.bc.config import BCConfig


def bc_policy(spec: PolicySpec) -> Policy:
    """The policy `algo=bc` trains on the learner, built from plain values."""
    if spec.name == "flow":
        from robo_async.learner.algorithms.qc.learning import flow_prior

        return flow_prior(spec, "bc")
    if spec.name != "mlp":
        raise ValueError(
            f"algo=bc on the learner trains policy=mlp or policy=flow, not policy={spec.name}: "
            f"clone it offline with `robo-async bc policy={spec.options.get('type', spec.name)}`"
        )
    return mlp_policy(spec, "bc")


@register("bc", BCConfig)
class BC(Algorithm):
    """Behaviour cloning (see the module's docstring): a one-step, flow or LeRobot policy learns
    to imitate the `config.tables` rows (demonstrations and corrections), never its own
    rollouts. Publishes the cloned policy itself; metrics `losses/bc_nll`, `losses/bc_flow` or
    `losses/bc_lerobot` by kind."""

    config: BCConfig

    def __init__(self, config: BCConfig, policy: PolicySpec, trained: Policy | None = None) -> None:
        """`trained`: the policy to clone into (built by the caller); default: built from `policy`."""
        self.config = c = config
        refuse_dagger(config, "bc")
        self.spec = policy
        self.policy = trained if trained is not None else bc_policy(policy)
        self._rng = np.random.default_rng(c.seed)
        if isinstance(self.policy, MLPPolicy):
            self.kind, self.loss_key = "one_step", "losses/bc_nll"
            self.net: nn.Module = self.policy.module()  # the Gaussian actor (and its image encoder with cameras)
            self.opt: torch.optim.Optimizer = torch.optim.Adam(self.net.parameters(), lr=c.lr)
        elif isinstance(self.policy, FlowChunkPolicy):
            self.kind, self.loss_key = "flow", "losses/bc_flow"
            self.net = self.policy.net
            self.window, self.lookback = self.policy.horizon, c.max_delay  # the delays actors see
            self.opt = torch.optim.Adam(self.net.parameters(), lr=c.lr)
        elif hasattr(self.policy, "pre") and isinstance(getattr(self.policy, "policy", None), nn.Module):
            self.kind, self.loss_key = "lerobot", "losses/bc_lerobot"
            self.net = self.policy.policy  # type: ignore[attr-defined]
            self.window = self.policy.horizon
            self._params = [p for p in self.net.parameters() if p.requires_grad]
            self.opt = torch.optim.AdamW(self._params, lr=c.lr)
        else:
            raise ValueError(f"algo=bc cannot clone a {type(self.policy).__name__}")

    @property
    def tables(self) -> tuple[str, ...]:
        return self.config.tables

    def modules(self) -> dict[str, nn.Module]:
        return {"actor": self.net}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor_opt": self.opt}

    def update(self, batch: Mapping[str, np.ndarray]) -> dict[str, float]:
        if self.kind == "flow":
            return self._flow(batch)
        if self.kind == "lerobot":
            return self._lerobot(batch)
        return self._one_step(batch)

    def _step(self, loss: torch.Tensor, clip: float | None = None) -> None:
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(self._params, clip)
        self.opt.step()

    def _one_step(self, batch: Mapping[str, np.ndarray]) -> dict[str, float]:
        p = self.policy
        assert isinstance(p, MLPPolicy)
        obs = p.inputs(batch, "obs/", fit=True)
        imgs = p.images({k.removeprefix("obs/"): v for k, v in batch.items() if k.startswith("obs/")})
        obs = p.features(obs, None if imgs is None else random_shift(torch.as_tensor(imgs), self.config.augment_pad))
        target = torch.as_tensor(p.to_normalized(batch["action"], batch["obs/state"]), dtype=torch.float32)
        u = torch.atanh(target.clamp(-0.999, 0.999))  # the demonstrated action before the squashing
        mean, log_std = p.net(obs)
        nll = (0.5 * ((u - mean) / log_std.exp()) ** 2 + log_std).sum(-1).mean()
        self._step(nll)
        with torch.no_grad():
            mse = ((torch.tanh(mean) - target) ** 2).mean()
        return {"losses/bc_nll": nll.item(), "losses/bc_mse": mse.item()}

    def fit_normalization(self, batch: Mapping[str, np.ndarray]) -> None:
        """Fit a chunk policy's input and action normalisation (and its gripper levels) on a batch of
        demonstration windows, unless it is fitted already (weights from `policy.path`) or
        `config.normalize` is off. The first update does it with its own batch; `robo-async bc` first
        with a larger one."""
        p = self.policy
        if self.kind != "flow" or not self.config.normalize or float(p.norm.fitted[0]):  # type: ignore[attr-defined]
            return
        assert isinstance(p, FlowChunkPolicy)
        cond, chunks, *_ = delay_consistent(p, batch, self.config.max_delay, np.random.default_rng(self.config.seed))
        p.fit_normalization(cond, chunks, np.asarray(batch["actions"], np.float32)[..., -1].ravel())

    def _flow(self, batch: Mapping[str, np.ndarray]) -> dict[str, float]:
        p, c = self.policy, self.config
        assert isinstance(p, FlowChunkPolicy)
        self.fit_normalization(batch)
        cond, chunks, delays, prefixes, frames = delay_consistent(p, batch, c.max_delay, self._rng)
        images = None if frames is None else random_shift(torch.as_tensor(frames), c.augment_pad)  # DrQ-style
        loss = p.bc_loss(
            torch.as_tensor(cond),
            torch.as_tensor(chunks),
            torch.as_tensor(delays),
            images,
            torch.as_tensor(prefixes),
            prefix_noise=c.prefix_noise,
            prefix_hide=c.prefix_hide,
        )
        self._step(loss)
        return {"losses/bc_flow": loss.item(), "losses/mean_delay": float(np.mean(delays))}

    def _lerobot(self, batch: Mapping[str, np.ndarray]) -> dict[str, float]:
        self.net.train()
        try:
            out = self.net(self.policy.pre(lerobot_batch(self.policy, batch)))  # type: ignore[attr-defined]
            loss = out[0] if isinstance(out, tuple) else out
            self._step(loss, clip=10.0)
        finally:
            self.net.eval()
        return {"losses/bc_lerobot": float(loss.detach())}

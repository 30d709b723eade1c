"""Behaviour cloning of the one-step policy (`policy=mlp`) from demonstrations in the store:
maximum likelihood of the demonstrated action under the policy's Gaussian (before the tanh), so
both the mean and the exploration noise are learned. Chunk policies are cloned by `robo-async bc`
(episodes in memory) until the store samples action windows."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

from policies.augment import random_shift
from policies.mlp import flatten_obs
from robo_async.learner.algorithms.base import Algorithm, PolicySpec, mlp_policy, refuse_dagger, register
from robo_async.learner.algorithms.bc.config import BCConfig


@register("bc", BCConfig)
class BC(Algorithm):
    def __init__(self, config: BCConfig, policy: PolicySpec) -> None:
        self.config = config
        refuse_dagger(config, "bc")
        self.spec = policy
        self.policy = mlp_policy(policy, "bc")
        self.actor = self.policy.module()  # the Gaussian actor (and its image encoder with cameras)
        self.opt = torch.optim.Adam(self.actor.parameters(), lr=config.lr)

    @property
    def architecture(self) -> str:
        return self.policy.architecture

    @property
    def tables(self) -> tuple[str, ...]:
        return self.config.tables

    def policy_weights(self) -> dict[str, np.ndarray]:
        return self.policy.weights()

    def modules(self) -> dict[str, nn.Module]:
        return {"actor": self.actor}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor_opt": self.opt}

    def update(self, batch: Mapping[str, np.ndarray]) -> dict[str, float]:
        keys = self.spec.obs_keys
        obs = flatten_obs({k: batch[f"obs/{k}"] for k in keys}, keys, self.spec.obs_scale)
        imgs = self.policy.images({k.removeprefix("obs/"): v for k, v in batch.items() if k.startswith("obs/")})
        obs = self.policy.features(obs, None if imgs is None else random_shift(torch.as_tensor(imgs), 4))
        target = torch.as_tensor(self.policy.to_normalized(batch["action"], batch["obs/state"]), dtype=torch.float32)
        u = torch.atanh(target.clamp(-0.999, 0.999))  # the demonstrated action before the squashing
        mean, log_std = self.policy.net(obs)
        nll = (0.5 * ((u - mean) / log_std.exp()) ** 2 + log_std).sum(-1).mean()
        self.opt.zero_grad(set_to_none=True)
        nll.backward()
        self.opt.step()
        with torch.no_grad():
            mse = ((torch.tanh(mean) - target) ** 2).mean()
        return {"losses/bc_nll": nll.item(), "losses/bc_mse": mse.item()}

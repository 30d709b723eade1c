"""Filtered (reward-weighted) flow fine-tuning: the simple baseline for chunk-policy RL
(Hi-ORS-style rejection sampling on outcomes). The flow policy keeps learning by flow-matching
BC on windows of executed actions, but online windows count only when their episode succeeded
(the sampler's `successful_only`); demonstrations and interventions always count, each table
with its loss weight. The actors run the flow policy itself (`policy=flow`, warm start from
`policy.path=`). Training is delay-consistent like `robo-async bc`: a random committed prefix of
the window (RTC) with the state forwarded to its last target, the delay given to the network.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

from robo_async.buffer.lmdb_store import TABLES
from robo_async.learner.algorithms.base import Algorithm, PolicySpec, refuse_dagger, register
from robo_async.learner.algorithms.filtered.config import FilteredConfig
from robo_async.learner.algorithms.qc.learning import flow_prior


@register("filtered", FilteredConfig)
class Filtered(Algorithm):
    """Filtered flow fine-tuning (see the module's docstring): delay-consistent flow-matching BC
    on windows of `horizon` ticks, online ones only from successful episodes. Publishes the flow
    policy itself; metrics `losses/flow_bc_loss`, `losses/online_share`, `losses/window_steps`."""

    supports_device = True
    successful_only = True

    def __init__(self, config: FilteredConfig, policy: PolicySpec) -> None:
        self.config = c = config
        refuse_dagger(config, "filtered")
        self.spec = policy
        self.policy = flow_prior(policy, "filtered")
        self.window = self.policy.horizon
        self.opt = torch.optim.Adam(self.policy.net.parameters(), lr=c.lr)
        w = {"online": c.online_weight, "demos": c.demo_weight, "interventions": c.intervention_weight}
        self._table_weight = torch.tensor([w[t] for t in TABLES], dtype=torch.float32)
        self._rng = np.random.default_rng(0)

    @property
    def tables(self) -> tuple[str, ...]:
        return self.config.tables

    def modules(self) -> dict[str, nn.Module]:
        return {"actor": self.policy.net}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor_opt": self.opt}

    def update(self, batch: Mapping[str, np.ndarray]) -> dict[str, float]:
        p = self.policy
        acts, b = batch["actions"], len(batch["actions"])
        d = self._rng.integers(0, min(self.config.max_delay, p.horizon - 1) + 1, size=b)
        d = np.minimum(d, batch["steps"] - 1)  # a prefix never reaches past the episode end
        state = batch["obs/state"]
        fstate = np.where(d[:, None] > 0, acts[np.arange(b), np.maximum(d - 1, 0)], state[:, : acts.shape[2]])
        fstate = np.concatenate([fstate, state[:, acts.shape[2] :]], axis=1)  # forwarded joints, rest as seen
        obs = {k.removeprefix("obs/"): v for k, v in batch.items() if k.startswith("obs/")}
        cond = self.tensor(p.condition(obs, fstate))
        imgs = p.images(obs)
        chunks = self.tensor(np.clip(p.normalize(acts, fstate), -1, 1))
        delays = self.tensor(d)
        weights = (
            self._table_weight.to(self.device)[self.tensor(batch["table"].astype(np.int64))]
            if "table" in batch
            else None
        )
        loss = p.bc_loss(cond, chunks, delays, None if imgs is None else self.tensor(imgs), delays, weights)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        share = float(np.mean(batch["table"] == 0)) if "table" in batch else 0.0
        return {
            "losses/flow_bc_loss": loss.item(),
            "losses/online_share": share,
            "losses/window_steps": float(np.mean(batch["steps"])),
        }

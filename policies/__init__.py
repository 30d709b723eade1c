"""Policies: networks mapping observations to action chunks."""

import policies.lerobot_chunk
import policies.lerobot_dsrl
import policies.onestep
import policies.tiny_vla  # noqa: F401  (registers `tiny_vla`)
from policies.base import ActionChunk, Policy, WeightsMismatch, available, make_policy, register
from policies.critics import CriticEnsemble
from policies.flow import FlowChunkPolicy
from policies.mlp import GaussianActor, MLPPolicy, flatten_obs

__all__ = [
    "CriticEnsemble",
    "ActionChunk",
    "FlowChunkPolicy",
    "GaussianActor",
    "MLPPolicy",
    "Policy",
    "WeightsMismatch",
    "available",
    "flatten_obs",
    "make_policy",
    "register",
]

"""Policies: networks mapping observations to action chunks."""

from policies.base import ActionChunk, Policy, WeightsMismatch, available, make_policy, register
from policies.mlp import GaussianActor, MLPPolicy, TwinCritic, flatten_obs

__all__ = [
    "ActionChunk", "GaussianActor", "MLPPolicy", "Policy", "TwinCritic", "WeightsMismatch",
    "available", "flatten_obs", "make_policy", "register",
]

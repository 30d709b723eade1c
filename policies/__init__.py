"""Policies: networks mapping observations to action chunks."""

from policies.base import ActionChunk, Policy, WeightsMismatch, available, make_policy, register
from policies.flow import FlowChunkPolicy
from policies.mlp import GaussianActor, MLPPolicy, TwinCritic, flatten_obs
import policies.lerobot_chunk  # noqa: F401,E402  (registers `lerobot`)
import policies.onestep  # noqa: F401,E402  (registers `flow_onestep`)
import policies.tiny_vla  # noqa: F401,E402  (registers `tiny_vla`)

__all__ = [
    "ActionChunk", "FlowChunkPolicy", "GaussianActor", "MLPPolicy", "Policy", "TwinCritic", "WeightsMismatch",
    "available", "flatten_obs", "make_policy", "register",
]

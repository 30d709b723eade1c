"""The `Policy` interface: observations in, action chunks out. Pure torch, no I/O.

The actor calls it like this::

    chunk = policy.predict_chunk(obs, forwarded_state=state_at_chunk_start, delay_ticks=d)
    for action in chunk.actions:          # one per control tick, chunk.dt seconds apart
        robot.send_action(action)
    ...
    policy.load_weights(version, arrays)  # between ticks, when the learner publishes
"""

from __future__ import annotations

import abc
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from policies.embedding import FrozenEncoder


class WeightsMismatch(ValueError):
    """Weights that do not fit this policy's architecture (names or shapes differ)."""


@dataclass(frozen=True)
class ActionChunk:
    """`actions[H, A]`: joint targets (rad) for H consecutive ticks, `dt` seconds apart."""

    actions: np.ndarray
    dt: float
    policy_version: int


@dataclass(frozen=True)
class ChunkRequest:
    """One `predict_chunk` call's arguments (a batch of them goes to `Policy.predict_chunks`)."""

    obs: Mapping[str, np.ndarray]
    forwarded_state: np.ndarray | None = None
    prefix: np.ndarray | None = None
    delay_ticks: int = 0


class Policy(abc.ABC):
    """Maps an observation (flat mapping of named arrays) to an action chunk."""

    version: int = -1  # -1 until weights from a learner are loaded
    horizon: int = 1  # actions per chunk (the async runner plans with it)
    # True: the policy's mode (no exploration noise, repeatable); the control loop sets it per
    # episode (evaluation episodes) before asking for that episode's chunks
    deterministic: bool = False
    # the language task, for policies that follow one (VLAs); others ignore it
    instruction: str = ""

    @property
    @abc.abstractmethod
    def architecture(self) -> str:
        """A string naming the shapes; weights are only accepted from the same architecture."""

    @abc.abstractmethod
    def predict_chunk(
        self,
        obs: Mapping[str, np.ndarray],
        *,
        forwarded_state: np.ndarray | None = None,
        prefix: np.ndarray | None = None,
        delay_ticks: int = 0,
    ) -> ActionChunk:
        """Actions for the ticks starting when the chunk will execute. `forwarded_state` is the
        predicted joint state at that tick; `prefix` holds actions already committed for it;
        `delay_ticks` is how many ticks old `obs` will be when the chunk starts (the measured
        inference latency), so a policy can account for acting on a stale observation."""

    def predict_chunks(self, requests: Sequence[ChunkRequest]) -> list[ActionChunk]:
        """Chunks for several requests at once (the policy server batches the requests of several
        actors that arrive together). Default: one by one; policies that can, batch the forward."""
        return [call_policy(self, r.obs, r.forwarded_state, r.prefix, r.delay_ticks) for r in requests]

    @abc.abstractmethod
    def module(self) -> torch.nn.Module:
        """The torch module whose parameters are synced from the learner."""

    def weights(self) -> dict[str, np.ndarray]:
        """The module's state dict as numpy arrays on the CPU: what the learner publishes."""
        return {k: v.detach().cpu().numpy() for k, v in self.module().state_dict().items()}

    def off_cpu(self) -> frozenset[str]:
        """Names in weights() whose tensors live on a device (a GPU): weights() copied them to the
        CPU, so they are private snapshots the weight publisher need not copy again."""
        return frozenset(k for k, v in self.module().state_dict().items() if v.device.type != "cpu")

    def frozen(self) -> frozenset[str]:
        """Names in weights() of parameters that are not trained (requires_grad off)."""
        return frozenset(n for n, p in self.module().named_parameters() if not p.requires_grad)

    def frozen_encoder(self) -> FrozenEncoder | None:
        """The policy's camera encoder when it never changes (a frozen prior's): its embeddings can
        be computed once where frames are produced and stored (policies/embedding.py). None: the
        policy has no frozen encoder (no cameras, or its encoder learns)."""
        return None

    def load_weights(self, version: int, arrays: Mapping[str, np.ndarray]) -> None:
        """Swap in new parameters; on any mismatch raise WeightsMismatch and keep the old ones."""
        current = self.module().state_dict()
        if set(arrays) != set(current):
            missing, extra = sorted(set(current) - set(arrays)), sorted(set(arrays) - set(current))
            raise WeightsMismatch(
                f"weights v{version} do not fit {self.architecture}: missing {missing[:3]}, unexpected {extra[:3]}"
            )
        for k, v in current.items():
            if tuple(arrays[k].shape) != tuple(v.shape):
                raise WeightsMismatch(
                    f"weights v{version}: '{k}' has shape {tuple(arrays[k].shape)}, "
                    f"{self.architecture} expects {tuple(v.shape)}"
                )
        self.module().load_state_dict({k: torch.as_tensor(np.array(a)) for k, a in arrays.items()})
        self.version = version


def check_architecture(version: int, architecture: str, policy: Policy, who: str) -> None:
    """Raise WeightsMismatch when weights published for `architecture` ("" unknown: the shape
    check of `load_weights` decides) are not for `policy`; `who` names the receiver."""
    if architecture and architecture != policy.architecture:
        raise WeightsMismatch(f"weights v{version} are for {architecture}, {who} runs {policy.architecture}")


def camera_frames(obs: Mapping[str, np.ndarray], cameras: tuple[str, ...], who: str) -> np.ndarray | None:
    """The named cameras' frames stacked: [n_cams, H, W, 3] (or [B, n_cams, H, W, 3] for batched
    observations); None without cameras; a missing camera is named."""
    if not cameras:
        return None
    missing = [c for c in cameras if c not in obs]
    if missing:
        raise KeyError(f"{who} needs camera(s) {missing}; the observation has {sorted(obs)}")
    return np.stack([np.asarray(obs[c]) for c in cameras], axis=-4)


def call_policy(
    policy: Policy,
    obs: Mapping[str, np.ndarray],
    forwarded_state: np.ndarray | None,
    prefix: np.ndarray | None,
    delay_ticks: int,
) -> ActionChunk:
    """`predict_chunk`, passing `delay_ticks` only to policies that take it (older or third-party
    policies written before it existed keep working)."""
    takes = _TAKES_DELAY.get(type(policy))
    if takes is None:
        params = inspect.signature(policy.predict_chunk).parameters
        takes = "delay_ticks" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
        _TAKES_DELAY[type(policy)] = takes
    if takes:
        return policy.predict_chunk(obs, forwarded_state=forwarded_state, prefix=prefix, delay_ticks=delay_ticks)
    return policy.predict_chunk(obs, forwarded_state=forwarded_state, prefix=prefix)


_TAKES_DELAY: dict[type, bool] = {}
_REGISTRY: dict[str, Callable[..., Policy]] = {}


def register(name: str) -> Callable[[Callable[..., Policy]], Callable[..., Policy]]:
    """Class decorator: make a policy constructible by name from configs."""

    def deco(cls: Callable[..., Policy]) -> Callable[..., Policy]:
        _REGISTRY[name] = cls
        return cls

    return deco


def make_policy(name: str, **kwargs: object) -> Policy:
    """A policy by its registered name (`@register`), built with `kwargs`; raises KeyError listing the names
    available."""
    if name not in _REGISTRY:
        raise KeyError(f"unknown policy '{name}'; available: {sorted(_REGISTRY)}")
    return _REGISTRY[name](**kwargs)


def available() -> list[str]:
    """The registered policy names, sorted."""
    return sorted(_REGISTRY)

"""The algorithm seam: the `Learner` owns ingest, the store, the rate limiter, weight publishing,
checkpoints, metrics and stop rules; an `Algorithm` owns the math. The learner calls it so:

    algo = build_algorithm("sac", SACConfig(...), PolicySpec(...))   # no I/O
    limiter = SampleToInsertRatio(algo.config.utd_ratio, algo.config.warmup_steps, ...)
    sampler = Sampler(store, algo.config.batch_size, mix)            # the batch it needs
    while running:
        ingest()                                    # transitions -> store (durable, acked)
        if limiter.can_update():
            metrics = algo.update(sampler.get())    # one gradient step; {"losses/...": float}
            if updates % publish_every == 0:
                publish(Weights(version, algo.policy_weights(), algo.architecture))
    checkpoint.save(algo)                           # algo.modules() and algo.optimizers()

A batch maps `obs/<key>`, `next_obs/<key>`, `action` (joint targets, rad, as executed),
`reward`, `terminated`, `truncated`, `success` to arrays with a leading batch dimension.

Adding an algorithm: a folder `algorithms/<name>/` with `config.py` (a dataclass deriving from
`AlgoConfig`, one comment per field) and `learning.py` (the `Algorithm`, registered with
`@register("<name>", ConfigClass)`; its `__init__.py` imports it), and `configs/algo/<name>.yaml`.
The folder is found by `_load()` (every subpackage is imported): nothing else lists it.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from robo_async.buffer.her import HerStrategy, Relabel
from robo_async.transport.options import as_choices

if TYPE_CHECKING:
    from policies.base import Policy
    from policies.embedding import FrozenEncoder
    from policies.mlp import MLPPolicy


@dataclass(frozen=True)
class AlgoConfig:
    """What every algorithm's config has: how much data it needs and how fast it may learn."""

    batch_size: int = 256
    utd_ratio: float = 1.0  # learner updates per environment step (the rate limiter)
    warmup_steps: int = 1000  # transitions in the store before the first update
    limiter_slack: int = 512  # env steps as-fast-as-possible actors may run ahead of the update ratio
    limit_to_data: bool = True  # updates wait for env steps (utd_ratio); False: as fast as the learner can
    max_version_lag: int | None = None  # drop online transitions from policies more than this many versions old
    # human-in-the-loop corrections (rows an operator drove: `intervention` > 0; the interventions
    # table holds them, buffer.mix draws it RLPD-style)
    dagger_weight: float = 0.0  # HG-DAgger: BC loss toward the operator's actions, this weight (0: off; sac, qc)
    intervention_penalty: float = 0.0  # RLIF: this is taken off the reward of each takeover's first tick (0: off)
    # hindsight relabelling of goal-conditioned tasks (task=fetch; robo_async/buffer/her.py), single transitions
    her: HerStrategy = HerStrategy.none  # future | final: goals the episode achieved replace the desired one
    her_ratio: float = 0.8  # share of each batch relabelled (0.8: HER's future with k = 4)
    her_threshold: float | None = None  # a goal is reached within this distance (m); None: the env's own

    def __post_init__(self) -> None:
        as_choices(self, "algo")
        for key in ("dagger_weight", "intervention_penalty"):
            v = getattr(self, key)
            if not math.isfinite(v) or v < 0:
                raise ValueError(f"algo.{key} must be a finite number >= 0 (0: off), not {v}")

    def relabelling(self) -> Relabel | None:
        """The sampler's HER settings (None without `algo.her`); the threshold must be resolved."""
        if self.her is HerStrategy.none:
            return None
        if self.her_threshold is None:
            raise ValueError("algo.her_threshold is not resolved (the plan reads it from the task's env)")
        return Relabel(HerStrategy(self.her), self.her_threshold, self.her_ratio)


@dataclass(frozen=True)
class CriticsConfig(AlgoConfig):
    """What an algorithm with Q critics has: an ensemble (RLPD, REDQ; `algo=rlpd` sets them for SAC)."""

    critics: int = 2  # Q heads in the ensemble (2: twin critics)
    critic_subset: int = 2  # members drawn at random for each target's min (>= critics: all, clipped double Q)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.critics < 1 or self.critic_subset < 1:
            raise ValueError(
                f"algo.critics must be >= 1 and algo.critic_subset >= 1, not {self.critics} and {self.critic_subset}"
            )


def hil_rewards(rewards: np.ndarray, interventions: np.ndarray | None, penalty: float) -> np.ndarray:
    """RLIF (Luo et al. 2023): an operator taking over says the policy was going wrong; the first
    tick of each takeover gets `-penalty` (rows or [n, H] windows alike)."""
    if not penalty or interventions is None:
        return rewards
    from robo_async.transport.wire import TAKEOVER

    return (rewards - penalty * (interventions == TAKEOVER)).astype(np.float32)


def refuse_dagger(config: AlgoConfig, algo: str) -> None:
    if config.dagger_weight:
        raise ValueError(
            f"algo.dagger_weight is for sac and qc; {algo} learns from corrections through "
            f"buffer.mix (the interventions table)"
        )


@dataclass(frozen=True)
class PolicySpec:
    """The policy the actors run, as plain values: what an algorithm builds and trains."""

    name: str  # policy registry name (policies.base.register)
    obs_keys: tuple[str, ...]
    obs_dims: tuple[int, ...]
    action_low: tuple[float, ...]  # joint limits (rad)
    action_high: tuple[float, ...]
    hidden: tuple[int, ...] = (256, 256)
    action_mode: str = "delta"
    delta_scale: float = 0.15  # rad per tick, for action_mode="delta"
    obs_scale: Mapping[str, float] = field(default_factory=dict)
    dt: float = 1 / 30
    options: Mapping[str, object] = field(default_factory=dict)  # the policy's other keys (horizon, path, ...)

    def flow_kwargs(self) -> dict[str, object]:
        """Constructor arguments of the chunk policies (policies.flow) built from this spec."""
        skip = ("path", "inference_delay_ms", "type")
        return {
            "obs_keys": self.obs_keys,
            "obs_dims": self.obs_dims,
            "action_low": self.action_low,
            "action_high": self.action_high,
            "hidden": self.hidden,
            "dt": self.dt,
            "obs_scale": dict(self.obs_scale),
            "action_mode": self.action_mode,
            **{k: v for k, v in self.options.items() if k not in skip},
        }


def mlp_policy(spec: PolicySpec, algo: str) -> MLPPolicy:
    """The one-step `policy=mlp` an algorithm trains (SAC, BC); other policies are refused here."""
    from policies.mlp import MLPPolicy

    if spec.name != "mlp":
        raise ValueError(
            f"algo={algo} trains policy=mlp, not policy={spec.name}: chunk policies learn online with "
            f"policy=flow algo=qc, or by behaviour cloning with `robo-async bc policy={spec.name}`"
        )
    return MLPPolicy(
        spec.obs_keys,
        spec.obs_dims,
        spec.action_low,
        spec.action_high,
        hidden=spec.hidden,
        action_mode=spec.action_mode,
        delta_scale=spec.delta_scale,
        obs_scale=spec.obs_scale,
        cameras=tuple(spec.options.get("cameras") or ()),  # type: ignore[arg-type]
        image_size=int(spec.options.get("image_size", 64)),
        obs_norm=bool(spec.options.get("obs_norm", False)),
    )  # type: ignore[arg-type]


class Algorithm(abc.ABC):
    """The math of one learning method: the networks, their optimisers and one update step; no
    I/O. The `Learner` drives it (see the module's docstring):

        if limiter.can_update():
            metrics = algo.update(sampler.get())    # batches shaped by window / lookback / tables
            publish(Weights(version, algo.policy_weights(), algo.architecture))

    The class attributes tell the learner what batches to sample and how actors must act."""

    config: AlgoConfig
    policy: Policy  # the policy it trains and publishes (what actors run, unless `acting_policy` says otherwise)
    tables: tuple[str, ...] = ()  # the store tables it learns from (empty: the configured mix)
    window: int = 1  # > 1: batches are windows of this many consecutive transitions (Sampler(window=))
    lookback: int = 0  # > 0: windows also carry a lagged observation and the actions since (Sampler(lookback=))
    # True: asynchronous actors execute every action of every chunk (actor.replan=auto -> end)
    whole_chunks: bool = False
    successful_only: bool = False  # online windows only from episodes that succeeded (rejection sampling)
    supports_device: bool = False  # True: update() runs on `self.device` (a GPU when `learner.device` picks one)
    device: torch.device = torch.device("cpu")

    def to_device(self, device: torch.device | str) -> None:
        """Move every module (and so the optimisers' parameters) to `device`; update() then puts
        batches there. Published weights always come back as CPU numpy arrays."""
        self.device = torch.device(device)
        for m in self.modules().values():
            m.to(self.device)

    def tensor(self, x: np.ndarray) -> torch.Tensor:
        """A batch array as a tensor on this algorithm's device."""
        return torch.as_tensor(x, device=self.device)

    @staticmethod
    def acting_policy(config: AlgoConfig, policy: str) -> tuple[str, dict[str, object]] | None:
        """What the actors run when it is not `policy=<policy>` itself: (policy name, extra options).
        E.g. `algo=qc` trains a flow policy on the learner and publishes its one-step actor."""
        return None

    @property
    def architecture(self) -> str:
        """The published policy's architecture: actors refuse weights of another. Default: the
        architecture of `self.policy`, the policy it trains and publishes."""
        return self.policy.architecture

    @abc.abstractmethod
    def update(self, batch: Mapping[str, np.ndarray]) -> dict[str, float]:
        """One learning step on a sampled batch; namespaced metrics (`losses/...`)."""

    def policy_weights(self) -> dict[str, np.ndarray]:
        """The actors' policy parameters, as published (and as `eval` loads from checkpoints).
        Default: `self.policy`'s weights."""
        return self.policy.weights()

    def frozen_weights(self) -> frozenset[str]:
        """Names in policy_weights() this algorithm never trains (a frozen backbone under a trained
        head): the weight publisher neither copies nor compares them for each delta push. Default:
        the policy's parameters with requires_grad off. An algorithm that changes such a parameter
        anyway must override this."""
        policy = getattr(self, "policy", None)
        return policy.frozen() if hasattr(policy, "frozen") else frozenset()

    def frozen_encoder(self) -> FrozenEncoder | None:
        """The camera encoder this algorithm never trains, when its update can take the stored
        embeddings (`obs/embedding`) instead of frames: the learner then has every stored row
        embedded by it and samples no frames (buffer/embeddings.py). Default: none."""
        return None

    @abc.abstractmethod
    def modules(self) -> dict[str, nn.Module]:
        """Everything with parameters, by name, for checkpoints; `actor` is the published policy."""

    @abc.abstractmethod
    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """Optimisers by name, for checkpoints."""


def soft_update(net: nn.Module, target: nn.Module, tau: float) -> None:
    """Polyak averaging of a target network: target <- (1 - tau) target + tau net."""
    with torch.no_grad():
        torch._foreach_lerp_(list(target.parameters()), list(net.parameters()), tau)


_REGISTRY: dict[str, tuple[Callable[[AlgoConfig, PolicySpec], Algorithm], type[AlgoConfig]]] = {}


def register(name: str, config_cls: type[AlgoConfig]) -> Callable:
    """Class decorator: `algo=<name>` builds `cls(config_cls(**algo keys), policy_spec)`."""

    def deco(cls: Callable[[AlgoConfig, PolicySpec], Algorithm]) -> Callable[[AlgoConfig, PolicySpec], Algorithm]:
        _REGISTRY[name] = (cls, config_cls)
        return cls

    return deco


def algorithms() -> list[str]:
    _load()
    return sorted(_REGISTRY)


def config_class(name: str) -> type[AlgoConfig]:
    _load()
    if name not in _REGISTRY:
        raise KeyError(f"unknown algorithm '{name}'; available: {sorted(_REGISTRY)}")
    return _REGISTRY[name][1]


def build_algorithm(name: str, config: AlgoConfig, policy: PolicySpec, *, trained: Policy | None = None) -> Algorithm:
    """`algo=<name>` for the policy `policy` describes; `trained`: a policy already built by the
    caller for it to train (`robo-async bc` clones LeRobot policies and the tiny VLA so)."""
    _load()
    if name not in _REGISTRY:
        raise KeyError(f"unknown algorithm '{name}'; available: {sorted(_REGISTRY)}")
    if trained is None:
        return _REGISTRY[name][0](config, policy)
    return _REGISTRY[name][0](config, policy, trained)  # type: ignore[call-arg]


def whole_chunks(name: str) -> bool:
    """Whether `algo=<name>` wants every action of a chunk executed (a critic of whole chunks)."""
    _load()
    return bool(getattr(_REGISTRY[name][0], "whole_chunks", False))


def acting_policy(name: str, config: AlgoConfig, policy: str) -> tuple[str, dict[str, object]] | None:
    """(policy name, extra options) the actors of `algo=<name>` run, or None: `policy` itself."""
    _load()
    return _REGISTRY[name][0].acting_policy(config, policy)  # type: ignore[attr-defined]


def _load() -> None:
    """Import every algorithm folder (each subpackage of `robo_async.learner.algorithms`); each
    registers itself with `@register`, so a new algorithm needs no line here."""
    import importlib
    import pkgutil

    import robo_async.learner.algorithms as package

    for info in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
        if info.ispkg:
            importlib.import_module(info.name)

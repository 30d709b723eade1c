"""SAC's hyperparameters (`configs/algo/sac.yaml` selects and overrides them)."""

from __future__ import annotations

from dataclasses import dataclass

from robo_async.learner.algorithms.base import CriticsConfig


@dataclass(frozen=True)
class SACConfig(CriticsConfig):
    """`algo=sac`: SAC's discount, target rate, learning rates, temperature and critic size."""

    gamma: float = 0.9  # discount per control tick
    tau: float = 0.01  # Polyak factor for the target critics
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    alpha_lr: float = 3e-4
    init_alpha: float = 0.1  # initial entropy temperature
    target_entropy: float | None = None  # None: -action_dim
    hidden: tuple[int, ...] = (256, 256)  # critic layers (the actor's come from the policy config)
    # RLPD (Ball et al. 2023; `algo=rlpd` sets it with algo.critics and algo.critic_subset)
    critic_layer_norm: bool = False  # LayerNorm after each critic hidden layer (keeps Q bounded at high UTD)

    # behaviour cloning of the demonstrations (the demos table), only where the critics rate the demonstrated action
    # above the policy's own: the Q filter of Nair et al. 2018 (0: off)
    demo_bc_weight: float = 0.0

    augment_pad: int = 4  # camera frames (policy.cameras): DrQ random shift by up to this many pixels (0: off)

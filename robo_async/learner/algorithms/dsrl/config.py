"""DSRL's hyperparameters (`configs/algo/dsrl.yaml`)."""

from __future__ import annotations

from dataclasses import dataclass

from robo_async.learner.algorithms.base import CriticsConfig


@dataclass(frozen=True)
class DSRLConfig(CriticsConfig):
    """`algo=dsrl`: DSRL's critics, noise actor and temperature. Fewer updates per env step than
    SAC by default (`utd_ratio` 0.25: one chunk-level update per few ticks)."""

    gamma: float = 0.97  # discount per control tick
    tau: float = 0.005
    lr: float = 3e-4
    init_alpha: float = 0.05  # entropy temperature of the noise actor
    target_entropy: float | None = None  # None: -(H * A) / 2
    noise_bound: float = 1.5  # the noise actor picks z in [-b, b]^(H x A) (the flow saw N(0, 1) in training)
    # the noise critic learns on the batch's observations with the actor's noise plus this fraction
    # of them with uniform noise (1.0: each observation twice, as the paper; 0.25 costs 0.6x the compute)
    noise_uniform: float = 1.0
    noise_hidden: tuple[int, ...] = (128, 128)  # the tiny actor: the only weights that travel
    # a LeRobot policy that takes no noise (ACT): the actor is a residual head, its z scaled by this
    # (normalized action units) and added to the frozen policy's chunk
    residual_scale: float = 0.1
    critic_hidden: tuple[int, ...] = (256, 256, 256)
    utd_ratio: float = 0.25
    batch_size: int = 256
    warmup_steps: int = 1000

"""Q-chunking's hyperparameters (`configs/algo/qc.yaml` selects and overrides them)."""

from __future__ import annotations

from dataclasses import dataclass

from robo_async.learner.algorithms.base import CriticsConfig


@dataclass(frozen=True)
class QCConfig(CriticsConfig):
    """`algo=qc`: Q-chunking's critic, one-step actor and BC flow prior, and the delays they
    train for."""

    gamma: float = 0.97  # discount per control tick (a chunk of H ticks is discounted by gamma^H)
    tau: float = 0.005  # Polyak factor for the target critics
    lr: float = 3e-4  # critic, one-step actor and flow policy
    alpha: float = 10.0  # weight of distillation to the BC flow policy (FQL's alpha; higher: closer to BC)
    best_of_n: int = 1  # > 1: the actor draws n chunks and executes the highest-Q one (the critic travels too)
    critic_hidden: tuple[int, ...] = (256, 256, 256)
    actor_hidden: tuple[int, ...] = (256, 256)
    distill_only_updates: int = 0  # first updates train BC + distillation only (a warm start stays on BC)
    bc_flow: bool = True  # keep training the flow policy by BC on the sampled windows (False: frozen prior)
    augment_pad: int = 4  # camera frames: DrQ random shift by up to this many pixels (0: off)
    utd_ratio: float = 0.25  # updates per env step: one chunk-level update per few ticks
    batch_size: int = 256
    # delay-consistent acting: an asynchronous actor asks for a chunk d ticks before it starts,
    # from an observation d ticks old with its state forwarded (async_forward); the one-step actor
    # and the flow prior learn from such inputs for d up to this many ticks (0: the chunk's own
    # first observation, as inline and sync actors ask). None: 0 when every actor runs inline or
    # sync, else the larger of policy.bc.max_delay and the injected latency in ticks plus 2.
    max_delay: int | None = None
    warmup_steps: int = 2000

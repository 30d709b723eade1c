"""Behaviour cloning's hyperparameters: `algo=bc` (`BCConfig`, online through the learner) and a
policy's `policy.bc` section (`BCOptions`, what `robo-async bc` records and trains with)."""

from __future__ import annotations

from dataclasses import dataclass

from robo_async.learner.algorithms.base import AlgoConfig


@dataclass(frozen=True)
class BCConfig(AlgoConfig):
    """`algo=bc`: behaviour cloning on the learner from the `demos` and `interventions`
    tables, as fast as the learner can (no actor data needed). `robo-async bc` builds one from
    `BCOptions` (`offline_config`)."""

    lr: float = 1e-3
    tables: tuple[str, ...] = ("demos", "interventions")  # what it imitates (never its own rollouts)
    warmup_steps: int = 0  # demonstrations are there before any actor runs
    limit_to_data: bool = False  # demonstrations need no new env steps: learn as fast as it can
    # chunk policies (flow, tiny_vla): delay-consistent training, as `policy.bc` sets for `robo-async bc`
    max_delay: int = 12  # ticks: conditioning offset by 0..max_delay (windows with this lookback)
    prefix_noise: float = 0.0  # REMAC-style: perturb the committed prefix given to the network (std, normalized units)
    prefix_hide: float = 0.0  # REMAC-style: hide each committed prefix position with this probability
    seed: int = 0  # the delays and prefix styles drawn per window
    normalize: bool = True  # chunk policies: fit input/action normalisation and gripper levels on the demonstrations
    augment_pad: int = 4  # camera frames: DrQ random shift by up to this many pixels (0: none)


@dataclass(frozen=True)
class BCOptions:
    """`policy.bc`: how `robo-async bc` gets demonstrations and trains a chunk policy on them.
    Each policy's config sets its own defaults (e.g. the tiny VLA records 60 demos per task)."""

    demos: int = 200  # scripted-expert episodes to record (task.episode_ticks each)
    from_store: str | None = None  # or train on a table of this replay store (e.g. teleop demonstrations)
    table: str = "demos"  # ... this table
    expert_max_step: float = 0.03  # rad per tick: how fast the scripted demonstrator moves (reach)
    steps: int = 10000  # gradient steps
    batch: int = 256  # windows per step
    lr: float = 1e-3  # Adam learning rate
    max_delay: int = 12  # delay-consistent training: conditioning offset by 0..max_delay ticks
    prefix_noise: float = 0.0  # REMAC-style: perturb the committed prefix given to the network (std, normalized units)
    prefix_hide: float = 0.0  # REMAC-style: hide each committed prefix position with this probability
    normalize: bool = True  # fit input/action normalisation and gripper levels on the demonstrations first


def offline_config(options: BCOptions, seed: int = 0) -> BCConfig:
    """`algo=bc` as `robo-async bc` runs it from a policy's `policy.bc` options."""
    return BCConfig(
        lr=options.lr,
        batch_size=options.batch,
        max_delay=options.max_delay,
        prefix_noise=options.prefix_noise,
        prefix_hide=options.prefix_hide,
        seed=seed,
        normalize=options.normalize,
    )

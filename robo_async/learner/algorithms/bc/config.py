"""Behaviour cloning's hyperparameters (`configs/algo/bc.yaml`)."""

from __future__ import annotations

from dataclasses import dataclass

from robo_async.learner.algorithms.base import AlgoConfig


@dataclass(frozen=True)
class BCConfig(AlgoConfig):
    lr: float = 1e-3
    tables: tuple[str, ...] = ("demos", "interventions")  # what it imitates (never its own rollouts)
    warmup_steps: int = 0  # demonstrations are there before any actor runs
    limit_to_data: bool = False  # demonstrations need no new env steps: learn as fast as it can

"""Filtered flow fine-tuning's hyperparameters (`configs/algo/filtered.yaml`)."""

from __future__ import annotations

from dataclasses import dataclass

from robo_async.learner.algorithms.base import AlgoConfig


@dataclass(frozen=True)
class FilteredConfig(AlgoConfig):
    """`algo=filtered`: flow-matching BC on successful online episodes, demonstrations and
    interventions, each table with its loss weight."""

    lr: float = 3e-4
    tables: tuple[str, ...] = ("online", "demos", "interventions")  # successful online episodes, demos, corrections
    online_weight: float = 1.0  # loss weight of windows from the policy's own successful episodes
    demo_weight: float = 1.0
    intervention_weight: float = 2.0  # human corrections count more (Hi-ORS weights them up)
    max_delay: int = 4  # delay-consistent BC: a committed prefix of 0..max_delay ticks (RTC), as `robo-async bc`
    utd_ratio: float = 0.25
    batch_size: int = 256
    warmup_steps: int = 500

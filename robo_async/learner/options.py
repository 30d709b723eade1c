"""`learner:` and `budget:` config sections. The builders turn them (with the algorithm, store and
policy) into a `LearnerConfig` (config.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from robo_async.learner.metrics import WandbOptions
from robo_async.transport.weights import PushConfig


@dataclass(frozen=True)
class LearnerOptions:
    """`learner`: publishing, checkpoints, logging and the device of the learner process."""

    publish_every: int = 10  # updates between weight publications
    checkpoint_every_s: float = 30.0  # seconds between checkpoints
    log_every_s: float = 1.0  # seconds between metric lines
    threads: int = 1  # torch CPU threads in the learner
    # pushes to the actors, streamed in parts, each array checked (crc32) before a swap
    weights: PushConfig = field(default_factory=PushConfig)
    # a store holding rows embedded by another frozen encoder than the run's (algo=dsrl on a pixel prior):
    # refuse (at start, naming both versions) | skip (those rows are left out of training)
    stale_embeddings: str = "refuse"
    # auto (bf16 mixed precision where the device computes bf16 fast: a CPU with AMX/AVX512-BF16, a GPU with bf16;
    # else fp32) | fp32 | bf16; applies to qc, dsrl, filtered
    precision: str = "auto"
    # auto (a GPU when there is one, for algorithms that support it: qc, dsrl, filtered) | cpu | cuda | cuda:1
    device: str = "auto"
    # learner ranks, 1 to 64 (data parallelism, launcher=local or ray): gradients averaged before every optimiser
    # step; algo.batch_size is per rank; rank 0 ingests, publishes and checkpoints
    replicas: int = 1
    # Weights & Biases beside TensorBoard (the same keys): learner.wandb.project=<name> turns it on;
    # learner.wandb.mode=offline needs no network (`wandb sync <run dir>/wandb/offline-run-*` later)
    wandb: WandbOptions = field(default_factory=WandbOptions)


@dataclass(frozen=True)
class BudgetOptions:
    """`budget`: when the training phase stops (whichever limit comes first)."""

    seconds: float | None = 600  # wall-clock limit of the training phase
    env_steps: int | None = None  # optional limit on env steps

"""`learner:` and `budget:` config sections, and the choices their keys take. `LearnerConfig.from_options`
(config.py) turns them (with the algorithm, store and policy) into what the learner receives: this
section embedded, plus the values derived from it (`device` and `precision` resolved)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from robo_async.learner.metrics import WandbOptions
from robo_async.transport.options import as_choices
from robo_async.transport.weights import PushConfig


class StaleEmbeddings(StrEnum):
    """`learner.stale_embeddings`: what the learner does with rows another frozen encoder embedded."""

    refuse = "refuse"  # at start, naming both versions
    skip = "skip"  # those rows are left out of training


class Precision(StrEnum):
    """A resolved precision: what the learner's update runs in."""

    fp32 = "fp32"
    bf16 = "bf16"  # forward passes under bf16 autocast (weights and optimiser state fp32)


class PrecisionChoice(StrEnum):
    """`learner.precision` as asked: `auto` (bf16 where the device computes it fast) or a precision."""

    auto = "auto"
    fp32 = "fp32"
    bf16 = "bf16"


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
    stale_embeddings: StaleEmbeddings = StaleEmbeddings.refuse
    # auto (bf16 mixed precision where the device computes bf16 fast: a CPU with AMX/AVX512-BF16, a GPU with bf16;
    # else fp32) | fp32 | bf16; applies to qc, dsrl, filtered
    precision: PrecisionChoice = PrecisionChoice.auto
    # auto (a GPU when there is one, for algorithms that support it: qc, dsrl, filtered) | cpu | cuda | cuda:1
    device: str = "auto"
    # learner ranks, 1 to 64 (data parallelism, launcher=local or ray): gradients averaged before every optimiser
    # step; algo.batch_size is per rank; rank 0 ingests, publishes and checkpoints
    replicas: int = 1
    # Weights & Biases beside TensorBoard (the same keys): learner.wandb.project=<name> turns it on;
    # learner.wandb.mode=offline needs no network (`wandb sync <run dir>/wandb/offline-run-*` later)
    wandb: WandbOptions = field(default_factory=WandbOptions)

    def __post_init__(self) -> None:
        as_choices(self, "learner")


@dataclass(frozen=True)
class BudgetOptions:
    """`budget`: when the training phase stops (whichever limit comes first)."""

    seconds: float | None = 600  # wall-clock limit of the training phase
    env_steps: int | None = None  # optional limit on env steps

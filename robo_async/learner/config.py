"""`LearnerConfig`: everything one learner process needs. It embeds the `learner:` section as
configured (`options`, `LearnerOptions` in options.py) and adds what is derived from it and the rest
of the run: `from_options` resolves `learner.device` and `learner.precision` (`auto` decided: the
`device` and `precision` fields, never `auto`), and takes the plan's parts (run directory,
addresses, policy, algorithm, store, budget) as the launch layer made them (`launch/builders.py`).
The learner (`learner.py`) and its replicas (`replicas.py`) read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from robo_async.buffer.lmdb_store import StoreConfig
from robo_async.buffer.sampler import DEFAULT_MIX, PREFETCH
from robo_async.learner.algorithms import AlgoConfig, PolicySpec
from robo_async.learner.algorithms.sac import SACConfig
from robo_async.learner.options import BudgetOptions, LearnerOptions, Precision, PrecisionChoice
from robo_async.transport.options import TransportOptions, as_choices


@dataclass(frozen=True)
class LearnerConfig:
    """Everything one learner needs (built by `from_options` from the run config): its run
    directory and addresses, the policy and algorithm, the store and batch mix, the `learner:`
    section (`options`: how often it publishes, logs and checkpoints, its replicas, W&B, ...), the
    device and precision it resolved to, and when it stops."""

    run_dir: str
    data_address: str  # e.g. tcp://127.0.0.1:0 (0: any free port)
    weights_address: str
    policy: PolicySpec  # what the actors run
    algo: str = "sac"  # a registered algorithm (algorithms/<name>/)
    algo_config: AlgoConfig = SACConfig()
    store: StoreConfig = StoreConfig()
    mix: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_MIX))  # buffer.mix
    prefetch: int = PREFETCH  # batches assembled ahead on a background thread (buffer.prefetch)
    task: str = "reach"
    spec_signature: dict = field(default_factory=dict)
    config_yaml: str = ""  # the resolved run config, stored in every checkpoint
    options: LearnerOptions = LearnerOptions()  # the `learner:` section as configured
    status_every_s: float = 0.02
    budget_s: float | None = None  # budget.seconds (None: no limit)
    budget_env_steps: int | None = None  # budget.env_steps
    stop_at_success: float | None = 0.9  # stop once the success rate over the window reaches this
    success_window: int = 20
    seed: int = 0
    resume: bool = False
    count_stored: bool = False  # online data already in the store counts as env steps (resume without checkpoint)
    device: str = "cpu"  # torch device of the algorithm's update: `options.device` resolved (never auto)
    # the update's precision: `options.precision` resolved (never auto); bf16: forward passes under bf16 autocast
    # (weights, optimiser state fp32)
    precision: Precision = Precision.fp32
    tensorboard: bool = True
    # ZMQ queues sized in bytes: about this much per peer (high-water marks)
    queue_mb: float = TransportOptions.queue_mb
    message_bytes: int = 65536  # the expected size of one actor batch message (sizes the data queue)
    # larger frames from an actor are refused by ZMQ (the sender is disconnected)
    max_message_mb: float = TransportOptions.max_message_mb
    keys_dir: str | None = None  # CURVE keys (`robo-async keys`): only listed actor keys connect
    max_actors: int = 1024  # distinct actor ids this learner keeps state for (bounded per-peer state)
    restarted: int = 0  # supervised restarts before this start: the run's clock and budget continue

    def __post_init__(self) -> None:
        as_choices(self, "learner")

    @classmethod
    def from_options(cls, options: LearnerOptions, budget: BudgetOptions, **plan: Any) -> LearnerConfig:
        """The learner of a run: `options` as configured, `learner.device` and `learner.precision`
        resolved (`resolve_device`, `resolve_precision`), the budget's limits, and `plan`: the other
        fields as the launch layer made them (run_dir, addresses, policy, algo, store, ...). A
        ValueError names a key that cannot run here."""
        device = resolve_device(options.device)
        return cls(
            **plan,
            options=options,
            budget_s=budget.seconds,
            budget_env_steps=budget.env_steps,
            device=device,
            precision=resolve_precision(options.precision, device),
        )


def resolve_device(name: str) -> str:
    """`learner.device`: auto picks the first GPU when torch sees one, else the CPU; a ValueError
    names a device torch does not know, or a GPU it does not see."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(name)
    except RuntimeError as e:
        raise ValueError(f"learner.device '{name}' is not a torch device ({e}); use auto, cpu or cuda") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"learner.device={name} but torch sees no GPU here; use auto or cpu")
    return name


def resolve_precision(name: str, device: str) -> Precision:
    """`learner.precision`: auto is bf16 mixed precision where the device computes bf16 fast (a GPU
    with bf16, a CPU with AMX or AVX512-BF16 through oneDNN), else fp32; a ValueError names any
    other value."""
    import torch

    if name not in tuple(PrecisionChoice):
        raise ValueError(f"learner.precision is auto, fp32 or bf16, not {name!r}")
    if name != PrecisionChoice.auto:
        return Precision(name)
    if device.startswith("cuda"):
        return Precision.bf16 if torch.cuda.is_bf16_supported() else Precision.fp32
    fast = torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    return Precision.bf16 if fast else Precision.fp32

"""`LearnerConfig`: everything one learner process needs, as plain values. The launch layer builds it
from the run config (`launch/builders.py`, from the `learner:` and `budget:` sections in `options.py`
and the algorithm, store and policy); the learner (`learner.py`) and its replicas (`replicas.py`) read it."""

from __future__ import annotations

from dataclasses import dataclass, field

from robo_async.buffer.lmdb_store import StoreConfig
from robo_async.learner.algorithms import AlgoConfig, PolicySpec
from robo_async.learner.algorithms.sac import SACConfig
from robo_async.learner.metrics import WandbOptions
from robo_async.transport.weights import PushConfig


@dataclass(frozen=True)
class LearnerConfig:
    """Everything one learner needs, as plain values (built by the launch layer from the run
    config): its run directory and addresses, the policy and algorithm, the store and batch mix,
    how often it publishes, logs and checkpoints (seconds), and when it stops."""

    run_dir: str
    data_address: str  # e.g. tcp://127.0.0.1:0 (0: any free port)
    weights_address: str
    policy: PolicySpec  # what the actors run
    algo: str = "sac"  # a registered algorithm (algorithms/<name>/)
    algo_config: AlgoConfig = SACConfig()
    store: StoreConfig = StoreConfig()
    mix: dict = field(default_factory=lambda: {"online": 0.5, "demos": 0.25, "interventions": 0.25})
    prefetch: int = 2  # batches assembled ahead on a background thread
    task: str = "reach"
    spec_signature: dict = field(default_factory=dict)
    config_yaml: str = ""  # the resolved run config, stored in every checkpoint
    publish_every: int = 10  # updates between weight publications
    status_every_s: float = 0.02
    checkpoint_every_s: float = 30.0
    log_every_s: float = 1.0
    budget_s: float | None = None
    budget_env_steps: int | None = None
    stop_at_success: float | None = 0.9  # stop once the success rate over the window reaches this
    success_window: int = 20
    seed: int = 0
    resume: bool = False
    count_stored: bool = False  # online data already in the store counts as env steps (resume without checkpoint)
    threads: int = 1
    device: str = "cpu"  # torch device of the algorithm's update (resolved from learner.device)
    # fp32 | bf16: the update's forward passes under bf16 autocast (weights, optimiser state fp32)
    precision: str = "fp32"
    tensorboard: bool = True
    wandb: WandbOptions = WandbOptions()  # learner.wandb, as configured (metrics.py)
    push: PushConfig = PushConfig()  # weight pushes: fp32/fp16, delta, parts (transport/weights.py)
    queue_mb: float = 64.0  # ZMQ queues sized in bytes: about this much per peer (high-water marks)
    message_bytes: int = 65536  # the expected size of one actor batch message (sizes the data queue)
    max_message_mb: float = 64.0  # larger frames from an actor are refused by ZMQ (the sender is disconnected)
    keys_dir: str | None = None  # CURVE keys (`robo-async keys`): only listed actor keys connect
    max_actors: int = 1024  # distinct actor ids this learner keeps state for (bounded per-peer state)
    # refuse | skip: stored rows another frozen encoder embedded (learner.stale_embeddings)
    stale_embeddings: str = "refuse"
    restarted: int = 0  # supervised restarts before this start: the run's clock and budget continue
    replicas: int = 1  # ranks of this learner (learner.replicas; replicas.py): rank 0 samples replicas x batch_size

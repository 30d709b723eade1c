"""Learner data parallelism (`learner.replicas=N`): N ranks of one learner, gradients averaged
before every optimiser step, so N ranks on per-rank batches of `algo.batch_size` learn as one
process on the combined batch of N x batch_size would (the DDP convention).

Rank 0 is the learner as ever (ingest, store, rate limiter, publishing, checkpoints, metrics); it
samples the combined batch and sends each rank its shard. Ranks >= 1 ("replicas") hold no sockets
and no store: they receive shards, run the same `Algorithm.update`, and write nothing. Every rank
runs in lockstep on one small control message per step from rank 0 (idle, update, stop):

    group = ReplicaGroup(Rendezvous.from_env(), algorithm.device).join()   # torchrun's variables
    group.start(algorithm)          # rank 0's weights and optimiser state to all; gradients averaged
    rank 0:    shard = group.send(combined_batch); algorithm.update(shard) ... group.stop()
    replicas:  while (shard := group.receive()) is not None: algorithm.update(shard)

Shards cross torch.distributed (gloo; gradients over NCCL where the update runs on a GPU) in the
wire format of `shards.py`: nothing is pickled.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from robo_async.learner import checkpoint
from robo_async.learner.algorithms import Algorithm, build_algorithm
from robo_async.learner.config import LearnerConfig
from robo_async.learner.shards import (
    HEADER_MAX,
    Layout,
    ShardError,
    decode_header,
    encode_header,
    layout_of,
    pack,
    unpack,
)

log = logging.getLogger(__name__)

MAX_REPLICAS = 64
TIMEOUT_S = 600.0  # a collective (or the rendezvous) waiting longer fails; the supervisor's liveness acts first
KEEPALIVE_S = 1.0  # rank 0 sends an idle message at least this often, so waiting replicas hear it is alive
IDLE, UPDATE, STOP = 0, 1, 2  # control messages


@dataclass(frozen=True)
class Rendezvous:
    """Where the ranks meet and who this one is: torchrun's variables (MASTER_ADDR, MASTER_PORT,
    RANK, WORLD_SIZE, LOCAL_RANK), set by the local launcher for each rank it starts."""

    addr: str
    port: int
    rank: int
    world: int
    local_rank: int = 0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Rendezvous:
        env = os.environ if environ is None else environ
        values: dict[str, int] = {}
        for key in ("MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
            raw = env.get(key, "0" if key == "LOCAL_RANK" else None)
            if raw is None:
                raise ValueError(f"learner replicas need the environment variable {key} (as torchrun sets it)")
            try:
                values[key] = int(raw)
            except ValueError:
                raise ValueError(f"environment variable {key}={raw!r} is not an integer") from None
        rdv = cls(
            env.get("MASTER_ADDR", "127.0.0.1"),
            values["MASTER_PORT"],
            values["RANK"],
            values["WORLD_SIZE"],
            values["LOCAL_RANK"],
        )
        if not (0 <= rdv.rank < rdv.world <= MAX_REPLICAS) or not 0 < rdv.port < 65536:
            raise ValueError(
                f"RANK={rdv.rank} WORLD_SIZE={rdv.world} MASTER_PORT={rdv.port}: need "
                f"0 <= RANK < WORLD_SIZE <= {MAX_REPLICAS} and a port"
            )
        return rdv

    def env(self) -> dict[str, str]:
        return {
            "MASTER_ADDR": self.addr,
            "MASTER_PORT": str(self.port),
            "RANK": str(self.rank),
            "WORLD_SIZE": str(self.world),
            "LOCAL_RANK": str(self.local_rank),
        }


def rank_device(device: str, local_rank: int) -> str:
    """Each rank of a machine on its own GPU: `cuda` -> cuda:<local rank>, `cuda:k` -> cuda:<k + local rank>."""
    dev = torch.device(device)
    if dev.type != "cuda" or local_rank == 0:
        return device
    return f"cuda:{(dev.index or 0) + local_rank}"


def build_learner_algorithm(config: LearnerConfig, local_rank: int = 0) -> Algorithm:
    """The learner's algorithm, seeded, on its device (every rank builds it the same way)."""
    torch.manual_seed(config.seed)
    algorithm = build_algorithm(config.algo, config.algo_config, config.policy)
    if config.device != "cpu":
        if algorithm.supports_device:
            algorithm.to_device(rank_device(config.device, local_rank))
        else:
            log.info(
                "algo=%s updates on the CPU (learner.device=%s applies to qc, dsrl, filtered)",
                config.algo,
                config.device,
            )
    return algorithm


def update_autocast(precision: str, algorithm: Algorithm) -> contextlib.AbstractContextManager:
    """bf16 mixed precision for the update (`learner.precision`), where the algorithm runs on a device."""
    if precision != "bf16" or not algorithm.supports_device:
        return contextlib.nullcontext()
    return torch.autocast(device_type=algorithm.device.type, dtype=torch.bfloat16)


class ReplicaGroup:
    """One rank's view of the learner's ranks: joining, the start state, gradient averaging, and
    the shards (sent by rank 0, received by the others). See the module's docstring."""

    def __init__(
        self, rendezvous: Rendezvous, device: torch.device | str = "cpu", timeout_s: float = TIMEOUT_S
    ) -> None:
        self.rdv = rendezvous
        self.device = torch.device(device)
        self.timeout_s = timeout_s
        self._data: dist.ProcessGroup | None = None  # control and shards: gloo, CPU tensors
        self._sent_layout: tuple[int, Layout] | None = None
        self._layout: Layout | None = None
        self._last_sent = 0.0
        self._hooks: list = []
        self.updates = 0

    @property
    def rank(self) -> int:
        return self.rdv.rank

    @property
    def world(self) -> int:
        return self.rdv.world

    def join(self) -> ReplicaGroup:
        """Meet the other ranks (waits up to timeout_s for them); NCCL for gradients on a GPU, else gloo."""
        backend = "nccl" if self.device.type == "cuda" else "gloo"
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device.index or 0)  # (`cuda` alone names no index)
        timeout = datetime.timedelta(seconds=self.timeout_s)
        dist.init_process_group(
            backend,
            init_method=f"tcp://{self.rdv.addr}:{self.rdv.port}",
            rank=self.rdv.rank,
            world_size=self.rdv.world,
            timeout=timeout,
        )
        self._data = dist.group.WORLD if backend == "gloo" else dist.new_group(backend="gloo", timeout=timeout)
        self._last_sent = time.monotonic()
        log.info("learner rank %d of %d joined (%s, %s)", self.rank, self.world, backend, self.device)
        return self

    def finish(self) -> None:
        """Rank 0 at its close: stop the replicas (one already gone is logged), leave the group."""
        try:
            self.stop()
        except RuntimeError as e:  # gloo's errors (a peer gone) are RuntimeErrors
            log.warning("stopping the learner replicas: %s", e)
        self.close()

    def close(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        if dist.is_initialized():
            dist.destroy_process_group()
        self._data = None

    # -- the start: every rank the same ---------------------------------------------------------
    def start(self, algorithm: Algorithm) -> None:
        """Rank 0's modules (parameters, buffers) and optimiser state to every rank, as a checkpoint
        holds them (safetensors bytes, never pickled); then gradients are averaged across ranks
        before every optimiser step. Replicas then reseed their noise (rank 0's stays as it was)."""
        data = b""
        if self.rank == 0:
            tensors, metadata = checkpoint.state(algorithm)
            data = st_save(tensors, metadata)
        data = self._broadcast_bytes(data)
        if self.rank != 0:
            n = int.from_bytes(data[:8], "little")  # safetensors: header length, then its JSON header
            metadata = json.loads(data[8 : 8 + n]).get("__metadata__", {})
            checkpoint.restore(algorithm, st_load(data), metadata)
            torch.manual_seed(torch.initial_seed() + 7919 * self.rank)
        for opt in algorithm.optimizers().values():
            self._hooks.append(opt.register_step_pre_hook(self._average_hook))

    def _broadcast_bytes(self, data: bytes) -> bytes:
        size = torch.tensor([len(data)], dtype=torch.int64)
        dist.broadcast(size, 0, group=self._data)
        buf = (
            torch.frombuffer(bytearray(data), dtype=torch.uint8)
            if self.rank == 0 and data
            else torch.empty(int(size.item()), dtype=torch.uint8)
        )
        if len(buf):
            dist.broadcast(buf, 0, group=self._data)
        return buf.numpy().tobytes()

    def _average_hook(self, opt: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        self.average(opt)

    def average(self, opt: torch.optim.Optimizer) -> None:
        """Replace the gradients of `opt`'s parameters by their mean across ranks: one flat buffer,
        one all-reduce (sum, then / world size), with a count per parameter of the ranks that had a
        gradient, so ranks that diverged (one has a gradient, another none) fail loudly."""
        params = [p for g in opt.param_groups for p in g["params"]]
        if not params:
            return
        dev = params[0].device
        parts = [
            p.grad.detach().reshape(-1).float() if p.grad is not None else torch.zeros(p.numel(), device=dev)
            for p in params
        ]
        parts.append(torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=dev))
        flat = torch.cat(parts)
        dist.all_reduce(flat)
        counts = flat[-len(params) :].round().to(torch.int64).tolist()
        if any(c not in (0, self.world) for c in counts):
            raise RuntimeError(
                f"learner replicas diverged: only {min(c for c in counts if c)} of {self.world} "
                f"ranks have a gradient for a parameter of this optimiser"
            )
        flat /= self.world
        at = 0
        for p, c in zip(params, counts, strict=False):
            n = p.numel()
            if c and p.grad is not None:
                p.grad.copy_(flat[at : at + n].view_as(p.grad))
            at += n

    # -- rank 0 ---------------------------------------------------------------------------------
    def _control(self, cmd: int, rows: int = 0, header: int = 0, payload: int = 0) -> torch.Tensor:
        msg = torch.tensor([cmd, rows, header, payload], dtype=torch.int64)
        dist.broadcast(msg, 0, group=self._data)
        self._last_sent = time.monotonic()
        return msg

    def send(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
        """Rank 0: deal a combined batch to every rank (`rows // world` rows each; the remainder is
        left out, so every rank's mean loss weighs the same); returns rank 0's own shard, or None
        when the batch has fewer rows than ranks (no update then)."""
        assert self.rank == 0 and self._data is not None
        total, layout = layout_of(batch)
        rows = total // self.world
        if rows == 0:
            return None
        header = b"" if self._sent_layout == (rows, layout) else encode_header(layout)
        shards = [torch.from_numpy(pack(batch, layout, r, self.world, rows)) for r in range(self.world)]
        self._control(UPDATE, rows, len(header), len(shards[0]))
        if header:
            dist.broadcast(torch.frombuffer(bytearray(header), dtype=torch.uint8), 0, group=self._data)
            self._sent_layout = (rows, layout)
        out = torch.empty_like(shards[0])
        dist.scatter(out, shards, src=0, group=self._data)
        self.updates += 1
        return unpack(out.numpy(), layout, rows)

    def keepalive(self) -> None:
        """Rank 0, between updates: an idle message when none went out for KEEPALIVE_S."""
        if time.monotonic() - self._last_sent >= KEEPALIVE_S:
            self._control(IDLE)

    def stop(self) -> None:
        """Rank 0: the replicas end their loops."""
        self._control(STOP)

    # -- replicas -------------------------------------------------------------------------------
    def receive(self) -> dict[str, np.ndarray] | None:
        """A replica: the next shard from rank 0 (idle messages are waited through); None on stop."""
        assert self.rank != 0 and self._data is not None
        while True:
            msg = torch.empty(4, dtype=torch.int64)
            dist.broadcast(msg, 0, group=self._data)
            cmd, rows, header, payload = (int(v) for v in msg.tolist())
            if cmd == STOP:
                return None
            if cmd == IDLE:
                continue
            if cmd != UPDATE or rows <= 0 or not 0 <= header <= HEADER_MAX or payload < 0:
                raise ShardError(
                    f"replica control message [{cmd}, {rows}, {header}, {payload}] is not "
                    f"idle, update or stop with sizes"
                )
            if header:
                buf = torch.empty(header, dtype=torch.uint8)
                dist.broadcast(buf, 0, group=self._data)
                self._layout = decode_header(buf.numpy().tobytes())
            if self._layout is None:
                raise ShardError("replica shard without a header: the layout is unknown")
            out = torch.empty(payload, dtype=torch.uint8)
            dist.scatter(out, None, src=0, group=self._data)
            self.updates += 1
            return unpack(out.numpy(), self._layout, rows)


def join_primary(config: LearnerConfig, algorithm: Algorithm) -> ReplicaGroup | None:
    """Rank 0 (the learner) joins its replicas and starts them from its state (restored or fresh);
    None with `learner.replicas=1`."""
    if config.options.replicas == 1:
        return None
    rdv = Rendezvous.from_env()
    if rdv.rank != 0 or rdv.world != config.options.replicas:
        raise ValueError(
            f"the learner is rank 0 of learner.replicas={config.options.replicas}, "
            f"not RANK={rdv.rank} of WORLD_SIZE={rdv.world}"
        )
    group = ReplicaGroup(rdv, algorithm.device).join()
    group.start(algorithm)
    return group


def run_replica(
    config: LearnerConfig, rendezvous: Rendezvous, on_update: Callable[[int], None] | None = None
) -> Algorithm:
    """A replica (rank >= 1) from join to rank 0's stop: the same algorithm, started from rank 0's
    state, updated on the shards it is sent. Returns the algorithm (tests compare its weights)."""
    if rendezvous.world != config.options.replicas:
        raise ValueError(f"learner.replicas={config.options.replicas} but WORLD_SIZE={rendezvous.world}")
    torch.set_num_threads(config.options.threads)
    algorithm = build_learner_algorithm(config, rendezvous.local_rank)
    group = ReplicaGroup(rendezvous, algorithm.device).join()
    try:
        group.start(algorithm)
        while (shard := group.receive()) is not None:
            with update_autocast(config.precision, algorithm):
                algorithm.update(shard)
            if on_update is not None:
                on_update(group.updates)
    finally:
        group.close()
    return algorithm

"""`robo-async bench fuzz`: mutated wire messages against live receivers on loopback, each in a
process of its own: a learner (`learner_main`, a store on disk), a policy server (a flow policy)
and an actor's `WeightClient` under a hostile PUB. Per target, `messages` of each kind: a valid
message (the dataclasses through `encode`) given one or two mutations (header fields, keys, kind,
array specs with or without a data frame to fit, arrays added or left out, frames cut, grown,
flipped, dropped or 65,000 added, a header of garbage, deep nesting or past the cap); only those
this process's `decode` refuses are sent, so a target must drop each one. Each round ends with a
valid sentinel on the same socket (a batch stored, a hello answered, a status and weights taken):
then all before it was processed. Counted: messages, dropped (the target's own counter), crashes
(its process or receiving thread died, or an exception got past the checks into its last-resort
handler), the learner's rows beyond the sentinels' (`rows_stored`, must be 0). Last line: JSON.
"""

from __future__ import annotations

import logging
import math
import multiprocessing as mp
import queue
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from multiprocessing.synchronize import Event

import numpy as np
import zmq

from robo_async.bench import emit, register
from robo_async.bench.mutate import Mutants
from robo_async.commands.args import arg
from robo_async.transport.wire import (
    KINDS,
    ChunkReply,
    InferRequest,
    LearnerStatus,
    TransitionBatch,
    Weights,
    decode,
    encode,
)

SENTINEL_ROWS = 4  # rows of each sentinel batch the learner must store


# --- the targets, each in a process of its own: main(*args, stop, cmds, answers) -------------------
class _Escapes(logging.Handler):
    """Counts `robo_async` log records with an exception: a last-resort handler caught what the checks let pass."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.count = 0
        logging.getLogger("robo_async").addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.count += record.exc_info is not None


def _learner_main(cfg: object, stop: Event, cmds: mp.Queue, answers: mp.Queue) -> None:
    from robo_async.launch.processes import learner_main

    escapes = _Escapes()
    try:  # its reports ("ready", "progress", ...) and errors ((who, why)) come on `answers`
        learner_main(cfg, stop, answers, answers, 0.1)  # type: ignore[arg-type]
    finally:
        answers.put(("escapes", escapes.count))


def _edge_main(which: str, stop: Event, cmds: mp.Queue, answers: mp.Queue) -> None:
    """A policy server (flow policy, reach's spec; answers its address and spec) or a weight client
    of `which` ("tcp://..."), then (dropped, alive, escapes, ...) for each question."""
    escapes = _Escapes()
    if which == "server":
        from policies.flow import FlowChunkPolicy
        from robo_async.serve import PolicyServer, ServeConfig
        from robo_async.transport.robot_spec import spec_json
        from sim import ReachTask

        spec = ReachTask().spec()
        policy = FlowChunkPolicy(("state",), (spec.state_dim,), spec.joint_low, spec.joint_high, horizon=8)
        server = PolicyServer(policy, spec, ServeConfig("tcp://127.0.0.1:0")).start()
        answers.put((server.bound, spec_json(spec)))
        while cmds.get() is not None:
            answers.put((server.malformed, server.alive() and server.failure is None, escapes.count))
        return server.close()
    from robo_async.transport.channels import WeightClient

    client, version = WeightClient(which, every_s=0.01).start(), -1  # as actors run it (statuses every 10 ms)
    while cmds.get() is not None:
        w = client.take_weights()
        version = w.version if w is not None else version
        alive = any(t.name == "weight-client" and t.is_alive() for t in threading.enumerate())
        answers.put((client.dropped, alive, escapes.count, client.status.boot_id if client.status else "", version))
    client.close()


class _Target:
    """A receiver's process: `send(frames)`; `sentinel()`, its dropped count once everything sent
    before was processed; `close()`, its figures. `ask()`: (dropped, alive, escapes, ...) from it."""

    name = ""
    mutants: Mutants | None = None  # what the weight client's publisher picks each message's topic with
    died = ""  # why the run against it ended early

    def __init__(self, main: Callable[..., None], *args: object) -> None:
        ctx = mp.get_context("spawn")
        self.stop, self.cmds, self.answers = ctx.Event(), ctx.Queue(), ctx.Queue()
        self.proc = ctx.Process(target=main, args=(*args, self.stop, self.cmds, self.answers), daemon=True)
        self.proc.start()
        self.last: tuple = (0, True, 0)
        self.sock: zmq.Socket | None = None

    def connect(self, kind: int, address: str) -> zmq.Socket:
        self.sock = zmq.Context.instance().socket(kind)
        self.sock.setsockopt(zmq.SNDTIMEO, 1000)  # a dead target must not block the bench
        self.sock.connect(address)
        return self.sock

    def send(self, frames: list[bytes], kind: str = "") -> None:
        while True:
            try:
                self.sock.send_multipart(frames, copy=False)  # type: ignore[union-attr]
                return
            except zmq.Again:
                self.check()

    def check(self) -> None:  # ChildProcessError once the process is gone
        if not self.proc.is_alive():
            raise ChildProcessError(f"the {self.name} process died (exit code {self.proc.exitcode})")

    def get(self) -> tuple:
        while True:  # the process's next answer, waiting while it lives
            try:
                return self.answers.get(timeout=5)
            except queue.Empty:
                self.check()

    def ask(self) -> tuple:
        self.cmds.put("count")
        self.last = self.get()
        if not self.last[1]:
            raise ChildProcessError(f"the {self.name}'s receiving thread died")
        return self.last

    def sentinel(self) -> int:
        raise NotImplementedError

    def drain(self) -> None:
        """Read what the process said last, once it is gone."""

    def close(self) -> dict[str, object]:
        if self.sock is not None:
            self.sock.close(linger=0)
        self.stop.set()  # (the learner)
        self.cmds.put(None)  # (the others)
        self.proc.join(60)
        if self.proc.is_alive():
            self.proc.kill()
        self.drain()
        dropped, alive, escapes = self.last[:3]
        return {
            "dropped": dropped,
            "escaped": escapes,
            "died": self.died,
            "crashes": int(bool(self.died) or not alive or self.proc.exitcode != 0) + escapes,
        }


class _Learner(_Target):
    """`learner_main` (a store on disk, mlp on a 6-d state); the sentinel: a valid batch of actor 0,
    through once a progress report counts its rows in the store (PUSH/PULL keeps the order)."""

    name = "learner"

    def __init__(self) -> None:
        from robo_async.learner.algorithms import PolicySpec
        from robo_async.learner.config import LearnerConfig

        super().__init__(
            _learner_main,
            LearnerConfig(
                tempfile.mkdtemp(prefix="fuzz-learner-"),
                "tcp://127.0.0.1:0",
                "tcp://127.0.0.1:0",
                PolicySpec("mlp", ("state",), (6,), (-1.0,) * 6, (1.0,) * 6),
                tensorboard=False,
            ),
        )
        kind, (data, _) = self.answers.get(timeout=180)
        assert kind == "ready", kind
        self.connect(zmq.PUSH, data)
        self.rows = self.online = 0
        self.errors: list[str] = []

    def sentinel(self) -> int:
        f = np.zeros((SENTINEL_ROWS, 6), np.float32)
        self.send(
            [
                bytes(b)
                for b in encode(
                    TransitionBatch(
                        0,
                        self.rows,
                        {
                            "obs/state": f,
                            "next_obs/state": f,
                            "action": f,
                            "reward": f[:, 0],
                            "terminated": f[:, 0] > 0,
                            "truncated": f[:, 0] > 0,
                            "policy_version": np.zeros(SENTINEL_ROWS, np.int64),
                        },
                    )
                )
            ]
        )
        self.rows += SENTINEL_ROWS
        while self.online < self.rows:  # a report made after the sentinel's commit
            self.take(*self.get())
        return int(self.last[0])

    def take(self, kind: str, value: object) -> None:
        """One of learner_main's reports: progress, escapes at its end, an error (anything else)."""
        if kind == "progress" and isinstance(value, Mapping):
            self.last, self.online = (int(value["transport/malformed"]), True, 0), int(value["buffer/online"])
        elif kind == "escapes":
            self.last = (self.last[0], not self.errors, value)
        elif kind not in ("actors", "done"):
            self.errors.append(f"{kind}: {value}")

    def drain(self) -> None:
        while True:  # its last reports, the escapes and any error
            try:
                self.take(*self.answers.get(timeout=1))
            except queue.Empty:
                return

    def close(self) -> dict[str, object]:
        return {
            **super().close(),
            "store_rows": self.online,
            "sentinel_rows": self.rows,
            "rows_stored": max(self.online - self.rows, 0),
            "errors": self.errors,
        }


class _Server(_Target):
    """A `PolicyServer` reached by a DEALER; the sentinel: a hello, answered."""

    name = "policy server"

    def __init__(self) -> None:
        super().__init__(_edge_main, "server")
        address, self.spec = self.answers.get(timeout=180)
        self.dealer, self.req = self.connect(zmq.DEALER, address), 0

    def send(self, frames: list[bytes], kind: str = "") -> None:
        super().send([b"", *frames])  # a DEALER's empty delimiter, as RemotePolicy sends

    def sentinel(self) -> int:
        self.req += 1
        self.send([bytes(f) for f in encode(InferRequest(0, self.req, hello=True, spec=self.spec))])
        while True:
            if not self.dealer.poll(2000):
                self.check()
                self.ask()  # (the server's thread still serving?)
                continue
            reply = decode(self.dealer.recv_multipart()[1:])
            if isinstance(reply, ChunkReply) and reply.req == self.req and not reply.error:
                return int(self.ask()[0])


class _Client(_Target):
    """An actor's `WeightClient` under this process's PUB, `window` messages at a time (a SUB drops
    what overflows its queue: the bench waits for the client to have dropped them, so none is lost
    in transit). The sentinel: a valid status and weights, both taken."""

    name = "weight client"

    def __init__(self, window: int = 512) -> None:
        from robo_async.transport.channels import STATUS_TOPIC, WEIGHTS_TOPIC

        self.pub: zmq.Socket = zmq.Context.instance().socket(zmq.PUB)
        port: int = self.pub.bind_to_random_port("tcp://127.0.0.1")
        super().__init__(_edge_main, f"tcp://127.0.0.1:{port}")
        self.topics, self.window = (STATUS_TOPIC, WEIGHTS_TOPIC), window
        self.sent = self.lost = self.round = 0
        self.mark()

    def send(self, frames: list[bytes], kind: str = "") -> None:
        self.pub.send_multipart(
            [self.mutants.topic_for(kind, *self.topics) if self.mutants else self.topics[0], *frames], copy=False
        )
        self.sent += 1
        if self.sent % self.window == 0:
            self.settle()

    def settle(self) -> int:
        """Wait for the client to have dropped all that was sent; what it has not in 30 s is lost."""
        deadline = time.monotonic() + 30
        while self.ask()[0] < self.sent and time.monotonic() < deadline:
            time.sleep(0.002)
        self.lost = self.sent - self.last[0]
        return int(self.last[0])

    def mark(self) -> None:
        """A valid status and weights until the client has both (nothing sent before is on its way)."""
        boot, deadline = f"round-{self.round}", time.monotonic() + 120
        while time.monotonic() < deadline:
            self.pub.send_multipart([self.topics[0], *encode(LearnerStatus(0, 0, 0, 0, boot_id=boot))])
            self.pub.send_multipart([self.topics[1], *encode(Weights(self.round, {"w": np.ones(2, np.float32)}))])
            if self.ask()[3] == boot and self.last[4] >= self.round:
                return
            time.sleep(0.01)
        raise ChildProcessError("the weight client took no sentinel in 120 s")

    def sentinel(self) -> int:
        dropped = self.settle()
        self.round += 1
        self.mark()
        return dropped

    def close(self) -> dict[str, object]:
        self.pub.close(linger=0)
        return {**super().close(), "lost": self.lost}


# --- the bench -------------------------------------------------------------------------------------
def run_target(target: Callable[[], _Target], mutants: Mutants, per_kind: int, round_size: int) -> dict[str, object]:
    """`per_kind` mutants of each kind to `target`, in rounds of about `round_size` messages, each
    generated first, then sent and ended by a sentinel (`seconds`: sending until it is through)."""
    total, sent, busy, gen, shown = per_kind * len(KINDS), 0, 0.0, 0.0, -1
    rounds = max(1, math.ceil(total / round_size))
    t = target()
    t.mutants = mutants
    try:
        for r in range(rounds):
            t0 = time.monotonic()
            batch = [
                (k, mutants.malformed(k))
                for _ in range(per_kind * (r + 1) // rounds - per_kind * r // rounds)
                for k in KINDS
            ]
            t1 = time.monotonic()
            for kind, frames in batch:
                t.send(frames, kind)
                sent += 1
            dropped = t.sentinel()
            gen, busy = gen + t1 - t0, busy + time.monotonic() - t1
            if sent * 10 // total > shown or r == rounds - 1:
                shown = sent * 10 // total
                print(
                    f"  {t.name:<13} {sent:>9,}/{total:,} sent, {dropped:>9,} dropped, {sent / busy:>7,.0f} msgs/s",
                    flush=True,
                )
    except ChildProcessError as e:
        t.died = str(e)
        print(f"  {t.name}: {e}", flush=True)
    row = t.close()
    return {
        "messages": sent,
        **row,
        "seconds": round(busy, 1),
        "msgs_per_s": round(sent / busy) if busy else 0,
        "generate_s": round(gen, 1),
    }


@dataclass(frozen=True, kw_only=True)
class FuzzKeys:
    """The keys of `robo-async bench fuzz`."""

    messages: int = arg(100_000, help="mutated messages of each kind sent to each target")
    seed: int = arg(0, help="seed of the mutations")
    round: int = arg(8000, help="messages between two sentinels (each round ends with a valid one)")


@register("fuzz", FuzzKeys)
def bench_fuzz(args: FuzzKeys) -> int:
    per_kind, seed = args.messages, args.seed
    round_size = args.round  # messages between two sentinels
    print(f"fuzz: {per_kind:,} mutated messages of each of {len(KINDS)} kinds per target, seed {seed}", flush=True)
    rows, mutants = {}, {}
    for i, target in enumerate((_Learner, _Server, _Client)):
        mutants[target.name] = Mutants(seed, i)
        rows[target.name] = run_target(target, mutants[target.name], per_kind, round_size)
    print(f"\n{'target':<15}{'messages':>11}{'dropped':>11}{'crashes':>9}{'rows stored':>13}{'msgs/s':>9}")
    for name, r in rows.items():
        print(
            f"{name:<15}{r['messages']:>11,}{r['dropped']:>11,}{r['crashes']:>9}{r.get('rows_stored', '-'):>13}"
            f"{r['msgs_per_s']:>9,}"
        )
    gen = {k: sum(m.counts[k] for m in mutants.values()) for k in ("valid_mutants", "unnamed", "escapes")}
    reasons = sum((m.unnamed_reasons for m in mutants.values()), Counter[str]())
    print(
        f"mutants decode accepted (not sent): {gen['valid_mutants']:,}; refused by decode's last-resort wrapper "
        f"only: {gen['unnamed']:,}; other exceptions out of decode: {gen['escapes']:,}"
    )
    for why, n in reasons.most_common(5):
        print(f"  x{n:,}: {why}")
    out = {
        "messages": sum(int(r["messages"]) for r in rows.values()),  # type: ignore[call-overload]
        "crashes": sum(int(r["crashes"]) for r in rows.values()),  # type: ignore[call-overload]
        "rows_stored": rows["learner"].get("rows_stored"),
        "all_dropped": all(r["dropped"] == r["messages"] for r in rows.values()),
        "per_kind": per_kind,
        "seed": seed,
        **gen,
        "unnamed_reasons": dict(reasons),
        "targets": rows,
    }
    emit(out)
    return 0 if out["crashes"] == 0 and out["rows_stored"] == 0 and out["all_dropped"] else 1

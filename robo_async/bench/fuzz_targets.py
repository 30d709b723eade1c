"""The receivers `robo-async bench fuzz` sends mutated wire messages to, each in a process of its
own on loopback, and the driver that talks to each: a learner (`learner_main`, a store on disk;
its sentinel a valid batch, stored), a policy server (a flow policy, reached by a DEALER; its
sentinel a hello, answered) and an actor's `WeightClient` under a hostile PUB (its sentinel a valid
status and weights, both taken). A driver sends frames, asks the process for its dropped count, its
receiving thread's life and the exceptions that reached its last-resort handler, and closes it
into its figures (dropped, escaped, died, crashes)."""

from __future__ import annotations

import logging
import multiprocessing as mp
import queue
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from multiprocessing.synchronize import Event

import numpy as np
import zmq

from robo_async.bench.mutate import Mutants
from robo_async.transport.wire import (
    ChunkReply,
    InferRequest,
    LearnerStatus,
    TransitionBatch,
    Weights,
    decode,
    encode,
)

SENTINEL_ROWS = 4  # rows of each sentinel batch the learner must store


# the targets, each in a process of its own: main(*args, stop, cmds, answers)
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


class Target:
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


class LearnerTarget(Target):
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


class ServerTarget(Target):
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


class ClientTarget(Target):
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

"""The TCP link emulator on real processes and sockets: one client process's link cut for a while
(nothing through either way, nothing reset, nothing lost or reordered after) while another client's
link through the same proxy keeps working; the lookup from a connection's port to its process."""

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import zmq

from robo_async.bench.netem import LinkProxy, pids_owning_port

OUTAGE_S = 3.0
# A PUSH client driven line by line on stdin: "connect ADDRESS" or "send TEXT".
CLIENT = """
import sys, zmq
push = zmq.Context().socket(zmq.PUSH)
push.setsockopt(zmq.LINGER, 0)
for line in iter(sys.stdin.readline, ""):
    verb, arg = line.split()
    push.connect(arg) if verb == "connect" else push.send_string(arg)
"""


class Client:
    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", CLIENT], stdin=subprocess.PIPE, text=True)
        self.pid = self.proc.pid

    def tell(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.proc.stdin.close()


@contextmanager
def clients(n: int) -> Iterator[list[Client]]:
    with ExitStack() as stack:
        out = []
        for _ in range(n):
            out.append(Client())
            stack.callback(out[-1].close)
        yield out


def receive(pull: zmq.Socket, n: int, timeout_s: float = 20.0) -> list[tuple[str, float]]:
    """Up to `n` messages, each with its arrival time (time.monotonic(), s)."""
    got, deadline = [], time.monotonic() + timeout_s
    while len(got) < n and pull.poll(max(0, int((deadline - time.monotonic()) * 1000))):
        got.append((pull.recv_string(), time.monotonic()))
    return got


def test_a_dropped_link_stalls_only_its_process_then_delivers_everything_in_order():
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.LINGER, 0)
    pull.bind("tcp://127.0.0.1:*")
    proxy = LinkProxy([pull.getsockopt_string(zmq.LAST_ENDPOINT)])
    try:
        with proxy as (front,), clients(3) as (a, b, c):
            for client in (a, b):
                client.tell(f"connect {front}")
            a.tell("send A1")
            b.tell("send B1")
            assert sorted(m for m, _ in receive(pull, 2)) == ["A1", "B1"]

            start = time.monotonic()
            assert proxy.drop({a.pid, c.pid}, seconds=OUTAGE_S) == 1  # A's connection; C has none yet
            for i in range(2, 6):
                a.tell(f"send A{i}")
            c.tell(f"connect {front}")  # connects during the outage of its process
            c.tell("send C1")
            b.tell("send B2")
            got = receive(pull, 6, timeout_s=OUTAGE_S + 20)
            arrived = dict(got)
            assert sorted(arrived) == ["A2", "A3", "A4", "A5", "B2", "C1"]
            assert arrived["B2"] < start + OUTAGE_S, "the other client's link stalled too"
            for m in ("A2", "A3", "A4", "A5", "C1"):  # the proxy stalls for at least OUTAGE_S
                assert arrived[m] >= start + OUTAGE_S - 0.01, f"{m} got through during the outage"
            assert [m for m, _ in got if m.startswith("A")] == ["A2", "A3", "A4", "A5"]

            for client, m in ((a, "A6"), (b, "B3"), (c, "C2")):  # the links are back
                client.tell(f"send {m}")
            assert sorted(m for m, _ in receive(pull, 3)) == ["A6", "B3", "C2"]
            assert proxy.current_counts()["stalled"] >= 1
        assert proxy.counts["accepted"] == 3
        assert proxy.counts["bytes_to_upstream"] > 0 and proxy.counts["bytes_to_client"] > 0
    finally:
        pull.close(0)
        ctx.term()


def test_pids_owning_port_names_the_process_holding_the_client_end():
    with socket.socket() as listener, clients(1) as (other,):
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        code = "import socket, sys; s = socket.create_connection(('127.0.0.1', int(sys.argv[1]))); sys.stdin.read()"
        owner = subprocess.Popen([sys.executable, "-c", code, str(listener.getsockname()[1])], stdin=subprocess.PIPE)
        try:
            conn, (_, port) = listener.accept()
            with conn:
                assert pids_owning_port(port, {owner.pid}) == owner.pid
                assert pids_owning_port(port, {os.getpid()}) == owner.pid  # a child of the given process
                assert pids_owning_port(port, {other.pid}) is None
                # our own end of that connection (local port: the listener's) is not the owner's
                assert pids_owning_port(listener.getsockname()[1], {owner.pid}) is None
        finally:
            owner.kill()
            owner.wait(timeout=10)
            owner.stdin.close()

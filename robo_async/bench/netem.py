"""Two link emulators between edge actors and the learner or policy server, each in its own process,
on real sockets.

`NetemProxy` delays and drops ZMQ messages. Actors connect to its ROUTER front end; it forwards to
the server through a DEALER, so the server sees an extra routing frame (the envelope is everything
before the first empty frame). Each message is delayed by half the round trip in each direction and
dropped with probability `loss`; for tests, `drop_replies` / `dup_replies` drop or duplicate the
n-th reply (1-based) exactly.

    with NetemProxy(server_address, rtt_ms=150, loss=0.02) as front:
        policy = RemotePolicy(front, spec)

`LinkProxy` relays raw TCP bytes (any protocol) and can cut one process's link for a while, like a
Wi-Fi outage: its connections are not reset, bytes just stop flowing both ways, then resume with
nothing lost. Other processes' connections through the same proxy keep working.

    proxy = LinkProxy([learner_address])
    with proxy as (front,):
        ...  # start actors against `front`
        proxy.drop({actor_pid}, seconds=10.0)  # its connections stall for 10 s; returns how many
"""

from __future__ import annotations

import asyncio
import heapq
import multiprocessing as mp
import os
import random
import time
from collections.abc import Iterable
from contextlib import suppress
from functools import partial
from pathlib import Path
from typing import Any

import zmq


def proxy_main(
    upstream: str,
    rtt_ms: float,
    loss: float,
    seed: int,
    drop_replies: tuple[int, ...],
    dup_replies: tuple[int, ...],
    ready: Any,
    stop: Any,
    counts: Any,
) -> None:
    from robo_async.launch.processes import _watch_parent

    _watch_parent(stop)  # a parent killed with -9 leaves no proxy behind
    ctx = zmq.Context()
    front, back = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    for s in (front, back):
        s.setsockopt(zmq.LINGER, 0)
    front.bind("tcp://127.0.0.1:0")
    back.connect(upstream)
    ready.put(front.getsockopt_string(zmq.LAST_ENDPOINT))
    rng = random.Random(seed)
    half = rtt_ms / 2000
    queue: list[tuple[float, int, int, list[bytes]]] = []  # (due, order, 0: to server / 1: to actor, frames)
    n, replies = 0, 0
    c = {"requests": 0, "replies": 0, "dropped": 0, "duplicated": 0}
    poller = zmq.Poller()
    poller.register(front, zmq.POLLIN)
    poller.register(back, zmq.POLLIN)
    try:
        while not stop.is_set():
            wait = 10 if not queue else max(0, min(10, int((queue[0][0] - time.monotonic()) * 1000)))
            for sock, _ in poller.poll(wait):
                frames = sock.recv_multipart()
                now = time.monotonic()
                if sock is front:
                    c["requests"] += 1
                    if rng.random() < loss:
                        c["dropped"] += 1
                        continue
                    n += 1
                    heapq.heappush(queue, (now + half, n, 0, frames))
                else:
                    replies += 1
                    c["replies"] += 1
                    if replies in drop_replies or rng.random() < loss:
                        c["dropped"] += 1
                        continue
                    n += 1
                    heapq.heappush(queue, (now + half, n, 1, frames))
                    if replies in dup_replies:
                        c["duplicated"] += 1
                        n += 1
                        heapq.heappush(queue, (now + half + 0.005, n, 1, frames))
            now = time.monotonic()
            while queue and queue[0][0] <= now:
                _, _, to_actor, frames = heapq.heappop(queue)
                try:
                    (front if to_actor else back).send_multipart(frames, flags=zmq.NOBLOCK)
                except zmq.ZMQError:  # the actor's socket is gone (it re-requested on a new one)
                    pass
    finally:
        counts.put(c)
        front.close(0)
        back.close(0)
        ctx.term()


class NetemProxy:
    """The proxy process as a context manager: entering starts it and returns the address actors
    connect to; leaving stops it and fills `counts` (requests, replies, dropped, duplicated).
    `rtt_ms`: the added round trip (ms), half each way; `loss`: drop probability per message."""

    def __init__(
        self,
        upstream: str,
        rtt_ms: float = 0.0,
        loss: float = 0.0,
        seed: int = 0,
        drop_replies: tuple[int, ...] = (),
        dup_replies: tuple[int, ...] = (),
    ) -> None:
        self._ctx = mp.get_context("spawn")
        self._ready, self._counts, self._stop = self._ctx.Queue(), self._ctx.Queue(), self._ctx.Event()
        self._proc = self._ctx.Process(
            target=proxy_main,
            daemon=True,
            name="netem-proxy",
            args=(
                upstream,
                rtt_ms,
                loss,
                seed,
                tuple(drop_replies),
                tuple(dup_replies),
                self._ready,
                self._stop,
                self._counts,
            ),
        )
        self.counts: dict[str, int] = {}
        self.address = ""

    def __enter__(self) -> str:
        self._proc.start()
        self.address = self._ready.get(timeout=60)
        return self.address

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        try:
            self.counts = self._counts.get(timeout=10)
        except Exception:  # noqa: BLE001 - the proxy died: no counts
            self.counts = {}
        self._proc.join(timeout=5)
        if self._proc.is_alive():
            self._proc.kill()


# /proc/net/tcp{,6} spell loopback as 127.0.0.1, ::ffff:127.0.0.1 and ::1 (32-bit words, host order).
_LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}


def _socket_inode(port: int) -> int | None:
    """The inode of the connected loopback TCP socket whose local port is `port`, or None."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with suppress(OSError):
            for row in Path(table).read_text().splitlines()[1:]:
                f = row.split()
                addr, _, hex_port = f[1].partition(":")
                if int(hex_port, 16) == port and addr in _LOOPBACK and f[3] != "0A" and f[9] != "0":  # 0A: listen
                    return int(f[9])
    return None


def with_descendants(pids: Iterable[int]) -> set[int]:
    # From each process's parent in /proc/*/stat: /proc/<pid>/task/*/children needs CONFIG_PROC_CHILDREN.
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with suppress(OSError, IndexError, ValueError):
            children.setdefault(int(stat.read_text().rpartition(")")[2].split()[1]), []).append(int(stat.parent.name))
    out: set[int] = set()
    todo = list(pids)
    while todo:
        if (pid := todo.pop()) not in out:
            out.add(pid)
            todo += children.get(pid, [])
    return out


def _socket_owners(pids: Iterable[int]) -> dict[int, int]:
    """Socket inode -> pid, for every socket open in `pids` or their descendants."""
    out: dict[int, int] = {}
    for pid in with_descendants(pids):
        with suppress(OSError):
            for fd in os.scandir(f"/proc/{pid}/fd"):
                with suppress(OSError):
                    if (link := os.readlink(fd.path)).startswith("socket:["):
                        out[int(link[8:-1])] = pid
    return out


def pids_owning_port(port: int, pids: Iterable[int]) -> int | None:
    """The process, one of `pids` or a descendant, holding the loopback TCP socket whose local port
    is `port` (the client end of a connection to us); None if none of them holds it."""
    inode = _socket_inode(port)
    return None if inode is None else _socket_owners(pids).get(inode)


class _Link:
    """One relayed connection: the inode of the client's socket, both transports, and its outage."""

    def __init__(self, inode: int | None, transports: tuple[asyncio.Transport, asyncio.Transport]) -> None:
        self.inode, self.transports = inode, transports
        self.until = 0.0  # time.monotonic() (s) until which nothing is read or written either way

    def stall(self, until: float) -> None:
        self.until = max(self.until, until)
        for t in self.transports:
            t.pause_reading()  # the kernel buffers fill, TCP stays up
        asyncio.get_running_loop().call_later(until - time.monotonic(), self._resume)

    def _resume(self) -> None:
        if time.monotonic() >= self.until:  # else a longer outage came meanwhile: its own timer resumes
            for t in self.transports:
                t.resume_reading()

    async def gate(self) -> None:
        while (wait := self.until - time.monotonic()) > 0:  # a chunk read as the outage began is held
            await asyncio.sleep(wait)


async def _relay(upstreams: list[str], conn: Any, stop: Any) -> None:
    counts = {"accepted": 0, "bytes_to_upstream": 0, "bytes_to_client": 0, "stalled": 0}
    links: set[_Link] = set()
    drops: list[tuple[frozenset[int], float]] = []  # (pids, until): an outage still on

    def drop(pids: frozenset[int], seconds: float) -> int:
        until = time.monotonic() + seconds
        drops.append((pids, until))
        owned = _socket_owners(pids)
        hit = [link for link in links if link.inode in owned]
        for link in hit:
            link.stall(until)
        counts["stalled"] += len(hit)
        return len(hit)

    async def pump(link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, key: str) -> None:
        try:
            while data := await reader.read(1 << 16):
                await link.gate()
                writer.write(data)
                await writer.drain()
                counts[key] += len(data)
        except OSError:
            pass
        finally:
            writer.close()  # the other pump then reads EOF from this socket and closes its side

    async def accept(upstream: tuple[str, int], reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        counts["accepted"] += 1
        inode = _socket_inode(writer.get_extra_info("peername")[1])
        try:
            up_reader, up_writer = await asyncio.open_connection(*upstream)
            link = _Link(inode, (writer.transport, up_writer.transport))  # type: ignore[arg-type]  # TCP: Transport
            now = time.monotonic()
            drops[:] = [d for d in drops if d[1] > now]
            for pids, until in drops:  # connected during an outage of its process
                if inode is not None and inode in _socket_owners(pids):
                    link.stall(until)
            counts["stalled"] += link.until > 0
            links.add(link)
            await asyncio.gather(
                pump(link, reader, up_writer, "bytes_to_upstream"), pump(link, up_reader, writer, "bytes_to_client")
            )
            links.discard(link)
        except (OSError, asyncio.CancelledError):  # no upstream, or stopping
            writer.close()

    def command() -> None:  # ("drop", pids, seconds) -> stalled connections; ("counts",) -> counts
        try:
            cmd = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            asyncio.get_running_loop().remove_reader(conn.fileno())
            stop.set()
            return
        conn.send(drop(frozenset(cmd[1]), cmd[2]) if cmd[0] == "drop" else dict(counts))

    servers = []
    for u in upstreams:
        host, _, port = u.removeprefix("tcp://").rpartition(":")
        servers.append(await asyncio.start_server(partial(accept, (host, int(port))), "127.0.0.1", 0))
    conn.send([f"tcp://127.0.0.1:{s.sockets[0].getsockname()[1]}" for s in servers])
    asyncio.get_running_loop().add_reader(conn.fileno(), command)
    while not stop.is_set():
        await asyncio.sleep(0.05)
    for s in servers:
        s.close()
    for link in links:
        for t in link.transports:
            t.abort()
    with suppress(OSError):  # the parent is gone: nobody to tell
        conn.send(dict(counts))


def link_proxy_main(upstreams: list[str], conn: Any, stop: Any) -> None:
    from robo_async.launch.processes import _watch_parent

    _watch_parent(stop)  # a parent killed with -9 leaves no proxy behind
    asyncio.run(_relay(upstreams, conn, stop))


class LinkProxy:
    """A TCP relay per upstream ("tcp://127.0.0.1:PORT") whose links can be cut per client process.
    Entering starts it and returns the front addresses, in the order of `upstreams`; leaving stops it
    and fills `counts` (accepted, bytes_to_upstream, bytes_to_client, stalled connections)."""

    def __init__(self, upstreams: list[str]) -> None:
        self._ctx = mp.get_context("spawn")
        self._conn, self._child_conn = self._ctx.Pipe()
        self._stop = self._ctx.Event()
        self._proc = self._ctx.Process(
            target=link_proxy_main, daemon=True, name="link-proxy", args=(list(upstreams), self._child_conn, self._stop)
        )
        self.counts: dict[str, int] = {}
        self.addresses: list[str] = []

    def _reply(self, timeout_s: float) -> Any:
        try:
            if self._conn.poll(timeout_s):
                return self._conn.recv()
        except (EOFError, OSError):
            raise RuntimeError(f"the link proxy (pid {self._proc.pid}) exited; see its traceback above") from None
        raise RuntimeError(f"the link proxy (pid {self._proc.pid}) did not answer in {timeout_s} s")

    def __enter__(self) -> list[str]:
        self._proc.start()
        self._child_conn.close()
        self.addresses = self._reply(60)
        return self.addresses

    def drop(self, pids: Iterable[int], seconds: float) -> int:
        """Stall, for `seconds`, every connection whose client end is a socket of one of `pids` (or
        of their descendants), including those they open meanwhile: nothing is read from either side,
        nothing is reset; afterwards bytes flow again, in order. Returns how many were stalled now."""
        self._conn.send(("drop", tuple(pids), float(seconds)))
        return int(self._reply(10))

    def current_counts(self) -> dict[str, int]:
        """The counts so far (the keys of `counts`)."""
        self._conn.send(("counts",))
        return dict(self._reply(10))

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        try:
            self.counts = self._reply(10)
        except RuntimeError:  # the proxy died: no counts
            self.counts = {}
        self._proc.join(timeout=5)
        if self._proc.is_alive():
            self._proc.kill()
        self._conn.close()

"""The policy server: inference for edge actors without a GPU, over ZMQ (ROUTER; actors' DEALERs).

    server = PolicyServer(policy, spec, ServeConfig("tcp://0.0.0.0:5560", weights_address=...))
    server.serve(stop)            # or server.start() on a thread

How it listens, batches and follows the learner is its `ServeConfig` (config.py). Actors send
`InferRequest`s (wire.py: the observation, the forwarded state, the delay in ticks and
the RTC prefix) and get `ChunkReply`s (the actions, the policy version that computed them). The
loop takes every request that has arrived and, while an actor heard from in the last second has
not asked yet, waits for more (up to `max_batch`) at most `batch_window_ms` or half a forward
pass, whichever is longer (the straggler would otherwise wait a whole pass); then runs them as
one batch (`Policy.predict_chunks`): a forward pass costs far less per row for eight rows than
for one. Between batches, new weights from the learner's
publisher (`weights_address`) are swapped in; every chunk names the version that made it.

A message's routing envelope is every frame before the first empty one (as REQ/REP does), so
proxies (a ROUTER/DEALER pair, e.g. the benchmark's delay/loss proxy) can sit in between.
A hello is answered with the policy's architecture, horizon and robot spec, or refused (another
robot spec, another policy) with one line naming the difference. Malformed requests are dropped
and counted; a request the policy cannot answer gets an error reply naming why.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time

import numpy as np
import zmq

from hal.spec import RobotSpec
from policies.base import ChunkRequest, Policy, WeightsMismatch, check_architecture
from robo_async.buffer.codec import Column, CorruptRecord, decode_frames
from robo_async.serve.config import ServeConfig
from robo_async.transport.channels import WeightClient, bind
from robo_async.transport.robot_spec import spec_difference, spec_json
from robo_async.transport.wire import (
    MAX_FRAMES,
    ChunkReply,
    Frames,
    InferRequest,
    WireError,
    decode,
    encode,
    recv_frames,
)

log = logging.getLogger(__name__)
ENVELOPE_FRAMES = 8  # a ROUTER's routing frames before the empty delimiter (one per hop: proxies)


def _decoded(msg: InferRequest) -> InferRequest:
    """The request with its encoded camera frames decoded (checksum, codec, size checked)."""
    frames = {k: v for k, v in msg.obs.items() if isinstance(v, Frames)}
    if not frames:
        return msg
    obs = dict(msg.obs)
    for k, f in frames.items():
        obs[k] = decode_frames(f, Column(f"obs/{k}", "uint8", tuple(f.shape[1:])))[0]
    return dataclasses.replace(msg, obs=obs)


class PolicyServer:
    """Serves one policy's chunks to many actors (see the module's docstring). `open()` binds
    (`bound` is the address, port 0 picks one); `serve(stop)` runs the loop in the caller's
    thread, or `start()` on a daemon thread, `close()` stops it; `stats()`: counters
    (requests, chunks, batches, batch sizes, malformed, refused, weight swaps, busy seconds)."""

    def __init__(self, policy: Policy, spec: RobotSpec, config: ServeConfig = ServeConfig()) -> None:
        if config.max_batch < 1 or config.batch_window_ms < 0:
            raise ValueError(
                f"serve: max_batch must be >= 1 and batch_window_ms >= 0, "
                f"not {config.max_batch} / {config.batch_window_ms}"
            )
        self.policy, self.spec, self.config = policy, spec, config
        self.spec_json = spec_json(spec)
        self.requests = self.chunks = self.batches = self.malformed = self.refused = self.errors = 0
        self.weight_swaps = self.weights_rejected = 0
        self.batch_sizes: dict[int, int] = {}  # batch size -> how many batches had it (bounded by max_batch)
        self.busy_s = 0.0  # time spent in the policy
        self._ctx = zmq.Context.instance()
        self._auth = None
        self._sock: zmq.Socket | None = None
        self._weights: WeightClient | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.bound = ""  # the address actually bound (port 0: a free one)
        self._pass_s = 0.0  # a forward pass (moving average), seconds
        self._active: dict[int, float] = {}  # actor id -> when it last asked (the batch waits for these)
        self.failure: BaseException | None = None

    # --- life cycle ---------------------------------------------------------------------------
    def open(self) -> PolicyServer:
        cfg = self.config
        sock = self._ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, int(cfg.max_message_mb * 2**20))
        sock.setsockopt(zmq.SNDHWM, 10_000)
        sock.setsockopt(zmq.RCVHWM, 10_000)
        if cfg.keys_dir is not None:
            from robo_async.transport.curve import LearnerAuth

            self._auth = LearnerAuth(cfg.keys_dir, self._ctx).start()
            self._auth.secure(sock)
        bind(sock, cfg.address)
        self.bound = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._sock = sock
        if cfg.weights_address:
            secure = None
            if cfg.keys_dir is not None:
                from functools import partial

                from robo_async.transport.curve import secure_client

                secure = partial(secure_client, keys_dir=cfg.keys_dir, actor_id=cfg.key_id)
            self._weights = WeightClient(cfg.weights_address, secure=secure).start()
        log.info(
            "policy server: %s (%s, horizon %d) on %s%s",
            type(self.policy).__name__,
            self.policy.architecture,
            self.policy.horizon,
            self.bound,
            f", weights from {cfg.weights_address}" if cfg.weights_address else "",
        )
        return self

    def start(self) -> PolicyServer:
        """Open and serve on a daemon thread (tests, benchmarks); `close()` stops it."""
        if self._sock is None:
            self.open()
        self._thread = threading.Thread(target=self._serve_guarded, name="policy-server", daemon=True)
        self._thread.start()
        return self

    def _serve_guarded(self) -> None:
        try:
            self.serve(self._stop)
        except BaseException as e:
            self.failure = e
            log.exception("policy server died")

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._weights is not None:
            self._weights.close()
        if self._sock is not None:
            self._sock.close(linger=0)
            self._sock = None
        if self._auth is not None:
            self._auth.stop()

    def stats(self) -> dict[str, object]:
        return {
            "requests": self.requests,
            "chunks": self.chunks,
            "batches": self.batches,
            "malformed": self.malformed,
            "refused": self.refused,
            "errors": self.errors,
            "version": self.policy.version,
            "weight_swaps": self.weight_swaps,
            "weights_rejected": self.weights_rejected,
            "batch_sizes": {str(k): v for k, v in sorted(self.batch_sizes.items())},
            "busy_s": round(self.busy_s, 3),
        }

    # --- the loop -----------------------------------------------------------------------------
    def serve(self, stop: threading.Event | None = None) -> None:
        if self._sock is None:
            self.open()
        sock = self._sock
        assert sock is not None
        stop = stop or self._stop
        while not stop.is_set():
            self._swap_weights()
            if not sock.poll(50):
                continue
            batch: list[tuple[list, InferRequest]] = []
            # waiting up to half a forward pass for an actor that is about to ask costs it less than
            # the whole next pass it would wait otherwise
            window = max(self.config.batch_window_ms / 1000, 0.5 * self._pass_s)
            deadline = time.monotonic() + window
            while len(batch) < self.config.max_batch:
                if not sock.poll(0):
                    # wait for more only while an actor heard from recently has not asked yet
                    left = deadline - time.monotonic()
                    asked = {m.actor_id for _, m in batch}
                    if left <= 0 or not batch or self._active.keys() <= asked or not sock.poll(int(left * 1000) + 1):
                        break
                item = self._receive_one(sock)
                if item is not None:
                    batch.append(item)
            if len(self._active) > len(batch):  # forget actors silent for a second
                cutoff = time.monotonic() - 1.0
                self._active = {a: t for a, t in self._active.items() if t >= cutoff}
            if batch:
                self._answer(batch)

    def _receive_one(self, sock: zmq.Socket) -> tuple[list, InferRequest] | None:
        """The next message from `sock`, taken whole (at most MAX_FRAMES parts past the envelope);
        whatever it makes fail here is a malformed message, counted with its reason, never the end
        of the server."""
        try:
            return self._receive(recv_frames(sock, max_frames=MAX_FRAMES + ENVELOPE_FRAMES))
        except WireError as e:
            return self._malformed(str(e))
        except zmq.ZMQError:
            raise
        except Exception as e:
            log.exception("policy server: a request failed in its handling")
            return self._malformed(f"{type(e).__name__}: {str(e)[:200]}")

    def _receive(self, frames: list[zmq.Frame]) -> tuple[list, InferRequest] | None:
        """(routing envelope, request) for an inference request; hellos are answered here;
        anything malformed is dropped and counted."""
        cut = next((i for i, f in enumerate(frames) if len(f.buffer) == 0), None)
        if cut is None or cut == 0:
            return self._malformed("no routing envelope (send [b'', header, arrays...] from a DEALER)")
        envelope, body = [f.bytes for f in frames[: cut + 1]], frames[cut + 1 :]
        try:
            msg = decode([f.buffer for f in body])
        except WireError as e:
            return self._malformed(str(e))
        if not isinstance(msg, InferRequest):
            return self._malformed(f"a {msg.kind} message; the policy server takes infer requests only")
        if self._auth is not None:
            from robo_async.transport.curve import actor_of

            admitted = actor_of(frames[-1])
            if admitted is not None and admitted != msg.actor_id:
                self.refused += 1
                self._send(
                    envelope,
                    ChunkReply(
                        msg.req,
                        self.policy.version,
                        self.policy.architecture,
                        error=f"this connection's key is actor {admitted}'s, not actor {msg.actor_id}'s",
                    ),
                )
                return None
        self._active[msg.actor_id] = time.monotonic()
        try:
            msg = _decoded(msg)
        except CorruptRecord as e:  # answered, so the actor asks again rather than waiting
            self._malformed(str(e))
            self._send(
                envelope,
                ChunkReply(
                    msg.req, self.policy.version, self.policy.architecture, error=f"bad camera frame: {e}"[:1000]
                ),
            )
            return None
        if msg.hello:
            self._hello(envelope, msg)
            return None
        self.requests += 1
        return envelope, msg

    def _malformed(self, why: str) -> None:
        self.malformed += 1
        if self.malformed <= 20 or self.malformed % 1000 == 0:
            log.warning("policy server: dropped a malformed request (%d so far): %s", self.malformed, why)
        return None

    def _hello(self, envelope: list, msg: InferRequest) -> None:
        p = self.policy
        error = ""
        if msg.spec != self.spec_json:
            error = (
                f"robot spec differs: {spec_difference(self.spec_json, msg.spec)} (this server serves {self.spec.name})"
            )
        elif msg.policy and self.config.policy_name and msg.policy != self.config.policy_name:
            error = (
                f"this server runs policy '{self.config.policy_name}' ({p.architecture}), "
                f"the actor expects '{msg.policy}'"
            )
        if error:
            self.refused += 1
            log.warning("policy server: refused actor %d: %s", msg.actor_id, error)
        else:
            log.info("policy server: actor %d connected", msg.actor_id)
        self._send(
            envelope,
            ChunkReply(msg.req, p.version, p.architecture, error=error, horizon=p.horizon, spec=self.spec_json),
        )

    def _answer(self, batch: list[tuple[list, InferRequest]]) -> None:
        groups: dict[tuple[bool, str], list[tuple[list, InferRequest]]] = {}
        for item in batch:
            groups.setdefault((item[1].deterministic, item[1].instruction), []).append(item)
        default = self.policy.instruction
        for (deterministic, instruction), items in groups.items():
            self.policy.deterministic = deterministic
            self.policy.instruction = instruction or default  # the actor's task, or the server's own
            reqs = [ChunkRequest(m.obs, m.forwarded_state, m.prefix, m.delay) for _, m in items]
            t0 = time.monotonic()
            try:
                chunks: list = self.policy.predict_chunks(reqs)
            except Exception as e:  # noqa: BLE001 - one bad request must not fail the others: retry alone
                if len(reqs) == 1:
                    chunks = [e]
                else:
                    chunks = []
                    for r in reqs:
                        try:
                            chunks.extend(self.policy.predict_chunks([r]))
                        except Exception as e1:  # noqa: BLE001
                            chunks.append(e1)
            took = time.monotonic() - t0
            self.policy.instruction = default  # restored before any reply leaves (a caller may look at once)
            self.busy_s += took
            self._pass_s = 0.8 * self._pass_s + 0.2 * took if self._pass_s else took
            self.batches += 1
            self.batch_sizes[len(items)] = self.batch_sizes.get(len(items), 0) + 1
            us = int(took * 1e6)
            for (envelope, m), c in zip(items, chunks, strict=False):
                self._send(envelope, self._reply(m, c, us, len(items)))
        self.policy.instruction = default

    def _reply(self, m: InferRequest, chunk: object, infer_us: int, batch: int) -> ChunkReply:
        p = self.policy
        if isinstance(chunk, BaseException):
            self.errors += 1
            if self.errors <= 20 or self.errors % 1000 == 0:
                log.error("policy server: request %d of actor %d failed: %s", m.req, m.actor_id, chunk)
            return ChunkReply(m.req, p.version, p.architecture, error=f"inference failed: {chunk}"[:1000])
        a = np.asarray(chunk.actions, np.float32)
        if a.ndim != 2 or a.shape[1] != self.spec.action_dim or len(a) == 0 or not np.isfinite(a).all():
            self.errors += 1
            return ChunkReply(
                m.req,
                p.version,
                p.architecture,
                error=f"the policy returned actions of shape {a.shape} (NaN/Inf or not [H, {self.spec.action_dim}])",
            )
        self.chunks += 1
        return ChunkReply(m.req, chunk.policy_version, p.architecture, a, infer_us=infer_us, batch=batch)

    def _send(self, envelope: list, reply: ChunkReply) -> None:
        assert self._sock is not None
        try:
            self._sock.send_multipart([*envelope, *encode(reply)], copy=False, flags=zmq.NOBLOCK)
        except zmq.Again:  # the actor's queue is full (gone): it re-requests what it still needs
            pass

    def _swap_weights(self) -> None:
        if self._weights is None:
            return
        w = self._weights.take_weights()
        if w is None:
            return
        try:
            check_architecture(w.version, w.architecture, self.policy, "this server")
            self.policy.load_weights(w.version, w.arrays)
            self.weight_swaps += 1
        except (WeightsMismatch, ValueError) as e:
            self.weights_rejected += 1
            log.error("policy server: rejected weights, keeping v%d: %s", self.policy.version, e)

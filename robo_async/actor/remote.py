"""A policy that runs on a policy server (`robo-async serve`): the edge actor's side.

`RemotePolicy` is a `Policy`: the actor's asynchronous runner (`inference.InferenceEngine`) calls
its `predict_chunk` on an inference thread exactly as it calls a local policy's, so forwarding,
RTC prefixes, chunk merging and the control loop are the same code; the control loop never waits
on the network (it holds when no chunk has come). Per request:

- a DEALER socket per inference thread sends `InferRequest` (observation, forwarded state,
  delay in ticks, prefix) and waits for the `ChunkReply` with the same request id;
- no reply within 2x the p95 round trip (at least `min_retry_s`): the request is sent again
  (a lost request or reply), waiting twice as long each time (a slow server is not flooded), and
  the first answer to any of the tries is taken; after `give_up_s` it raises (the engine drops
  the chunk, counts it, and the runner asks again about the state then);
- a reply for another request (a late duplicate) or a malformed one is dropped and counted;
- a reply from another architecture than the hello named (the server was swapped) is refused.

`connect()` says hello first: the server answers with its architecture, horizon and robot spec,
or refuses (another robot spec, another policy), which raises `RemotePolicyError` naming why.
While the server is down it waits, saying every few seconds where it is trying.
Weights never pass through the actor: the server subscribes to the learner's publisher; every
chunk carries the version that computed it (`version`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from threading import Event

import numpy as np
import torch
import zmq

from hal.spec import RobotSpec
from policies.base import ActionChunk, Policy, WeightsMismatch
from robo_async.actor.latency import LatencyTracker
from robo_async.buffer.codec import encode_image
from robo_async.transport.robot_spec import spec_difference, spec_json
from robo_async.transport.stats import ActorStats
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
Secure = Callable[[zmq.Socket], None]


class RemotePolicyError(RuntimeError):
    """The policy server refused this actor (another robot spec or policy), named."""


class ServerUnavailable(TimeoutError):
    """No answer from the policy server within the time allowed."""


class RemotePolicy(Policy):
    """A `Policy` whose chunks come from a policy server (see the module's docstring); its `stats()`
    are the heartbeat's server figures. The actor subscribes to the learner's statuses only."""

    remote = True  # the actor does not subscribe this policy to the learner's weights

    def __init__(
        self,
        address: str,
        spec: RobotSpec,
        actor_id: int = 0,
        policy: str = "",
        secure: Secure | None = None,
        min_retry_s: float = 0.15,
        give_up_s: float = 5.0,
        max_message_mb: float = 64.0,
        instruction: str = "",
        image_codec: str = "jpeg",
        jpeg_quality: int = 90,
    ) -> None:
        if image_codec not in ("jpeg", "png", "qoi", "raw"):
            raise ValueError(f"image_codec must be jpeg, png, qoi or raw, not '{image_codec}'")
        self.image_codec, self.jpeg_quality = image_codec, int(jpeg_quality)
        self.address, self.spec, self.actor_id, self.policy_name = address, spec, actor_id, policy
        self._secure = secure
        self.min_retry_s, self.give_up_s = min_retry_s, give_up_s
        self._max_bytes = int(max_message_mb * 2**20)
        self._spec_json = spec_json(spec)
        self._arch = ""
        self.horizon = 1
        self.version = -1
        self.deterministic = False
        self.instruction = instruction  # sent with every request ("": the server's policy's own)
        # request -> reply of inferences, seconds (sets the retry time); until some have come back a
        # first inference (torch's slow first call on the server) is given 2 x 0.5 s before a resend
        self.rtt = LatencyTracker(window=50, initial_s=0.5)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._next_req = 0
        self._sockets: list[zmq.Socket] = []
        self.rerequests = self.stale_replies = self.malformed = self.refused = self.replies = 0
        self.server_infer_ms = 0.0  # the server's compute time for the last reply's batch
        self.server_batch = 0

    # --- Policy -------------------------------------------------------------------------------
    @property
    def architecture(self) -> str:
        return self._arch or "remote (not connected)"

    def module(self) -> torch.nn.Module:
        return torch.nn.Module()  # no parameters here: they live on the server

    def load_weights(self, version: int, arrays: Mapping[str, np.ndarray]) -> None:
        raise WeightsMismatch("a remote policy's weights reach its server from the learner, not the actor")

    def predict_chunk(
        self,
        obs: Mapping[str, np.ndarray],
        *,
        forwarded_state: np.ndarray | None = None,
        prefix: np.ndarray | None = None,
        delay_ticks: int = 0,
    ) -> ActionChunk:
        if not self._arch:
            self.connect(self.give_up_s)
        req = InferRequest(
            self.actor_id,
            self._req_id(),
            delay=int(min(max(delay_ticks, 0), 4096)),
            deterministic=bool(self.deterministic),
            obs=self._encoded(obs),
            forwarded_state=None if forwarded_state is None else np.asarray(forwarded_state, np.float32),
            prefix=None if prefix is None or not len(prefix) else np.asarray(prefix, np.float32),
            instruction=self.instruction,
        )
        reply = self._exchange(req, self.give_up_s)
        if reply.error:
            raise RuntimeError(f"policy server {self.address}: {reply.error}")
        if reply.architecture != self._arch:
            self.refused += 1
            raise RemotePolicyError(
                f"policy server {self.address} now answers for {reply.architecture}, "
                f"it said {self._arch}: chunk refused"
            )
        if reply.actions is None:
            raise ValueError(f"policy server {self.address} answered request {req.req} without actions")
        if reply.actions.shape[1] != self.spec.action_dim:
            raise ValueError(
                f"policy server {self.address} sent actions of shape {reply.actions.shape} "
                f"for {self.spec.action_dim} joints"
            )
        self.version = reply.version
        self.server_infer_ms, self.server_batch = reply.infer_us / 1000, reply.batch
        return ActionChunk(np.array(reply.actions, np.float32), self.spec.dt, reply.version)

    def _encoded(self, obs: Mapping[str, np.ndarray]) -> dict:
        """Camera frames (uint8 H x W x C) encoded (`image_codec`: JPEG by default, about 20x
        fewer bytes than raw pixels on the link; png/qoi lossless; raw as they are)."""
        out: dict = {}
        for k, v in obs.items():
            a = np.asarray(v)
            if self.image_codec != "raw" and a.dtype == np.uint8 and a.ndim == 3 and a.shape[2] in (1, 3, 4):
                out[k] = Frames([encode_image(a, self.image_codec, self.jpeg_quality)], (1, *a.shape))
            else:
                out[k] = a
        return out

    # --- connection ---------------------------------------------------------------------------
    def connect(self, wait_s: float = 120.0, stop: Event | None = None, say_every_s: float = 5.0) -> None:
        """Hello until the server answers (saying every `say_every_s` where this actor is trying);
        raises RemotePolicyError when it refuses, ServerUnavailable after `wait_s`."""
        t0 = time.monotonic()
        next_say = t0 + min(say_every_s, 1.0)
        while True:
            left = t0 + wait_s - time.monotonic()
            if left <= 0 or (stop is not None and stop.is_set()):
                raise ServerUnavailable(
                    f"actor {self.actor_id}: no policy server answered at {self.address} in {wait_s:g} s"
                )
            try:
                reply = self._exchange(
                    InferRequest(
                        self.actor_id, self._req_id(), hello=True, policy=self.policy_name, spec=self._spec_json
                    ),
                    min(left, 1.0),
                )
                break
            except ServerUnavailable:
                if time.monotonic() >= next_say:
                    next_say = time.monotonic() + say_every_s
                    log.warning(
                        "actor %d: waiting for the policy server at %s (%.0f s); the robot holds",
                        self.actor_id,
                        self.address,
                        time.monotonic() - t0,
                    )
        if reply.error:
            self.refused += 1
            raise RemotePolicyError(
                f"actor {self.actor_id}: the policy server at {self.address} refused: {reply.error}"
            )
        if reply.spec and reply.spec != self._spec_json:
            self.refused += 1
            raise RemotePolicyError(
                f"actor {self.actor_id}: the policy server at {self.address} serves another robot: "
                f"{spec_difference(reply.spec, self._spec_json)}"
            )
        if reply.horizon < 1:
            raise RemotePolicyError(f"the policy server at {self.address} named no chunk horizon")
        self._arch, self.horizon, self.version = reply.architecture, reply.horizon, reply.version
        log.info(
            "actor %d: policy server %s: %s, horizon %d, weights v%d",
            self.actor_id,
            self.address,
            self._arch,
            self.horizon,
            self.version,
        )

    def _req_id(self) -> int:
        with self._lock:
            self._next_req += 1
            return self._next_req

    def _socket(self) -> zmq.Socket:
        sock = getattr(self._local, "sock", None)
        if sock is not None:
            return sock
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IMMEDIATE, 1)  # nothing queued for a connection that is not up
        sock.setsockopt(zmq.MAXMSGSIZE, self._max_bytes)
        if self._secure is not None:
            self._secure(sock)
        sock.connect(self.address)
        self._local.sock = sock
        with self._lock:
            self._sockets.append(sock)
        return sock

    def _exchange(self, req: InferRequest, give_up_s: float) -> ChunkReply:
        """Send `req` and return its reply; re-sent with backoff until `give_up_s` (ServerUnavailable)."""
        frames = [b"", *encode(req)]
        t0 = time.monotonic()
        deadline = t0 + give_up_s
        sock, tries, first_sent = self._socket(), 0, 0.0
        wait = max(self.min_retry_s, 2 * self.rtt.percentile(95))
        while time.monotonic() < deadline:
            try:
                sock.send_multipart(frames, copy=False, flags=zmq.NOBLOCK)
            except zmq.Again:  # not connected (the server is down): wait for the connection
                sock.poll(int(min(max(deadline - time.monotonic(), 0), 0.1) * 1000) + 1, zmq.POLLOUT)
                continue
            tries += 1
            if tries > 1:
                self.rerequests += 1
            first_sent = first_sent or time.monotonic()
            retry_at = min(deadline, time.monotonic() + wait)
            wait *= 2  # backoff: a slow answer is waited for longer each time, never re-asked at a fixed rate
            while (left := retry_at - time.monotonic()) > 0:
                if not sock.poll(int(left * 1000) + 1):
                    break
                reply = self._read_one(sock)
                if reply is None:
                    continue
                if reply.req != req.req:  # a late duplicate, or the answer to a request given up on
                    self.stale_replies += 1
                    continue
                self.replies += 1  # the answer to any try of this request (the same question)
                if not req.hello:  # a hello costs no inference: not what a chunk's round trip is
                    self.rtt.add(time.monotonic() - first_sent)
                return reply
        raise ServerUnavailable(f"policy server {self.address}: no answer in {give_up_s:.1f} s ({tries} tries)")

    def _read_one(self, sock: zmq.Socket) -> ChunkReply | None:
        """The next reply from `sock` (at most MAX_FRAMES parts), or None for a malformed one."""
        try:
            frames = recv_frames(sock, max_frames=MAX_FRAMES + 1)
        except WireError as e:
            return self._bad(e)
        return self._read(frames)

    def _bad(self, e: Exception) -> None:
        self.malformed += 1
        if self.malformed <= 20 or self.malformed % 1000 == 0:
            log.warning(
                "actor %d: dropped a malformed reply from the policy server (%d so far): %s",
                self.actor_id,
                self.malformed,
                e,
            )

    def _read(self, frames: list[zmq.Frame]) -> ChunkReply | None:
        try:
            if not frames or len(frames[0].buffer) != 0:
                raise WireError("reply without the empty delimiter frame")
            msg = decode([f.buffer for f in frames[1:]])
            if not isinstance(msg, ChunkReply):
                raise WireError(f"a {msg.kind} message where a chunk was expected")
            return msg
        except WireError as e:
            return self._bad(e)

    def stats(self) -> ActorStats:
        """The heartbeat's policy-server figures: round trips, re-requests, dropped and refused replies."""
        return ActorStats(
            server_rtt_p95_ms=round(self.rtt.percentile(95) * 1000, 2),
            rerequests=self.rerequests,
            stale_replies=self.stale_replies,
            bad_replies=self.malformed,
            server_refused=self.refused,
            server_infer_ms=round(self.server_infer_ms, 2),
        )

    def close(self) -> None:
        with self._lock:
            for s in self._sockets:
                s.close(linger=0)
            self._sockets.clear()

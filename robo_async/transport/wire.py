"""Wire format: a msgpack header frame followed by one raw frame per array. Never pickle.

Header: {"schema": SCHEMA, "kind": str, <the kind's fields>, "arrays": [[name, dtype, shape], ...]}
A camera column encoded at the actor (`Frames`) is `[name, "frames", [n, H, W, C], [len, ...]]`
with one data frame holding its n encoded images back to back. A heartbeat's figures travel as
`"stats": {field: value}`, the `ActorStats` fields the actor filled.

The message types live in `messages.py` (and `stats.py`), what a received message must satisfy
in `checks.py` (the envelope; each kind's fields in `kind_checks.py` and `weight_checks.py`, the limits
in `limits.py`); this module encodes them and is where the rest of the code imports all three from:

    frames = encode(msg)                  # socket.send_multipart(frames, copy=False)
    msg = decode(frames)                  # WireError naming what was wrong, never a crash
"""

from __future__ import annotations

from collections.abc import Mapping

import msgpack
import numpy as np
import zmq

from robo_async.transport.checks import decode
from robo_async.transport.kind_checks import actor_stats
from robo_async.transport.limits import EPISODE_LABELS, MAX_ACTOR_ID, MAX_COUNT, MAX_FIGURE, MAX_FRAMES
from robo_async.transport.messages import (
    DTYPES,
    FINAL_OBS,
    KINDS,
    OPERATOR,
    POLICY,
    SCHEMA,
    TAKEOVER,
    ChunkReply,
    EpisodeStats,
    Frames,
    Heartbeat,
    InferRequest,
    LearnerStatus,
    Message,
    StreamGap,
    TransitionBatch,
    WeightPart,
    Weights,
    WireError,
    expand_next_obs,
    is_image_column,
    standard_columns,
)
from robo_async.transport.stats import ActorStats

__all__ = [
    "DTYPES",
    "EPISODE_LABELS",
    "FINAL_OBS",
    "KINDS",
    "MAX_ACTOR_ID",
    "MAX_COUNT",
    "MAX_FIGURE",
    "OPERATOR",
    "POLICY",
    "SCHEMA",
    "TAKEOVER",
    "ActorStats",
    "ChunkReply",
    "EpisodeStats",
    "Frames",
    "Heartbeat",
    "StreamGap",
    "InferRequest",
    "LearnerStatus",
    "Message",
    "TransitionBatch",
    "WeightPart",
    "Weights",
    "WireError",
    "MAX_FRAMES",
    "actor_stats",
    "decode",
    "encode",
    "expand_next_obs",
    "is_image_column",
    "recv_frames",
    "standard_columns",
]

_DTYPE_NAMES = {np.dtype(n): n for n in DTYPES}


def _pack(kind: str, arrays: Mapping[str, np.ndarray | Frames], **fields: object) -> list[bytes | memoryview]:
    specs: list[list[object]] = []
    frames: list[bytes | memoryview] = []
    for name, arr in arrays.items():
        if isinstance(arr, Frames):
            specs.append([name, "frames", list(arr.shape), [len(b) for b in arr.blobs]])
            frames.append(b"".join(arr.blobs))
            continue
        a = np.asarray(arr)
        a = a if a.flags.c_contiguous else np.ascontiguousarray(a)  # (ascontiguousarray makes 0-d arrays 1-d)
        dtype = _DTYPE_NAMES.get(a.dtype)  # a dict lookup: `dtype.name` costs microseconds per call
        if dtype is None:
            raise WireError(f"array '{name}' has dtype {a.dtype.name}; allowed: {sorted(DTYPES)}")
        specs.append([name, dtype, list(a.shape)])
        frames.append(memoryview(a).cast("B") if a.size else b"")
    header = {"schema": SCHEMA, "kind": kind, "arrays": specs, **fields}
    return [msgpack.packb(header, use_bin_type=True), *frames]


def encode(msg: Message) -> list[bytes | memoryview]:
    """Frames for `socket.send_multipart(frames, copy=False)`."""
    if isinstance(msg, TransitionBatch):
        return _pack(msg.kind, msg.arrays, actor_id=msg.actor_id, seq=msg.seq)
    if isinstance(msg, Weights):
        return _pack(msg.kind, msg.arrays, version=msg.version, architecture=msg.architecture)
    if isinstance(msg, WeightPart):
        return _pack(
            msg.kind,
            msg.arrays,
            version=msg.version,
            part=msg.part,
            parts=msg.parts,
            base=msg.base,
            precision=msg.precision,
            architecture=msg.architecture,
            manifest=[[n, list(sh), dt, c] for n, sh, dt, c in msg.manifest],
            sums=[[n, c] for n, c in msg.sums],
        )
    if isinstance(msg, (EpisodeStats, LearnerStatus, StreamGap)):
        return _pack(msg.kind, {}, **{k: getattr(msg, k) for k in msg.__dataclass_fields__})
    if isinstance(msg, Heartbeat):
        return _pack(
            msg.kind,
            {},
            actor_id=msg.actor_id,
            env_steps=msg.env_steps,
            policy_version=msg.policy_version,
            stats=msg.stats.figures(),
        )
    if isinstance(msg, InferRequest):
        arrays: dict[str, np.ndarray | Frames] = {f"obs/{k}": v for k, v in msg.obs.items()}
        if msg.forwarded_state is not None:
            arrays["fstate"] = msg.forwarded_state
        if msg.prefix is not None:
            arrays["prefix"] = msg.prefix
        return _pack(
            msg.kind,
            arrays,
            actor_id=msg.actor_id,
            req=msg.req,
            tick=msg.tick,
            delay=msg.delay,
            deterministic=msg.deterministic,
            hello=msg.hello,
            policy=msg.policy,
            spec=msg.spec,
            instruction=msg.instruction,
        )
    if isinstance(msg, ChunkReply):
        return _pack(
            msg.kind,
            {} if msg.actions is None else {"actions": msg.actions},
            req=msg.req,
            version=msg.version,
            architecture=msg.architecture,
            error=msg.error,
            horizon=msg.horizon,
            spec=msg.spec,
            infer_us=msg.infer_us,
            batch=msg.batch,
        )
    raise WireError(f"cannot encode {type(msg).__name__}")


def recv_frames(sock: zmq.Socket, flags: int = 0, max_frames: int = MAX_FRAMES) -> list[zmq.Frame]:
    """One multipart message from `sock` (zero-copy frames), its parts taken one at a time: a
    message of more than `max_frames` parts is read to its end and refused (`WireError`) without
    its parts being kept (a hostile peer's millions of empty frames are never a Python list).
    `zmq.Again` as `recv` raises it (flags=zmq.NOBLOCK and nothing queued)."""
    frames = [sock.recv(flags, copy=False)]
    while frames[-1].more:
        if len(frames) >= max_frames:
            n = len(frames)
            while sock.getsockopt(zmq.RCVMORE):
                sock.recv()  # the rest of the message, dropped part by part
                n += 1
            raise WireError(f"message of {n} frames; at most {max_frames}")
        frames.append(sock.recv(copy=False))
    return frames

"""The messages actors, the learner and the policy server exchange: frozen dataclasses, one per
`kind`, with what each field means. `wire.py` turns them into frames and back (`checks.py`,
`kind_checks.py`, `weight_checks.py` and `limits.py` hold what a received one must satisfy)."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from robo_async.transport.stats import ActorStats

SCHEMA = 1  # the header's "schema": a receiver refuses any other
DTYPES = frozenset({"float32", "float64", "float16", "int64", "int32", "uint8", "bool"})  # array dtypes allowed


class WireError(ValueError):
    """A message that cannot be decoded or does not match the schema. `stream`: for transitions
    whose header and batch size were readable, (actor_id, seq, count) of what was refused (the
    learner passes over that range of the stream rather than wait for it forever)."""

    def __init__(self, message: str, stream: tuple[int, int, int] | None = None) -> None:
        super().__init__(message)
        self.stream = stream


FRAME_TAGS = frozenset(b"QPJ")  # first byte of an encoded image: QOI, PNG, JPEG (see buffer/codec.py)
MAX_SIDE = 8192


class Frames:
    """A uint8 [n, H, W, C] camera column encoded image by image (`buffer.codec.encode_image`
    blobs: codec tag, crc32, payload), as actors send it: learners store the bytes as they came
    (and decode them once, which checks them, for the RAM cache). Slicing and `len` work on rows;
    `frames[i]` is row i's blob."""

    dtype = np.dtype(np.uint8)
    ndim = 4

    def __init__(self, blobs: Sequence[bytes], shape: Sequence[int]) -> None:
        self.blobs = list(blobs)
        self.shape = tuple(int(d) for d in shape)
        if len(self.shape) != 4 or self.shape[0] != len(self.blobs):
            raise WireError(f"frames of shape {self.shape} hold {len(self.blobs)} images")

    @property
    def nbytes(self) -> int:
        """Encoded bytes in all (what the wire and the store carry)."""
        return sum(len(b) for b in self.blobs)

    def __len__(self) -> int:
        return len(self.blobs)

    def __getitem__(self, i: int | slice) -> bytes | Frames:
        if isinstance(i, slice):
            blobs = self.blobs[i]
            return Frames(blobs, (len(blobs), *self.shape[1:]))
        return self.blobs[i]

    @staticmethod
    def concat(parts: Sequence[Frames]) -> Frames:
        """The rows of `parts`, in order, as one column (the same image size)."""
        blobs = [b for p in parts for b in p.blobs]
        return Frames(blobs, (len(blobs), *parts[0].shape[1:]))

    @staticmethod
    def max_blob(shape: Sequence[int]) -> int:
        """The largest encoded image accepted for one [H, W, C] frame: above QOI's and PNG's
        worst case for incompressible pixels (about (C+1)/C and 1 + 1/(W*C) of the raw size)."""
        h, w, c = shape
        return h * w * (c + 1) + h + 1024


def is_image_column(a: object) -> bool:
    """uint8 [n, H, W, C] arrays (C in 1, 3, 4) are camera frames (`Frames` once encoded)."""
    return isinstance(a, Frames) or (
        isinstance(a, np.ndarray) and a.dtype == np.uint8 and a.ndim == 4 and a.shape[3] in (1, 3, 4)
    )


FINAL_OBS = "final_obs/"  # compact batches: the last row's next observation (see expand_next_obs)


POLICY, OPERATOR, TAKEOVER = 0, 1, 2  # `intervention` values: who acted on a tick


def standard_columns(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`arrays` with the human-in-the-loop columns every store holds: `intervention` (0: the
    policy acted) and `policy_action` (= `action`) added when a batch (demos, imports, older
    actors) has none; present ones are checked (type, range, shape)."""
    out = dict(arrays)
    action = out.get("action")
    if not isinstance(action, np.ndarray) or action.ndim != 2:
        return out  # the store's schema check names what is wrong
    n = action.shape[0]
    if "intervention" not in out:
        out["intervention"] = np.zeros(n, np.uint8)
    if "policy_action" not in out:
        out["policy_action"] = action.astype(np.float32, copy=False)
    iv, pa = out["intervention"], out["policy_action"]
    if not isinstance(iv, np.ndarray) or iv.dtype != np.uint8 or iv.shape != (n,) or (n and int(iv.max()) > TAKEOVER):
        raise WireError(
            f"'intervention' must be uint8[{n}] with values 0..{TAKEOVER}, got "
            f"{getattr(iv, 'dtype', type(iv).__name__)}{getattr(iv, 'shape', '')}"
        )
    if (
        not isinstance(pa, np.ndarray)
        or pa.dtype != np.float32
        or pa.shape != action.shape
        or not np.isfinite(pa).all()
    ):
        raise WireError(
            f"'policy_action' must be finite float32{action.shape} like 'action', got "
            f"{getattr(pa, 'dtype', type(pa).__name__)}{getattr(pa, 'shape', '')}"
        )
    return out


def expand_next_obs(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A compact batch (`obs/<k>` [n] + `final_obs/<k>` [1], consecutive ticks of one episode)
    with `next_obs/<k>` = obs[1:] + final rebuilt; a full batch is returned as it is."""
    finals = [k for k in arrays if k.startswith(FINAL_OBS)]
    if not finals:
        return dict(arrays)
    out = {k: v for k, v in arrays.items() if not k.startswith(FINAL_OBS)}
    for k in finals:
        name = k[len(FINAL_OBS) :]
        obs, last = arrays.get(f"obs/{name}"), arrays[k]
        if obs is None or f"next_obs/{name}" in arrays:
            raise WireError(f"'{k}' needs 'obs/{name}' and no 'next_obs/{name}' beside it")
        if last.shape[:1] != (1,) or last.shape[1:] != obs.shape[1:] or last.dtype != obs.dtype:
            raise WireError(f"'{k}' is {last.dtype}{last.shape}, expected {obs.dtype}(1, *{obs.shape[1:]})")
        if isinstance(obs, Frames) != isinstance(last, Frames):
            raise WireError(f"'{k}' and 'obs/{name}' must both be encoded frames or both raw")
        out[f"next_obs/{name}"] = (
            Frames.concat([obs[1:], last]) if isinstance(obs, Frames) else np.concatenate([obs[1:], last])
        )
    return out


@dataclass(frozen=True)
class TransitionBatch:
    """`count` consecutive transitions from one actor, numbered `seq .. seq+count-1`.

    Arrays all have leading dimension `count`: `obs/<key>`, `next_obs/<key>`, `action`, `reward`,
    `terminated`, `truncated`, `policy_version` and, from actors, `success` (the task's own judgement),
    `intervention` (uint8: 0 the policy acted, 1 an operator, 2 an operator's first tick of a
    takeover) and `policy_action` (what the policy would have done; the action itself when it acted).
    Stores fill the last two for batches without them (`standard_columns`).
    """

    actor_id: int
    seq: int
    arrays: Mapping[str, np.ndarray]

    kind = "transitions"

    @property
    def count(self) -> int:
        """Transitions in the batch."""
        return int(self.arrays["reward"].shape[0])


@dataclass(frozen=True)
class StreamGap:
    """An actor's declaration that seqs `seq .. seq+count-1` of its stream will never come (their
    batch is gone from its journal: damaged, or lost): the learner passes over them if they are the
    next it expects (counted in `buffer/rows_refused`, named in its log) instead of waiting forever.
    Sent in the stream's order, again with the resends, until acked."""

    actor_id: int
    seq: int
    count: int
    reason: str = ""

    kind = "gap"


@dataclass(frozen=True)
class EpisodeStats:
    """Summary of one finished episode on an actor."""

    actor_id: int
    episode: int
    episode_return: float
    length: int
    success: bool
    policy_version: int
    evaluation: bool = False  # run with the deterministic policy (no exploration noise)
    operator_ticks: int = 0  # ticks an operator drove (takeovers)
    label: str = ""  # an operator's label that ended it: success, failure, rerecord ("" none)

    kind = "episode"

    def __post_init__(self) -> None:  # numpy scalars from a task become plain values (msgpack)
        for name, cast in (
            ("actor_id", int),
            ("episode", int),
            ("episode_return", float),
            ("length", int),
            ("success", bool),
            ("policy_version", int),
            ("evaluation", bool),
            ("operator_ticks", int),
            ("label", str),
        ):
            object.__setattr__(self, name, cast(getattr(self, name)))


@dataclass(frozen=True)
class Weights:
    """A versioned set of named parameter arrays (a policy's state dict as numpy)."""

    version: int
    arrays: Mapping[str, np.ndarray]
    architecture: str = ""  # e.g. "mlp:15-256-256-12"; actors refuse weights of another shape

    kind = "weights"


@dataclass(frozen=True)
class WeightPart:
    """One part of a streamed weight push (transport/weights.py): pieces of arrays, and in part 0
    the manifest `(name, shape, transmitted dtype, xxh3-64 digest)` of every array. A keyframe's
    digests come as it goes: `sums` lists those of the arrays whose last piece this part carries
    (their manifest digest is 0); a delta lists its digests in the manifest."""

    version: int
    part: int
    parts: int
    base: int  # -1: a keyframe (every element); else the keyframe version this delta applies to
    precision: str  # fp32 | fp16
    architecture: str
    manifest: tuple[tuple[str, tuple[int, ...], str, int], ...]
    arrays: Mapping[str, np.ndarray]
    sums: tuple[tuple[str, int], ...] = ()  # (array, xxh3-64 digest) of arrays completed in this part

    kind = "wpart"


@dataclass(frozen=True)
class LearnerStatus:
    """Published by the learner several times a second: progress and the actors' step allowance."""

    updates: int
    version: int
    env_steps: int  # transitions received so far
    allowed_env_steps: int  # actors pause (in as-fast-as-possible sim mode) beyond this
    stopping: bool = False
    boot_id: str = ""  # new on every learner start: actors resend everything unacked when it changes
    acked: tuple[tuple[int, int], ...] = ()  # (actor_id, next seq): every transition below is committed
    actors: int = 1  # actors heard from recently; each may produce its share of the allowance
    paused: bool = False  # ingest paused (disk nearly full, writer behind): acks stall by design, no resends

    def acked_for(self, actor_id: int) -> int | None:
        """The next seq of `actor_id` the learner has not committed (all below are), or None."""
        return self._acked_by_actor.get(actor_id)

    @functools.cached_property
    def _acked_by_actor(self) -> dict[int, int]:
        # built once per status: a vectorized actor's 64 streams each look themselves up in it
        return dict(reversed(self.acked))  # the first entry of an id wins, as a scan would find it

    kind = "status"


@dataclass(frozen=True)
class Heartbeat:
    """Sent by each actor every `actor.heartbeat_s`: how far it is and its figures (`ActorStats`)."""

    actor_id: int
    env_steps: int  # ticks this actor ran since it started
    policy_version: int  # the weights it acts with (-1: none yet)
    stats: ActorStats = ActorStats()

    kind = "heartbeat"


@dataclass(frozen=True)
class InferRequest:
    """An edge actor asks the policy server (`robo_async/serve`) for a chunk: about observation
    `obs` taken at tick `tick`, the chunk starting `delay` ticks later, the robot there at
    `forwarded_state` with `prefix` already committed (RTC). `hello`: no observation, a handshake
    naming the actor's robot spec (`spec`, JSON of `RobotSpec.signature()`) and the policy it
    expects (`policy`, "" any); the server answers with its architecture or refuses."""

    actor_id: int
    req: int  # request id, echoed by the reply (a reply for an older request is dropped)
    tick: int = 0
    delay: int = 0
    deterministic: bool = False
    obs: Mapping[str, np.ndarray | Frames] = field(default_factory=dict)  # a camera frame may come encoded
    forwarded_state: np.ndarray | None = None
    prefix: np.ndarray | None = None
    hello: bool = False
    policy: str = ""
    spec: str = ""
    instruction: str = ""  # the language task, for policies that follow one ("" the server's own)

    kind = "infer"


@dataclass(frozen=True)
class ChunkReply:
    """The server's answer to `InferRequest` `req`: `actions` [H, A] computed by weights `version`
    of `architecture`, or `error` (a refusal, named) and no actions. A hello's reply carries the
    server's `spec` and `horizon`."""

    req: int
    version: int
    architecture: str
    actions: np.ndarray | None = None
    error: str = ""
    horizon: int = 0
    spec: str = ""
    infer_us: int = 0  # the server's compute time for the batch this chunk was in
    batch: int = 0  # requests in that batch

    kind = "chunk"


Message = (
    TransitionBatch
    | EpisodeStats
    | Weights
    | WeightPart
    | LearnerStatus
    | Heartbeat
    | InferRequest
    | ChunkReply
    | StreamGap
)
KINDS: tuple[str, ...] = tuple(
    c.kind
    for c in (
        TransitionBatch,
        EpisodeStats,
        Weights,
        WeightPart,
        LearnerStatus,
        Heartbeat,
        InferRequest,
        ChunkReply,
        StreamGap,
    )
)

"""Wire format: a msgpack header frame followed by one raw frame per array. Never pickle.

Header: {"schema": SCHEMA, "kind": str, "version": int, "actor_id": int, "seq": int,
         "meta": {str: scalar}, "arrays": [[name, dtype, shape], ...]}
A camera column encoded at the actor (`Frames`) is `[name, "frames", [n, H, W, C], [len, ...]]`
with one data frame holding its n encoded images back to back.
Every decoded message is validated (schema, kind, frame count, dtype whitelist, byte sizes,
leading dimension agreement) before use; a bad one raises `WireError` naming what was wrong.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import msgpack
import numpy as np

SCHEMA = 1
DTYPES = frozenset({"float32", "float64", "float16", "int64", "int32", "uint8", "bool"})
_DTYPE_NAMES = {np.dtype(n): n for n in DTYPES}
Scalar = int | float | str | bool | None


class WireError(ValueError):
    """A message that cannot be decoded or does not match the schema."""


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
        return sum(len(b) for b in self.blobs)

    def __len__(self) -> int:
        return len(self.blobs)

    def __getitem__(self, i: int | slice) -> "bytes | Frames":
        if isinstance(i, slice):
            blobs = self.blobs[i]
            return Frames(blobs, (len(blobs), *self.shape[1:]))
        return self.blobs[i]

    @staticmethod
    def concat(parts: Sequence["Frames"]) -> "Frames":
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
    return isinstance(a, Frames) or (isinstance(a, np.ndarray) and a.dtype == np.uint8 and a.ndim == 4
                                     and a.shape[3] in (1, 3, 4))


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
        raise WireError(f"'intervention' must be uint8[{n}] with values 0..{TAKEOVER}, got "
                        f"{getattr(iv, 'dtype', type(iv).__name__)}{getattr(iv, 'shape', '')}")
    if not isinstance(pa, np.ndarray) or pa.dtype != np.float32 or pa.shape != action.shape \
            or not np.isfinite(pa).all():
        raise WireError(f"'policy_action' must be finite float32{action.shape} like 'action', got "
                        f"{getattr(pa, 'dtype', type(pa).__name__)}{getattr(pa, 'shape', '')}")
    return out


def expand_next_obs(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A compact batch (`obs/<k>` [n] + `final_obs/<k>` [1], consecutive ticks of one episode)
    with `next_obs/<k>` = obs[1:] + final rebuilt; a full batch is returned as it is."""
    finals = [k for k in arrays if k.startswith(FINAL_OBS)]
    if not finals:
        return dict(arrays)
    out = {k: v for k, v in arrays.items() if not k.startswith(FINAL_OBS)}
    for k in finals:
        name = k[len(FINAL_OBS):]
        obs, last = arrays.get(f"obs/{name}"), arrays[k]
        if obs is None or f"next_obs/{name}" in arrays:
            raise WireError(f"'{k}' needs 'obs/{name}' and no 'next_obs/{name}' beside it")
        if last.shape[:1] != (1,) or last.shape[1:] != obs.shape[1:] or last.dtype != obs.dtype:
            raise WireError(f"'{k}' is {last.dtype}{last.shape}, expected {obs.dtype}(1, *{obs.shape[1:]})")
        if isinstance(obs, Frames) != isinstance(last, Frames):
            raise WireError(f"'{k}' and 'obs/{name}' must both be encoded frames or both raw")
        out[f"next_obs/{name}"] = Frames.concat([obs[1:], last]) if isinstance(obs, Frames) \
            else np.concatenate([obs[1:], last])
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
        return int(self.arrays["reward"].shape[0])


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
        for name, cast in (("actor_id", int), ("episode", int), ("episode_return", float), ("length", int),
                           ("success", bool), ("policy_version", int), ("evaluation", bool),
                           ("operator_ticks", int), ("label", str)):
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
    the manifest `(name, shape, transmitted dtype, crc32)` of every array."""

    version: int
    part: int
    parts: int
    base: int  # -1: a keyframe (every element); else the keyframe version this delta applies to
    precision: str  # fp32 | fp16
    architecture: str
    manifest: tuple[tuple[str, tuple[int, ...], str, int], ...]
    arrays: Mapping[str, np.ndarray]

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

    def acked_for(self, actor_id: int) -> int | None:
        for a, s in self.acked:
            if a == actor_id:
                return s
        return None

    kind = "status"


@dataclass(frozen=True)
class Heartbeat:
    actor_id: int
    env_steps: int
    policy_version: int
    meta: Mapping[str, Scalar] = field(default_factory=dict)

    kind = "heartbeat"

    def __post_init__(self) -> None:  # numpy scalars in the figures become plain values (msgpack)
        object.__setattr__(self, "meta", {str(k): v.item() if isinstance(v, np.generic) else v
                                          for k, v in self.meta.items()})


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
    obs: Mapping[str, np.ndarray] = field(default_factory=dict)
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


Message = (TransitionBatch | EpisodeStats | Weights | WeightPart | LearnerStatus | Heartbeat | InferRequest
           | ChunkReply)
_KINDS = {c.kind: c for c in (TransitionBatch, EpisodeStats, Weights, WeightPart, LearnerStatus, Heartbeat,
                              InferRequest, ChunkReply)}


def _pack(kind: str, arrays: Mapping[str, np.ndarray], **fields: Scalar) -> list[bytes | memoryview]:
    specs, frames = [], []
    for name, arr in arrays.items():
        if isinstance(arr, Frames):
            specs.append([name, "frames", list(arr.shape), [len(b) for b in arr.blobs]])
            frames.append(b"".join(arr.blobs))
            continue
        a = np.ascontiguousarray(arr)
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
        return _pack(msg.kind, msg.arrays, version=msg.version, part=msg.part, parts=msg.parts, base=msg.base,
                     precision=msg.precision, architecture=msg.architecture,
                     manifest=[[n, list(sh), dt, c] for n, sh, dt, c in msg.manifest])
    if isinstance(msg, (EpisodeStats, LearnerStatus)):
        return _pack(msg.kind, {}, **{k: getattr(msg, k) for k in msg.__dataclass_fields__})
    if isinstance(msg, Heartbeat):
        return _pack(
            msg.kind, {}, actor_id=msg.actor_id, env_steps=msg.env_steps,
            policy_version=msg.policy_version, meta=dict(msg.meta),
        )
    if isinstance(msg, InferRequest):
        arrays = {f"obs/{k}": v for k, v in msg.obs.items()}
        if msg.forwarded_state is not None:
            arrays["fstate"] = msg.forwarded_state
        if msg.prefix is not None:
            arrays["prefix"] = msg.prefix
        return _pack(msg.kind, arrays, actor_id=msg.actor_id, req=msg.req, tick=msg.tick, delay=msg.delay,
                     deterministic=msg.deterministic, hello=msg.hello, policy=msg.policy, spec=msg.spec,
                     instruction=msg.instruction)
    if isinstance(msg, ChunkReply):
        return _pack(msg.kind, {} if msg.actions is None else {"actions": msg.actions}, req=msg.req,
                     version=msg.version, architecture=msg.architecture, error=msg.error, horizon=msg.horizon,
                     spec=msg.spec, infer_us=msg.infer_us, batch=msg.batch)
    raise WireError(f"cannot encode {type(msg).__name__}")


def _arrays(header: dict, frames: Sequence[bytes | memoryview]) -> dict[str, np.ndarray | Frames]:
    specs = header["arrays"]
    if len(specs) != len(frames):
        n = len(specs) if isinstance(specs, list) else "no"
        raise WireError(f"header lists {n} arrays but {len(frames)} data frames arrived")
    out: dict[str, np.ndarray | Frames] = {}
    for spec, frame in zip(specs, frames):
        name = spec[0] if isinstance(spec, list) and spec else None
        if type(name) is not str or not 0 < len(name) <= MAX_NAME or name in out:
            raise WireError(f"bad or repeated array name {_show(name)} (1-{MAX_NAME} chars, unique)")
        if isinstance(spec, list) and len(spec) == 4 and spec[1] == "frames":
            out[name] = _frames(spec, memoryview(frame))
            continue
        if not (isinstance(spec, list) and len(spec) == 3):
            raise WireError(f"bad array spec {_show(spec)}: expected [name, dtype, shape]")
        _, dtype, shape = spec
        if type(dtype) is not str or dtype not in DTYPES:
            raise WireError(f"array '{name}' has dtype {_show(dtype)}; allowed: {sorted(DTYPES)}")
        if not (isinstance(shape, list) and len(shape) <= MAX_NDIM
                and all(type(d) is int and 0 <= d <= 1 << 40 for d in shape)):
            raise WireError(f"array '{name}' has bad shape {_show(shape)}")
        buf = memoryview(frame)
        expected = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if buf.nbytes != expected:
            raise WireError(
                f"array '{name}' {dtype}{tuple(shape)} needs {expected} bytes, frame has {buf.nbytes}"
            )
        out[name] = np.frombuffer(buf, dtype=dtype).reshape(shape)
    return out


def _frames(spec: list, buf: memoryview) -> Frames:
    name, _, shape, lengths = spec
    if not isinstance(name, str):
        raise WireError(f"bad frames spec name {name!r}")
    if not (isinstance(shape, list) and len(shape) == 4 and all(type(d) is int for d in shape)
            and 0 <= shape[0] <= 1 << 20 and all(1 <= d <= MAX_SIDE for d in shape[1:3]) and shape[3] in (1, 3, 4)):
        raise WireError(f"frames '{name}' have bad shape {shape!r}: expected [n, H, W, C], C in 1, 3, 4")
    cap = Frames.max_blob(shape[1:])
    if not (isinstance(lengths, list) and len(lengths) == shape[0]
            and all(type(n) is int and 6 <= n <= cap for n in lengths)):
        raise WireError(f"frames '{name}' need {shape[0]} image lengths in [6, {cap}] bytes")
    if sum(lengths) != buf.nbytes:
        raise WireError(f"frames '{name}' list {sum(lengths)} bytes, frame has {buf.nbytes}")
    blobs, at = [], 0
    for n in lengths:
        blob = bytes(buf[at:at + n])
        if blob[0] not in FRAME_TAGS:
            raise WireError(f"frames '{name}': image {len(blobs)} has unknown codec tag {blob[:1]!r}")
        blobs.append(blob)
        at += n
    return Frames(blobs, shape)


EPISODE_LABELS = ("", "success", "failure", "rerecord")

# --- limits: every field of every message is checked for type, range and size -------------------
MAX_ACTOR_ID = 1 << 16  # actor ids are small integers (one per robot)
MAX_COUNT = 1 << 62  # seqs, versions, env steps, updates
MAX_HEADER_BYTES = 1 << 20  # msgpack header (array specs included)
MAX_NAME = 256  # array names (a weight piece: d:<parameter name>:<offset>)
MAX_TEXT = 256  # strings in headers (architecture, heartbeat values)
MAX_META = 64  # heartbeat figures
MAX_ARRAYS = {"transitions": 256, "weights": 1 << 16, "wpart": 1 << 16, "infer": 66, "chunk": 1}  # others: none
MAX_SPEC = 16_384  # a robot spec's signature (JSON) in a hello
MAX_HORIZON = 4096  # actions per chunk, ticks of delay
MAX_ACTION_DIM = 1024
MAX_NDIM = 8
TRANSITION_COLUMNS = frozenset({"action", "reward", "terminated", "truncated", "policy_version", "success",
                                "intervention", "policy_action"})
OBS_PREFIXES = ("obs/", "next_obs/", FINAL_OBS)
# the dtype each known transition column must have
COLUMN_DTYPES = {"reward": "float32", "terminated": "bool", "truncated": "bool", "policy_version": "int64",
                 "success": "bool", "intervention": "uint8", "action": "float32", "policy_action": "float32"}
_MISSING = object()


def _int(header: dict, name: str, lo: int, hi: int, default: object = _MISSING) -> int:
    value = header.get(name, default)
    if type(value) is not int or not lo <= value <= hi:
        raise WireError(f"header field '{name}' is {_show(value)}, expected an int in [{lo}, {hi}]")
    return value


def _bool(header: dict, name: str, default: object = _MISSING) -> bool:
    value = header.get(name, default)
    if type(value) is not bool:
        raise WireError(f"header field '{name}' is {_show(value)}, expected true or false")
    return value


def _text(header: dict, name: str, default: object = _MISSING, max_len: int = MAX_TEXT) -> str:
    value = header.get(name, default)
    if type(value) is not str or len(value) > max_len:
        raise WireError(f"header field '{name}' is {_show(value)}, expected a string of at most {max_len} chars")
    return value


def _finite(header: dict, name: str) -> float:
    value = header.get(name, _MISSING)
    if type(value) not in (int, float) or not np.isfinite(value) or abs(value) > 1e30:
        raise WireError(f"header field '{name}' is {_show(value)}, expected a finite number")
    return float(value)


def _show(value: object) -> str:
    if value is _MISSING:
        return "missing"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _meta(value: object) -> dict[str, Scalar]:
    """Heartbeat figures: at most MAX_META str -> scalar entries, every one bounded."""
    if not isinstance(value, dict) or len(value) > MAX_META:
        raise WireError(f"heartbeat 'meta' must be a map of at most {MAX_META} entries, got {_show(value)}")
    for k, v in value.items():
        if type(k) is not str or not 0 < len(k) <= 64:
            raise WireError(f"heartbeat 'meta' key {_show(k)} must be a string of 1-64 chars")
        ok = (v is None or type(v) is bool or (type(v) is int and -MAX_COUNT <= v <= MAX_COUNT)
              or type(v) is float or (type(v) is str and len(v) <= MAX_TEXT))
        if not ok:
            raise WireError(f"heartbeat 'meta' value of '{k}' is {_show(v)}, expected a bounded scalar")
    return value


_HEADER = {"schema", "kind", "arrays"}
_KIND_FIELDS = {
    "transitions": {"actor_id", "seq"},
    "weights": {"version", "architecture"},
    "wpart": {"version", "part", "parts", "base", "precision", "architecture", "manifest"},
    "episode": {"actor_id", "episode", "episode_return", "length", "success", "policy_version", "evaluation",
                "operator_ticks", "label"},
    "status": {"updates", "version", "env_steps", "allowed_env_steps", "stopping", "boot_id", "acked", "actors"},
    "heartbeat": {"actor_id", "env_steps", "policy_version", "meta"},
    "infer": {"actor_id", "req", "tick", "delay", "deterministic", "hello", "policy", "spec", "instruction"},
    "chunk": {"req", "version", "architecture", "error", "horizon", "spec", "infer_us", "batch"},
}


def _check_transition_arrays(arrays: dict[str, np.ndarray | Frames]) -> None:
    """Known columns only, with their dtypes; float columns finite; flags and versions in range."""
    for k, a in arrays.items():
        if not (k in TRANSITION_COLUMNS or (k.startswith(OBS_PREFIXES) and len(k.split("/", 1)[1]) > 0)):
            raise WireError(f"transitions carry an unknown array '{k}'; known: {sorted(TRANSITION_COLUMNS)} "
                            f"and obs/<key>, next_obs/<key>, {FINAL_OBS}<key>")
        want = COLUMN_DTYPES.get(k)
        if want is not None and a.dtype.name != want:
            raise WireError(f"transitions array '{k}' is {a.dtype.name}, expected {want}")
        if isinstance(a, np.ndarray) and a.dtype.kind == "f" and a.size and not np.isfinite(a).all():
            raise WireError(f"transitions array '{k}' has NaN or infinite values")
    pv = arrays["policy_version"]
    if pv.size and (int(pv.min()) < -1 or int(pv.max()) > MAX_COUNT):
        raise WireError(f"transitions 'policy_version' must lie in [-1, {MAX_COUNT}]")


def _weight_part(header: dict, arrays: dict[str, np.ndarray]) -> WeightPart:
    version = _int(header, "version", 0, MAX_COUNT)
    parts = _int(header, "parts", 1, 1 << 20)
    part = _int(header, "part", 0, parts - 1)
    base = _int(header, "base", -1, max(version - 1, -1))
    precision = header.get("precision")
    if precision not in ("fp32", "fp16"):
        raise WireError(f"wpart 'precision' is {_show(precision)}, expected fp32 or fp16")
    manifest = header.get("manifest")
    if not isinstance(manifest, list) or len(manifest) > MAX_ARRAYS["wpart"] or (part == 0) != bool(manifest):
        raise WireError(f"wpart 'manifest' must be a list of arrays in part 0 (only), got {_show(manifest)}")
    names = set()
    for m in manifest:
        if not (isinstance(m, list) and len(m) == 4 and type(m[0]) is str and 0 < len(m[0]) <= MAX_NAME
                and isinstance(m[1], list) and len(m[1]) <= MAX_NDIM
                and all(type(d) is int and 0 <= d <= 1 << 40 for d in m[1])
                and m[2] in DTYPES and type(m[3]) is int and 0 <= m[3] < 1 << 32) or m[0] in names:
            raise WireError(f"wpart manifest entry {_show(m)}: expected [name, shape, dtype, crc32], names unique")
        names.add(m[0])
    for name, a in arrays.items():
        kind, _, rest = name.partition(":")
        key, _, off = rest.rpartition(":")
        if kind not in ("d", "i", "v") or not key or not off.isdigit() or a.ndim != 1 \
                or (kind == "i" and a.dtype != np.int64) or (kind == "v" and f"i:{key}:{off}" not in arrays):
            raise WireError(f"wpart piece '{name}': expected d:|i:|v:<name>:<offset>, 1-D (indices int64)")
        if a.dtype.kind == "f" and a.size and not np.isfinite(a).all():
            raise WireError(f"wpart piece '{name}' has NaN or infinite values")
    return WeightPart(version, part, parts, base, precision, _text(header, "architecture", ""),
                      tuple((n, tuple(sh), dt, c) for n, sh, dt, c in manifest), arrays)


def _finite_array(kind: str, name: str, a: np.ndarray | Frames, ndim: int | None = None) -> None:
    if isinstance(a, Frames) or (ndim is not None and (a.ndim != ndim or a.dtype != np.float32)):
        raise WireError(f"{kind} array '{name}' must be float32 with {ndim} dimensions, "
                        f"got {getattr(a, 'dtype', 'frames')}{getattr(a, 'shape', '')}")
    if a.dtype.kind == "f" and a.size and not np.isfinite(a).all():
        raise WireError(f"{kind} array '{name}' has NaN or infinite values")


def _infer_request(header: dict, arrays: dict[str, np.ndarray]) -> InferRequest:
    """Arrays: `obs/<key>` (any allowed dtype, finite; a camera frame may come encoded, `Frames`
    of one image), optional `fstate` [S] and `prefix` [d, A] (float32, finite); a hello carries
    none."""
    obs = {}
    for k, a in arrays.items():
        if k.startswith("obs/") and len(k) > 4:
            if isinstance(a, Frames):  # a camera frame encoded at the actor: exactly one image
                if a.shape[0] != 1:
                    raise WireError(f"infer array '{k}' holds {a.shape[0]} encoded images, expected 1")
            else:
                _finite_array("infer", k, a)
            obs[k[4:]] = a
        elif k == "fstate":
            _finite_array("infer", k, a, 1)
        elif k == "prefix":
            _finite_array("infer", k, a, 2)
            if not (len(a) <= MAX_HORIZON and 0 < a.shape[1] <= MAX_ACTION_DIM):
                raise WireError(f"infer 'prefix' has shape {a.shape}: at most {MAX_HORIZON} x {MAX_ACTION_DIM}")
        else:
            raise WireError(f"infer carries an unknown array '{k}'; known: obs/<key>, fstate, prefix")
    hello = _bool(header, "hello", False)
    if hello and arrays:
        raise WireError("an infer hello carries no arrays")
    return InferRequest(
        _int(header, "actor_id", 0, MAX_ACTOR_ID), _int(header, "req", 0, MAX_COUNT),
        _int(header, "tick", 0, MAX_COUNT, 0), _int(header, "delay", 0, MAX_HORIZON, 0),
        _bool(header, "deterministic", False), obs, arrays.get("fstate"), arrays.get("prefix"), hello,
        _text(header, "policy", ""), _text(header, "spec", "", MAX_SPEC), _text(header, "instruction", ""))


def _chunk_reply(header: dict, arrays: dict[str, np.ndarray]) -> ChunkReply:
    """`actions` [H, A] float32, finite, 1 <= H <= MAX_HORIZON; or an `error` and no arrays; or
    (a hello's answer) a `horizon` and no arrays."""
    error = _text(header, "error", "", 1024)
    actions = arrays.get("actions")
    if set(arrays) - {"actions"}:
        raise WireError(f"chunk carries unknown arrays {sorted(set(arrays) - {'actions'})}; known: actions")
    horizon = _int(header, "horizon", 0, MAX_HORIZON, 0)
    if actions is not None and error:
        raise WireError("a chunk carries 'actions' or an 'error', not both")
    if actions is None and not error and not horizon:
        raise WireError("a chunk carries 'actions', an 'error' or (a hello's answer) a 'horizon'")
    if actions is not None:
        _finite_array("chunk", "actions", actions, 2)
        if not (1 <= len(actions) <= MAX_HORIZON and 1 <= actions.shape[1] <= MAX_ACTION_DIM):
            raise WireError(f"chunk 'actions' has shape {actions.shape}: 1-{MAX_HORIZON} x 1-{MAX_ACTION_DIM}")
    return ChunkReply(
        _int(header, "req", 0, MAX_COUNT), _int(header, "version", -1, MAX_COUNT),
        _text(header, "architecture", ""), actions, error, horizon,
        _text(header, "spec", "", MAX_SPEC), _int(header, "infer_us", 0, 1 << 40, 0),
        _int(header, "batch", 0, 1 << 20, 0))


def decode(frames: Sequence[bytes | memoryview]) -> Message:
    """Parse and validate a multipart message; raises WireError on anything malformed: the header
    (msgpack, at most MAX_HEADER_BYTES, only the kind's known keys, every field's type and range),
    the array specs (names, dtypes, shapes, byte sizes, counts) and, for transitions, the columns
    (known names, dtypes, finite floats)."""
    if not frames:
        raise WireError("empty message")
    head = memoryview(frames[0])
    if head.nbytes > MAX_HEADER_BYTES:
        raise WireError(f"header of {head.nbytes} bytes exceeds {MAX_HEADER_BYTES}")
    try:
        header = msgpack.unpackb(head, raw=False, strict_map_key=True, max_bin_len=0, max_ext_len=0)
    except Exception as e:  # msgpack raises several types for garbage
        raise WireError(f"header is not valid msgpack: {e}") from None
    if not isinstance(header, dict):
        raise WireError(f"header must be a map, got {type(header).__name__}")
    if header.get("schema") != SCHEMA or type(header.get("schema")) is not int:
        raise WireError(f"schema {_show(header.get('schema'))} not supported (this side speaks {SCHEMA})")
    kind = header.get("kind")
    if type(kind) is not str or kind not in _KINDS:
        raise WireError(f"unknown message kind {_show(kind)}; known: {sorted(_KINDS)}")
    unknown = set(header) - _HEADER - _KIND_FIELDS[kind]
    if unknown:
        raise WireError(f"{kind} header has unknown keys {sorted(map(str, unknown))[:8]}")
    specs = header.get("arrays")
    if not isinstance(specs, list) or len(specs) > MAX_ARRAYS.get(kind, 0):
        raise WireError(f"{kind} header 'arrays' must be a list of at most {MAX_ARRAYS.get(kind, 0)} specs")
    arrays = _arrays(header, frames[1:])
    encoded = [k for k, a in arrays.items() if isinstance(a, Frames)]
    if encoded and (kind not in ("transitions", "infer") or any(not k.startswith(OBS_PREFIXES) for k in encoded)):
        raise WireError(f"encoded frames are for observations in transitions and infer requests, not {kind} {encoded}")
    if kind == "transitions":
        required = {"action", "reward", "terminated", "truncated", "policy_version"}
        missing = required - arrays.keys()
        if missing:
            raise WireError(f"transitions missing arrays {sorted(missing)}")
        n = arrays["reward"].shape[0] if arrays["reward"].ndim else -1
        bad = [k for k, a in arrays.items() if a.ndim == 0 or (a.shape[0] != n and not k.startswith(FINAL_OBS))]
        if n <= 0 or bad:
            raise WireError(f"transitions arrays disagree on batch size {n}: {bad}")
        _check_transition_arrays(arrays)
        actor, seq = _int(header, "actor_id", 0, MAX_ACTOR_ID), _int(header, "seq", 0, MAX_COUNT - n)
        arrays = standard_columns(expand_next_obs(arrays))
        return TransitionBatch(actor, seq, arrays)
    if kind == "weights":
        for k, a in arrays.items():
            flat = a.reshape(-1) if a.dtype.kind == "f" else a[:0].reshape(-1)
            for lo in range(0, flat.size, 1 << 22):  # in slices: no full-size temporary for a big policy
                if not np.isfinite(flat[lo:lo + (1 << 22)]).all():
                    raise WireError(f"weights array '{k}' has NaN or infinite values")
        return Weights(_int(header, "version", 0, MAX_COUNT), arrays, _text(header, "architecture", ""))
    if kind == "wpart":
        return _weight_part(header, arrays)
    if kind == "infer":
        return _infer_request(header, arrays)
    if kind == "chunk":
        return _chunk_reply(header, arrays)
    if kind == "episode":
        length = _int(header, "length", 0, MAX_COUNT)
        label = header.get("label", "")
        if label not in EPISODE_LABELS or type(label) is not str:
            raise WireError(f"episode 'label' is {_show(label)}, expected one of {EPISODE_LABELS}")
        return EpisodeStats(
            _int(header, "actor_id", 0, MAX_ACTOR_ID), _int(header, "episode", 0, MAX_COUNT),
            _finite(header, "episode_return"), length, _bool(header, "success"),
            _int(header, "policy_version", -1, MAX_COUNT), _bool(header, "evaluation", False),
            _int(header, "operator_ticks", 0, length, 0), label,
        )
    if kind == "status":
        acked = header.get("acked", [])
        if not (isinstance(acked, list) and len(acked) <= MAX_ACTOR_ID and all(
                isinstance(p, list) and len(p) == 2 and type(p[0]) is int and type(p[1]) is int
                and 0 <= p[0] <= MAX_ACTOR_ID and 0 <= p[1] <= MAX_COUNT for p in acked)):
            raise WireError(f"status 'acked' must be a list of [actor_id, seq] pairs, got {_show(acked)}")
        return LearnerStatus(
            _int(header, "updates", 0, MAX_COUNT), _int(header, "version", 0, MAX_COUNT),
            _int(header, "env_steps", 0, MAX_COUNT), _int(header, "allowed_env_steps", 0, MAX_COUNT),
            _bool(header, "stopping", False), _text(header, "boot_id", "", 64),
            tuple((a, s) for a, s in acked), _int(header, "actors", 0, MAX_ACTOR_ID, 1),
        )
    return Heartbeat(
        _int(header, "actor_id", 0, MAX_ACTOR_ID), _int(header, "env_steps", 0, MAX_COUNT),
        _int(header, "policy_version", -1, MAX_COUNT), _meta(header.get("meta", {})),
    )

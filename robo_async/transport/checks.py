"""What a received message must satisfy, field by field: `decode` parses a multipart message and
refuses (`WireError`, naming what was wrong) anything malformed: the header (msgpack, at most
MAX_HEADER_BYTES, only the kind's known keys, every field's type and range), the array specs
(names, dtypes, shapes, byte sizes, counts) and the contents the kind needs (transition columns,
finite floats, weight pieces, chunk shapes, an actor's figures).
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Callable, Sequence
from typing import cast

import msgpack
import numpy as np

from robo_async.transport.messages import (
    DTYPES,
    FINAL_OBS,
    FRAME_TAGS,
    KINDS,
    MAX_SIDE,
    SCHEMA,
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
    standard_columns,
)
from robo_async.transport.stats import FIELD_TYPES, HIST_EDGES_MS, ActorStats

EPISODE_LABELS = ("", "success", "failure", "rerecord")

# --- limits: every field of every message is checked for type, range and size -------------------
MAX_ACTOR_ID = 1 << 16  # actor ids are small integers (one per robot)
MAX_COUNT = 1 << 62  # seqs, versions, env steps, updates
MAX_HEADER_BYTES = 1 << 20  # msgpack header (array specs included)
MAX_NAME = 256  # array names (a weight piece: d:<parameter name>:<offset>)
MAX_TEXT = 256  # strings in headers (architecture, names)
MAX_ARRAYS = {"transitions": 256, "weights": 1 << 16, "wpart": 1 << 16, "infer": 66, "chunk": 1}  # others: none
MAX_SPEC = 16_384  # a robot spec's signature (JSON) in a hello
MAX_HORIZON = 4096  # actions per chunk, ticks of delay
MAX_ACTION_DIM = 1024
MAX_NDIM = 8
MAX_ELEMENTS = 1 << 34  # elements of one array, every dimension counted (a 0 among them too)
# data frames of one message: the most arrays any kind may list, plus the header (receivers stop
# reading a message's parts past it, before any is kept: `robo_async.transport.wire.recv_frames`)
MAX_FRAMES = 1 + max(MAX_ARRAYS.values())
TRANSITION_COLUMNS = frozenset(
    {"action", "reward", "terminated", "truncated", "policy_version", "success", "intervention", "policy_action"}
)
OBS_PREFIXES = ("obs/", "next_obs/", FINAL_OBS)
# the dtype each known transition column must have
COLUMN_DTYPES = {
    "reward": "float32",
    "terminated": "bool",
    "truncated": "bool",
    "policy_version": "int64",
    "success": "bool",
    "intervention": "uint8",
    "action": "float32",
    "policy_action": "float32",
}
_ITEMSIZE = {d: np.dtype(d).itemsize for d in DTYPES}
_COLUMN_NP = {k: np.dtype(v) for k, v in COLUMN_DTYPES.items()}  # compared per batch (a dtype's .name is slow)
MAX_FIGURE = 1e15  # an actor's float figures (ms, rad/s^3): far above any real one
_MISSING = object()
Header = dict[str, object]  # a decoded msgpack header
Arrays = dict[str, np.ndarray]


def _int(header: Header, name: str, lo: int, hi: int, default: object = _MISSING) -> int:
    value = header.get(name, default)
    if type(value) is not int or not lo <= value <= hi:
        raise WireError(f"header field '{name}' is {_show(value)}, expected an int in [{lo}, {hi}]")
    return value


def _bool(header: Header, name: str, default: object = _MISSING) -> bool:
    value = header.get(name, default)
    if type(value) is not bool:
        raise WireError(f"header field '{name}' is {_show(value)}, expected true or false")
    return value


def _text(header: Header, name: str, default: object = _MISSING, max_len: int = MAX_TEXT) -> str:
    value = header.get(name, default)
    if type(value) is not str or len(value) > max_len:
        raise WireError(f"header field '{name}' is {_show(value)}, expected a string of at most {max_len} chars")
    return value


def _finite(header: Header, name: str) -> float:
    value = header.get(name, _MISSING)
    if not isinstance(value, (int, float)) or type(value) is bool or not math.isfinite(value) or abs(value) > 1e30:
        raise WireError(f"header field '{name}' is {_show(value)}, expected a finite number")
    return float(value)


def _all_finite(a: np.ndarray) -> bool:
    """No NaN or infinity in `a`, in one pass without an array-sized temporary: NaN or inf make
    the sum non-finite; only when the (fast, own-precision) sum is not finite, because finite
    values can overflow it, are the elements looked at one by one."""
    with np.errstate(over="ignore", invalid="ignore"):  # (+inf and -inf together: NaN, no warning)
        if np.isfinite(a.sum()):
            return True
        return bool(np.isfinite(np.add.reduce(a, dtype=np.float64)))  # finite float32/16 cannot overflow float64


_REPR = reprlib.Repr(maxlevel=2, maxtuple=4, maxlist=4, maxdict=4, maxset=4, maxstring=40, maxlong=40, maxother=40)


def _show(value: object) -> str:
    """An untrusted value in an error message: bounded in size and depth (never its whole repr)."""
    if value is _MISSING:
        return "missing"
    try:
        text = _REPR.repr(value)
    except Exception:  # noqa: BLE001 - whatever a hostile value does in repr
        return f"<a {type(value).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


_EXPECTED = {
    bool: "true or false",
    int: f"an int in [0, {MAX_COUNT}]",
    float: f"a finite number in [0, {MAX_FIGURE:g}]",
}


def actor_stats(value: object) -> ActorStats:
    """An actor's figures from a heartbeat's `stats` map: declared `ActorStats` fields only (one
    left out is None), each of its declared type and range: counts ints in [0, MAX_COUNT], figures
    finite numbers in [0, MAX_FIGURE], flags true or false. Raises WireError naming the bad entry."""
    if not isinstance(value, dict) or len(value) > len(FIELD_TYPES):
        raise WireError(f"heartbeat 'stats' must be a map of at most {len(FIELD_TYPES)} figures, got {_show(value)}")
    for k, v in value.items():
        want = FIELD_TYPES.get(k) if type(k) is str else None
        if want is None:
            raise WireError(f"heartbeat 'stats' has an unknown figure {_show(k)}; known: {sorted(FIELD_TYPES)}")
        if want is tuple:  # a histogram: its bins' counts
            n = len(HIST_EDGES_MS[k])
            ok = type(v) in (list, tuple) and len(v) == n and all(type(c) is int and 0 <= c <= MAX_COUNT for c in v)
            if not ok:
                raise WireError(f"heartbeat figure '{k}' is {_show(v)}, expected {n} counts in [0, {MAX_COUNT}]")
            continue
        if want is bool:
            ok = type(v) is bool
        elif want is int:
            ok = type(v) is int and 0 <= v <= MAX_COUNT
        else:
            ok = type(v) in (int, float) and 0 <= v <= MAX_FIGURE  # (NaN and infinities fail the range)
        if not ok:
            raise WireError(f"heartbeat figure '{k}' is {_show(v)}, expected {_EXPECTED[want]}")
    return ActorStats(**value)


_HEADER = {"schema", "kind", "arrays"}
_KIND_FIELDS = {
    "transitions": {"actor_id", "seq"},
    "weights": {"version", "architecture"},
    "wpart": {"version", "part", "parts", "base", "precision", "architecture", "manifest", "sums"},
    "episode": {
        "actor_id",
        "episode",
        "episode_return",
        "length",
        "success",
        "policy_version",
        "evaluation",
        "operator_ticks",
        "label",
    },
    "status": {
        "updates",
        "version",
        "env_steps",
        "allowed_env_steps",
        "stopping",
        "boot_id",
        "acked",
        "actors",
        "paused",
    },
    "heartbeat": {"actor_id", "env_steps", "policy_version", "stats"},
    "infer": {"actor_id", "req", "tick", "delay", "deterministic", "hello", "policy", "spec", "instruction"},
    "chunk": {"req", "version", "architecture", "error", "horizon", "spec", "infer_us", "batch"},
    "gap": {"actor_id", "seq", "count", "reason"},
}


def _check_transition_arrays(arrays: dict[str, np.ndarray | Frames]) -> None:
    """Known columns only, with their dtypes; float columns finite; flags and versions in range."""
    for k, a in arrays.items():
        if not (k in TRANSITION_COLUMNS or (k.startswith(OBS_PREFIXES) and len(k.split("/", 1)[1]) > 0)):
            raise WireError(
                f"transitions carry an unknown array '{k}'; known: {sorted(TRANSITION_COLUMNS)} "
                f"and obs/<key>, next_obs/<key>, {FINAL_OBS}<key>"
            )
        want = _COLUMN_NP.get(k)
        if want is not None and a.dtype != want:
            raise WireError(f"transitions array '{k}' is {a.dtype.name}, expected {want.name}")
        if isinstance(a, np.ndarray) and a.dtype.kind == "f" and a.size and not np.isfinite(a).all():
            raise WireError(f"transitions array '{k}' has NaN or infinite values")
        tail = k.split("/", 1)[-1]
        if k.startswith(OBS_PREFIXES) and tail == "embedding_version":  # a frozen encoder's version per row
            if (
                not isinstance(a, np.ndarray)
                or a.dtype != np.int64
                or a.ndim != 1
                or (a.size and (int(a.min()) < 0 or int(a.max()) >= 1 << 56))
            ):
                raise WireError(f"transitions '{k}' must be int64 [n] in [0, 2^56)")
        elif k.startswith(OBS_PREFIXES) and tail == "embedding":
            if not isinstance(a, np.ndarray) or a.dtype != np.float16 or a.ndim != 2:
                raise WireError(f"transitions '{k}' must be float16 [n, dim]")
    pv = arrays["policy_version"]
    if not isinstance(pv, np.ndarray):  # (an encoded column failed its dtype above)
        raise WireError("transitions 'policy_version' must be a raw int64 array")
    if pv.size and (int(pv.min()) < -1 or int(pv.max()) > MAX_COUNT):
        raise WireError(f"transitions 'policy_version' must lie in [-1, {MAX_COUNT}]")


def _weight_part(header: Header, arrays: Arrays) -> WeightPart:
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
        if (
            not (
                isinstance(m, list)
                and len(m) == 4
                and type(m[0]) is str
                and 0 < len(m[0]) <= MAX_NAME
                and isinstance(m[1], list)
                and len(m[1]) <= MAX_NDIM
                and all(type(d) is int and 0 <= d <= 1 << 40 for d in m[1])
                and m[2] in DTYPES
                and type(m[3]) is int
                and 0 <= m[3] < 1 << 64
            )
            or m[0] in names
        ):
            raise WireError(f"wpart manifest entry {_show(m)}: expected [name, shape, dtype, digest], names unique")
        names.add(m[0])
    sums = header.get("sums", [])
    if (
        not isinstance(sums, list)
        or len(sums) > MAX_ARRAYS["wpart"]
        or not all(
            isinstance(m, list)
            and len(m) == 2
            and type(m[0]) is str
            and 0 < len(m[0]) <= MAX_NAME
            and type(m[1]) is int
            and 0 <= m[1] < 1 << 64
            for m in sums
        )
        or len({m[0] for m in sums}) != len(sums)
    ):
        raise WireError(f"wpart 'sums' must be a list of [array name, digest], names unique, got {_show(sums)}")
    for name, a in arrays.items():
        kind, _, rest = name.partition(":")
        key, _, off = rest.rpartition(":")
        if (
            kind not in ("d", "i", "v")
            or not key
            or not off.isdigit()
            or a.ndim != 1
            or (kind == "i" and a.dtype != np.int64)
            or (kind == "v" and f"i:{key}:{off}" not in arrays)
        ):
            raise WireError(f"wpart piece '{name}': expected d:|i:|v:<name>:<offset>, 1-D (indices int64)")
        if a.dtype.kind == "f" and a.size and not _all_finite(a):
            raise WireError(f"wpart piece '{name}' has NaN or infinite values")
    return WeightPart(
        version,
        part,
        parts,
        base,
        precision,
        _text(header, "architecture", ""),
        tuple((n, tuple(sh), dt, c) for n, sh, dt, c in manifest),
        arrays,
        tuple((n, c) for n, c in sums),
    )


def _finite_array(kind: str, name: str, a: np.ndarray | Frames, ndim: int | None = None) -> np.ndarray:
    """`a`, a raw array without NaN or infinities (and float32 with `ndim` dimensions if given)."""
    if isinstance(a, Frames) or (ndim is not None and (a.ndim != ndim or a.dtype != np.float32)):
        raise WireError(
            f"{kind} array '{name}' must be float32 with {ndim} dimensions, "
            f"got {getattr(a, 'dtype', 'frames')}{getattr(a, 'shape', '')}"
        )
    if a.dtype.kind == "f" and a.size and not np.isfinite(a).all():
        raise WireError(f"{kind} array '{name}' has NaN or infinite values")
    return a


def _infer_request(header: Header, arrays: dict[str, np.ndarray | Frames]) -> InferRequest:
    """Arrays: `obs/<key>` (any allowed dtype, finite; a camera frame may come encoded, `Frames`
    of one image), optional `fstate` [S] and `prefix` [d, A] (float32, finite); a hello carries
    none."""
    obs: dict[str, np.ndarray | Frames] = {}
    fstate = prefix = None
    for k, a in arrays.items():
        if k.startswith("obs/") and len(k) > 4:
            if isinstance(a, Frames):  # a camera frame encoded at the actor: exactly one image
                if a.shape[0] != 1:
                    raise WireError(f"infer array '{k}' holds {a.shape[0]} encoded images, expected 1")
            else:
                _finite_array("infer", k, a)
            obs[k[4:]] = a
        elif k == "fstate":
            fstate = _finite_array("infer", k, a, 1)
        elif k == "prefix":
            prefix = _finite_array("infer", k, a, 2)
            if not (len(prefix) <= MAX_HORIZON and 0 < prefix.shape[1] <= MAX_ACTION_DIM):
                raise WireError(f"infer 'prefix' has shape {prefix.shape}: at most {MAX_HORIZON} x {MAX_ACTION_DIM}")
        else:
            raise WireError(f"infer carries an unknown array '{k}'; known: obs/<key>, fstate, prefix")
    hello = _bool(header, "hello", False)
    if hello and arrays:
        raise WireError("an infer hello carries no arrays")
    return InferRequest(
        _int(header, "actor_id", 0, MAX_ACTOR_ID),
        _int(header, "req", 0, MAX_COUNT),
        _int(header, "tick", 0, MAX_COUNT, 0),
        _int(header, "delay", 0, MAX_HORIZON, 0),
        _bool(header, "deterministic", False),
        obs,
        fstate,
        prefix,
        hello,
        _text(header, "policy", ""),
        _text(header, "spec", "", MAX_SPEC),
        _text(header, "instruction", ""),
    )


def _chunk_reply(header: Header, arrays: Arrays) -> ChunkReply:
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
        _int(header, "req", 0, MAX_COUNT),
        _int(header, "version", -1, MAX_COUNT),
        _text(header, "architecture", ""),
        actions,
        error,
        horizon,
        _text(header, "spec", "", MAX_SPEC),
        _int(header, "infer_us", 0, 1 << 40, 0),
        _int(header, "batch", 0, 1 << 20, 0),
    )


def _transitions(header: Header, arrays: dict[str, np.ndarray | Frames]) -> TransitionBatch:
    required = {"action", "reward", "terminated", "truncated", "policy_version"}
    missing = required - arrays.keys()
    if missing:
        raise WireError(f"transitions missing arrays {sorted(missing)}")
    n = arrays["reward"].shape[0] if arrays["reward"].ndim else -1
    bad = [k for k, a in arrays.items() if a.ndim == 0 or (a.shape[0] != n and not k.startswith(FINAL_OBS))]
    if n <= 0 or bad:
        raise WireError(f"transitions arrays disagree on batch size {n}: {bad}")
    actor, seq = _int(header, "actor_id", 0, MAX_ACTOR_ID), _int(header, "seq", 0, MAX_COUNT - n)
    try:
        _check_transition_arrays(arrays)
        # camera columns stay encoded (`Frames`, array-like by rows) for the store to keep as they came
        columns = cast(Arrays, arrays)
        return TransitionBatch(actor, seq, standard_columns(expand_next_obs(columns)))
    except WireError as e:  # the stream's range is known: the learner can pass over it
        raise WireError(str(e), stream=(actor, seq, n)) from None


def _weights(header: Header, arrays: Arrays) -> Weights:
    for k, a in arrays.items():
        flat = a.reshape(-1) if a.dtype.kind == "f" else a.reshape(-1)[:0]  # (a 0-d array too)
        for lo in range(0, flat.size, 1 << 22):  # in slices: no full-size temporary for a big policy
            if not np.isfinite(flat[lo : lo + (1 << 22)]).all():
                raise WireError(f"weights array '{k}' has NaN or infinite values")
    return Weights(_int(header, "version", 0, MAX_COUNT), arrays, _text(header, "architecture", ""))


def _episode(header: Header, arrays: Arrays) -> EpisodeStats:
    length = _int(header, "length", 0, MAX_COUNT)
    label = header.get("label", "")
    if type(label) is not str or label not in EPISODE_LABELS:
        raise WireError(f"episode 'label' is {_show(label)}, expected one of {EPISODE_LABELS}")
    return EpisodeStats(
        _int(header, "actor_id", 0, MAX_ACTOR_ID),
        _int(header, "episode", 0, MAX_COUNT),
        _finite(header, "episode_return"),
        length,
        _bool(header, "success"),
        _int(header, "policy_version", -1, MAX_COUNT),
        _bool(header, "evaluation", False),
        _int(header, "operator_ticks", 0, length, 0),
        label,
    )


def _status(header: Header, arrays: Arrays) -> LearnerStatus:
    acked = header.get("acked", [])
    if not (
        isinstance(acked, list)
        and len(acked) <= MAX_ACTOR_ID
        and all(
            isinstance(p, list)
            and len(p) == 2
            and type(p[0]) is int
            and type(p[1]) is int
            and 0 <= p[0] <= MAX_ACTOR_ID
            and 0 <= p[1] <= MAX_COUNT
            for p in acked
        )
    ):
        raise WireError(f"status 'acked' must be a list of [actor_id, seq] pairs, got {_show(acked)}")
    return LearnerStatus(
        _int(header, "updates", 0, MAX_COUNT),
        _int(header, "version", 0, MAX_COUNT),
        _int(header, "env_steps", 0, MAX_COUNT),
        _int(header, "allowed_env_steps", 0, MAX_COUNT),
        _bool(header, "stopping", False),
        _text(header, "boot_id", "", 64),
        tuple((a, s) for a, s in acked),
        _int(header, "actors", 0, MAX_ACTOR_ID, 1),
        _bool(header, "paused", False),
    )


def _heartbeat(header: Header, arrays: Arrays) -> Heartbeat:
    return Heartbeat(
        _int(header, "actor_id", 0, MAX_ACTOR_ID),
        _int(header, "env_steps", 0, MAX_COUNT),
        _int(header, "policy_version", -1, MAX_COUNT),
        actor_stats(header.get("stats", {})),
    )


def _gap(header: Header, arrays: Arrays) -> StreamGap:
    count = _int(header, "count", 1, 1 << 40)
    return StreamGap(
        _int(header, "actor_id", 0, MAX_ACTOR_ID),
        _int(header, "seq", 0, MAX_COUNT - count),
        count,
        _text(header, "reason", ""),
    )


# how each kind without encoded frames is read from its checked header and arrays
_PLAIN: dict[str, Callable[[Header, Arrays], Message]] = {
    "weights": _weights,
    "wpart": _weight_part,
    "chunk": _chunk_reply,
    "episode": _episode,
    "status": _status,
    "heartbeat": _heartbeat,
    "gap": _gap,
}


def decode(frames: Sequence[bytes | memoryview]) -> Message:
    """Parse and validate a multipart message; raises WireError on anything malformed (and only
    WireError: any other exception a hostile message provokes in the checks is one too, named): the
    header (msgpack, at most MAX_HEADER_BYTES, only the kind's known keys, every field's type and
    range), the array specs (names, dtypes, shapes, byte sizes, counts) and, for transitions, the
    columns (known names, dtypes, finite floats)."""
    try:
        return _decode(frames)
    except WireError:
        raise
    except (RecursionError, MemoryError) as e:
        raise WireError(f"message refused: {type(e).__name__}") from None
    except Exception as e:  # noqa: BLE001 - a case the checks above missed: still only a refusal
        raise WireError(f"malformed message ({type(e).__name__}: {_show(str(e))})") from None


def _decode(frames: Sequence[bytes | memoryview]) -> Message:
    if len(frames) > MAX_FRAMES:
        raise WireError(f"message of {len(frames)} frames; at most {MAX_FRAMES}")
    if not frames:
        raise WireError("empty message")
    head = memoryview(frames[0])
    if head.nbytes > MAX_HEADER_BYTES:
        raise WireError(f"header of {head.nbytes} bytes exceeds {MAX_HEADER_BYTES}")
    try:
        header = msgpack.unpackb(head, raw=False, strict_map_key=True, max_bin_len=0, max_ext_len=0)
    except Exception as e:  # noqa: BLE001 - msgpack raises several types for garbage
        raise WireError(f"header is not valid msgpack: {e}") from None
    if not isinstance(header, dict):
        raise WireError(f"header must be a map, got {type(header).__name__}")
    if header.get("schema") != SCHEMA or type(header.get("schema")) is not int:
        raise WireError(f"schema {_show(header.get('schema'))} not supported (this side speaks {SCHEMA})")
    kind = header.get("kind")
    if type(kind) is not str or kind not in KINDS:
        raise WireError(f"unknown message kind {_show(kind)}; known: {sorted(KINDS)}")
    unknown = set(header) - _HEADER - _KIND_FIELDS[kind]
    if unknown:
        raise WireError(f"{kind} header has unknown keys {sorted(map(str, unknown))[:8]}")
    specs = header.get("arrays")
    if not isinstance(specs, list) or len(specs) > MAX_ARRAYS.get(kind, 0):
        raise WireError(f"{kind} header 'arrays' must be a list of at most {MAX_ARRAYS.get(kind, 0)} specs")
    arrays = _arrays(specs, frames[1:])
    encoded = [k for k, a in arrays.items() if isinstance(a, Frames)]
    if encoded and (kind not in ("transitions", "infer") or any(not k.startswith(OBS_PREFIXES) for k in encoded)):
        raise WireError(f"encoded frames are for observations in transitions and infer requests, not {kind} {encoded}")
    if kind == "transitions":
        return _transitions(header, arrays)
    if kind == "infer":
        return _infer_request(header, arrays)
    return _PLAIN[kind](header, {k: a for k, a in arrays.items() if isinstance(a, np.ndarray)})


def _arrays(specs: list[object], frames: Sequence[bytes | memoryview]) -> dict[str, np.ndarray | Frames]:
    """The arrays the header's specs name, over the data frames (zero-copy), every spec checked."""
    if len(specs) != len(frames):
        raise WireError(f"header lists {len(specs)} arrays but {len(frames)} data frames arrived")
    out: dict[str, np.ndarray | Frames] = {}
    for spec, frame in zip(specs, frames, strict=False):
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
        if not (
            isinstance(shape, list)
            and len(shape) <= MAX_NDIM
            and all(type(d) is int and 0 <= d <= MAX_ELEMENTS for d in shape)
            and math.prod(max(d, 1) for d in shape) <= MAX_ELEMENTS
        ):
            raise WireError(
                f"array '{name}' has bad shape {_show(shape)} (at most {MAX_NDIM} dimensions, "
                f"{MAX_ELEMENTS} elements counting each dimension)"
            )
        buf = memoryview(frame)
        expected = math.prod(shape) * _ITEMSIZE[dtype]  # exact (Python ints), no numpy call per array
        if buf.nbytes != expected:
            raise WireError(f"array '{name}' {dtype}{tuple(shape)} needs {expected} bytes, frame has {buf.nbytes}")
        out[name] = np.frombuffer(buf, dtype=dtype).reshape(shape)
    return out


def _frames(spec: list[object], buf: memoryview) -> Frames:
    name, _, shape, lengths = spec
    if not isinstance(name, str):
        raise WireError(f"bad frames spec name {name!r}")
    if not (
        isinstance(shape, list)
        and len(shape) == 4
        and all(type(d) is int for d in shape)
        and 0 <= shape[0] <= 1 << 20
        and all(1 <= d <= MAX_SIDE for d in shape[1:3])
        and shape[3] in (1, 3, 4)
    ):
        raise WireError(f"frames '{name}' have bad shape {shape!r}: expected [n, H, W, C], C in 1, 3, 4")
    cap = Frames.max_blob(shape[1:])
    if not (
        isinstance(lengths, list)
        and len(lengths) == shape[0]
        and all(type(n) is int and 6 <= n <= cap for n in lengths)
    ):
        raise WireError(f"frames '{name}' need {shape[0]} image lengths in [6, {cap}] bytes")
    if sum(lengths) != buf.nbytes:
        raise WireError(f"frames '{name}' list {sum(lengths)} bytes, frame has {buf.nbytes}")
    blobs: list[bytes] = []
    at = 0
    for n in lengths:
        blob = bytes(buf[at : at + n])
        if blob[0] not in FRAME_TAGS:
            raise WireError(f"frames '{name}': image {len(blobs)} has unknown codec tag {blob[:1]!r}")
        blobs.append(blob)
        at += n
    return Frames(blobs, shape)

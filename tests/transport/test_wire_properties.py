"""Property-based fuzzing of the wire format (issue 37, item 2): Hypothesis builds valid messages of
every kind from the grammar (the real dataclasses through `encode`), then mutates them: header
fields (types, ranges, missing and extra keys, nesting), array specs (names, dtypes, shapes with
zero and huge dimensions, counts), data frame sizes, frame counts, raw bytes. What must hold:

- `decode(frames)` returns a message of a known kind or raises `WireError`, nothing else;
- a refusal is named by a check, not left to `decode`'s last-resort wrapper;
- valid messages round-trip: `decode(encode(m))` has m's fields and arrays;
- a mutation that breaks a rule for certain (a resized data frame, an unknown header key, a
  required field taken out, another schema) is refused.

Examples are bounded and derandomized (no example database), so every run tries the same inputs.
The live receivers (learner, policy server, weight client) meet the same mutations in
`robo-async bench fuzz`.
"""

from __future__ import annotations

from collections.abc import Callable

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from robo_async.buffer.codec import encode_image
from robo_async.transport.limits import MAX_HEADER_BYTES
from robo_async.transport.stats import FIELD_TYPES, HIST_EDGES_MS, ActorStats
from robo_async.transport.weights import PushConfig, encode_push, keyframe_of
from robo_async.transport.wire import (
    DTYPES,
    EPISODE_LABELS,
    KINDS,
    MAX_ACTOR_ID,
    MAX_COUNT,
    MAX_FIGURE,
    MAX_FRAMES,
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
    decode,
    encode,
    expand_next_obs,
    standard_columns,
)

MESSAGE_TYPES = (
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
# what `decode` says when a message got past every check and failed in code after them (its wrapper)
BACKSTOP = ("malformed message (", "message refused:")
FAST = settings(
    deadline=None,
    derandomize=True,
    database=None,
    max_examples=300,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
MUTANTS = settings(FAST, max_examples=1000)  # the two properties over mutated messages: ~10 s each on 2 cores
# refusals known to come from decode's wrapper (none left: the 0-d weights array is taken now)
KNOWN_UNNAMED: tuple[str, ...] = ()

# --- valid messages, built with the real dataclasses ----------------------------------------------
NAMES = st.text("abcdefgh_.", min_size=1, max_size=6)
COUNTS = st.integers(0, MAX_COUNT)
IDS = st.integers(0, MAX_ACTOR_ID)
VERSIONS = st.integers(-1, MAX_COUNT)
TEXT = st.text(max_size=12)


def finite(dtype: str, shape: tuple[int, ...]) -> st.SearchStrategy[np.ndarray]:
    """Arrays of `dtype` and `shape` with finite values (floats) or any values (ints, bools)."""
    if dtype.startswith("float"):
        width = {"float16": 16, "float32": 32, "float64": 64}[dtype]
        elements = st.floats(-1e4, 1e4, allow_nan=False, allow_infinity=False, width=width)
        return hnp.arrays(dtype, shape, elements=elements)
    return hnp.arrays(dtype, shape)


def image_blobs(n: int, side: int = 2) -> list[bytes]:
    """`n` encoded images (the actor's codec: QOI, tagged and crc-checked) of side x side x 3."""
    rng = np.random.default_rng(n)
    return [encode_image(rng.integers(0, 255, (side, side, 3), dtype=np.uint8)) for _ in range(n)]


@st.composite
def transition_batches(draw: st.DrawFn) -> TransitionBatch:
    n = draw(st.integers(1, 4))
    compact = draw(st.booleans())  # final_obs/<k> once, as actors send it, or next_obs/<k> per row
    arrays: dict[str, np.ndarray | Frames] = {}
    for k in draw(st.lists(NAMES, min_size=1, max_size=2, unique=True)):
        d = draw(st.integers(1, 3))
        arrays[f"obs/{k}"] = draw(finite("float32", (n, d)))
        nxt = f"final_obs/{k}" if compact else f"next_obs/{k}"
        arrays[nxt] = draw(finite("float32", (1 if compact else n, d)))
    if draw(st.booleans()):  # a camera column encoded at the actor
        arrays["obs/cam"] = Frames(image_blobs(n), (n, 2, 2, 3))
        m = 1 if compact else n
        arrays["final_obs/cam" if compact else "next_obs/cam"] = Frames(image_blobs(m), (m, 2, 2, 3))
    a = draw(st.integers(1, 3))
    arrays |= {
        "action": draw(finite("float32", (n, a))),
        "reward": draw(finite("float32", (n,))),
        "terminated": draw(finite("bool", (n,))),
        "truncated": draw(finite("bool", (n,))),
        "policy_version": draw(hnp.arrays("int64", (n,), elements=st.integers(-1, 1000))),
    }
    if draw(st.booleans()):  # what actors add; older senders and imports leave them to the store
        arrays |= {
            "success": draw(finite("bool", (n,))),
            "intervention": draw(hnp.arrays("uint8", (n,), elements=st.integers(0, 2))),
            "policy_action": draw(finite("float32", (n, a))),
        }
    return TransitionBatch(draw(IDS), draw(st.integers(0, MAX_COUNT - n)), arrays)


@st.composite
def episodes(draw: st.DrawFn) -> EpisodeStats:
    length = draw(COUNTS)
    return EpisodeStats(
        draw(IDS),
        draw(COUNTS),
        draw(st.floats(-1e30, 1e30, allow_nan=False)),
        length,
        draw(st.booleans()),
        draw(VERSIONS),
        draw(st.booleans()),
        draw(st.integers(0, length)),
        draw(st.sampled_from(EPISODE_LABELS)),
    )


@st.composite
def weights(draw: st.DrawFn) -> Weights:
    names = draw(st.lists(NAMES, max_size=3, unique=True))
    # at least one dimension: a 0-d array comes back as 1-d (test_a_0d_array_round_trips_as_0d)
    arrays = {
        k: draw(
            finite(
                draw(st.sampled_from(sorted(DTYPES))), tuple(draw(st.lists(st.integers(0, 3), min_size=1, max_size=3)))
            )
        )
        for k in names
    }
    return Weights(draw(st.integers(0, MAX_COUNT)), arrays, draw(TEXT))


@st.composite
def weight_parts(draw: st.DrawFn) -> WeightPart:
    """A part of a real streamed push (transport/weights.py): a keyframe's, or a delta's."""
    names = draw(st.lists(NAMES, min_size=1, max_size=3, unique=True))
    arrays = {k: draw(finite("float32", (draw(st.integers(1, 40)),))) for k in names}
    cfg = PushConfig(precision=draw(st.sampled_from(["fp32", "fp16"])), delta=True, part_mb=0.00005, whole_mb=0)
    version = draw(st.integers(1, 1000))
    parts, tx, _ = encode_push(version, arrays, "mlp:x", cfg)
    if draw(st.booleans()):  # a delta against that keyframe: 1:3 of the elements changed
        key = keyframe_of(version, parts, tx)
        changed = {k: a.copy() for k, a in arrays.items()}
        for a in changed.values():
            a[::3] += 1.0
        parts, _, _ = encode_push(version + 1, changed, "mlp:x", cfg, key=key)
    return draw(st.sampled_from(parts))


statuses = st.builds(
    LearnerStatus,
    COUNTS,
    COUNTS,
    COUNTS,
    COUNTS,
    st.booleans(),
    st.text(max_size=64),
    st.lists(st.tuples(IDS, COUNTS), max_size=3).map(tuple),
    IDS,
    st.booleans(),
)


def figure(name: str) -> st.SearchStrategy[object]:
    """A valid value of one ActorStats field, by its declared type."""
    want = FIELD_TYPES[name]
    if want is tuple:
        return st.tuples(*[st.integers(0, MAX_COUNT)] * len(HIST_EDGES_MS[name]))
    if want is bool:
        return st.booleans()
    if want is int:
        return COUNTS
    return st.floats(0, MAX_FIGURE)


@st.composite
def heartbeats(draw: st.DrawFn) -> Heartbeat:
    names = draw(st.lists(st.sampled_from(sorted(FIELD_TYPES)), max_size=6, unique=True))
    return Heartbeat(draw(IDS), draw(COUNTS), draw(VERSIONS), ActorStats(**{k: draw(figure(k)) for k in names}))


@st.composite
def infer_requests(draw: st.DrawFn) -> InferRequest:
    ids = (draw(IDS), draw(COUNTS))
    if draw(st.booleans()):  # a hello: no arrays
        return InferRequest(*ids, hello=True, policy=draw(TEXT), spec=draw(st.text(max_size=40)))
    obs: dict[str, np.ndarray | Frames] = {
        k: draw(finite(draw(st.sampled_from(sorted(DTYPES))), (draw(st.integers(0, 4)),)))
        for k in draw(st.lists(NAMES, max_size=2, unique=True))
    }
    if draw(st.booleans()):
        obs["cam"] = Frames(image_blobs(1), (1, 2, 2, 3))
    fstate = draw(st.none() | finite("float32", (draw(st.integers(0, 4)),)))
    prefix = draw(st.none() | finite("float32", (draw(st.integers(0, 3)), draw(st.integers(1, 3)))))
    return InferRequest(
        *ids, draw(COUNTS), draw(st.integers(0, 4096)), draw(st.booleans()), obs, fstate, prefix, instruction=draw(TEXT)
    )


@st.composite
def chunk_replies(draw: st.DrawFn) -> ChunkReply:
    head = (draw(COUNTS), draw(VERSIONS), draw(TEXT))
    tail = {"infer_us": draw(st.integers(0, 1 << 40)), "batch": draw(st.integers(0, 1 << 20))}
    how = draw(st.sampled_from(["actions", "error", "hello"]))
    if how == "actions":
        return ChunkReply(*head, draw(finite("float32", (draw(st.integers(1, 8)), draw(st.integers(1, 4))))), **tail)
    if how == "error":
        return ChunkReply(*head, error=draw(st.text(min_size=1, max_size=30)), **tail)
    return ChunkReply(*head, horizon=draw(st.integers(1, 4096)), spec=draw(st.text(max_size=40)), **tail)


@st.composite
def gaps(draw: st.DrawFn) -> StreamGap:
    count = draw(st.integers(1, 1 << 40))
    return StreamGap(draw(IDS), draw(st.integers(0, MAX_COUNT - count)), count, draw(TEXT))


VALID: dict[str, st.SearchStrategy[Message]] = {
    "transitions": transition_batches(),
    "episode": episodes(),
    "weights": weights(),
    "wpart": weight_parts(),
    "status": statuses,
    "heartbeat": heartbeats(),
    "infer": infer_requests(),
    "chunk": chunk_replies(),
    "gap": gaps(),
}
assert set(VALID) == set(KINDS), "a message kind without a strategy"
MESSAGES = st.one_of(*VALID.values())


def frames_of(msg: Message) -> list[bytes]:
    return [bytes(f) for f in encode(msg)]


# --- hostile values and mutations -------------------------------------------------------------------
EDGE_INTS = [
    -1,
    0,
    1,
    2,
    65,
    4097,
    MAX_ACTOR_ID + 1,
    1 << 20,
    (1 << 20) + 1,
    1 << 34,
    (1 << 34) + 1,
    1 << 40,
    MAX_COUNT,
    MAX_COUNT + 1,
    (1 << 63) - 1,
    1 << 63,
    (1 << 64) - 1,
    -(1 << 63),
]
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from(EDGE_INTS),
    st.integers(-(1 << 63), (1 << 64) - 1),
    st.floats(),
    st.text(max_size=20),
    st.sampled_from(["", "x" * 300, "y" * 20_000, "frames", "float32", "obs/", "d:a:0"]),
    st.binary(max_size=8),
)
HOSTILE = st.recursive(  # (maps with str keys: msgpack itself refuses others, see new_header)
    LEAVES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=10,
)
KNOWN_KEYS = sorted(
    {"schema", "kind", "arrays", "evil", ""}
    | {f for c in MESSAGE_TYPES for f in c.__dataclass_fields__ if f != "arrays"}
)
SHAPES = st.one_of(
    st.lists(st.sampled_from([0, 1, 2, 3, 1 << 20, 1 << 34, (1 << 34) + 1, 1 << 40, -1]), max_size=10),
    st.lists(HOSTILE, max_size=3),
    HOSTILE,
)
DTYPE_VALUES = st.sampled_from([*sorted(DTYPES), "frames", "object", "<f4", "float", "", 3, None, ["float32"]])
Frame = list[bytes]
Mutation = Callable[[st.DrawFn, Frame], Frame]


def _header(frames: Frame) -> dict:
    h = msgpack.unpackb(frames[0], raw=False)
    assert isinstance(h, dict)
    return h


def _with(frames: Frame, header: object) -> Frame:
    return [msgpack.packb(header, use_bin_type=True), *frames[1:]]


def near(value: object) -> st.SearchStrategy[object]:
    """Values of the same type as `value` that may break its range (or a whole other value)."""
    if type(value) is bool:
        return st.sampled_from([not value, 0, 1, None])
    if type(value) is int:
        return st.sampled_from(EDGE_INTS) | st.integers(-(1 << 63), (1 << 64) - 1)
    if type(value) is float:
        return st.floats() | st.sampled_from([1e31, -1e31, float("nan"), float("inf")])
    if type(value) is str:
        return st.sampled_from(["", "x" * 65, "x" * 257, "y" * 20_000, "success", "fp8", "fp16"]) | st.text()
    if isinstance(value, list) and value:  # one element of a list (acked pairs, manifest entries, sums) broken
        return st.integers(0, len(value) - 1).flatmap(
            lambda i: near(value[i]).map(lambda v: [*value[:i], v, *value[i + 1 :]])
        ) | st.just(value * 2)
    return HOSTILE


def set_field(draw: st.DrawFn, frames: Frame) -> Frame:
    """A field of the header given a near-valid or a hostile value; sometimes a key it does not know."""
    h = _header(frames)
    own = sorted(k for k in h if type(k) is str and k != "arrays")
    key = draw(st.sampled_from(own * 8 + KNOWN_KEYS))  # (other kinds' keys: about one time in five)
    h[key] = draw(near(h[key]) if key in h and draw(st.booleans()) else HOSTILE)
    return _with(frames, h)


def drop_field(draw: st.DrawFn, frames: Frame) -> Frame:
    h = _header(frames)
    if h:
        h.pop(draw(st.sampled_from(sorted(h, key=repr))))
    return _with(frames, h)


def other_kind(draw: st.DrawFn, frames: Frame) -> Frame:
    """The same fields and arrays under another kind (a message read as what it is not)."""
    return _with(frames, _header(frames) | {"kind": draw(st.sampled_from(KINDS))})


def edit_spec(draw: st.DrawFn, frames: Frame) -> Frame:
    """One array spec broken: its name, dtype, shape (zero, huge, negative, too many dimensions),
    an encoded column's image lengths, or the spec's length."""
    h = _header(frames)
    specs = h.get("arrays")
    if not isinstance(specs, list) or not specs or not all(isinstance(s, list) and s for s in specs):
        h["arrays"] = draw(st.lists(st.lists(HOSTILE, max_size=5), max_size=3) | HOSTILE)
        return _with(frames, h)
    spec = specs[draw(st.integers(0, len(specs) - 1))]
    what = draw(st.sampled_from(["name", "dtype", "shape", "lengths", "grow", "shrink", "dup", "replace"]))
    if what == "name":
        spec[0] = draw(st.sampled_from(["", "x" * 300, "obs/", "final_obs/x", "d:a:x", specs[0][0]]) | HOSTILE)
    elif what == "dtype":
        spec[1] = draw(DTYPE_VALUES)
    elif what == "shape" and len(spec) > 2:
        spec[2] = draw(SHAPES)
    elif what == "lengths" and len(spec) > 3:
        spec[3] = draw(st.lists(st.sampled_from([0, 5, 6, 7, 1 << 20, -1]), max_size=4) | HOSTILE)
    elif what == "grow":
        spec.append(draw(HOSTILE))
    elif what == "shrink":
        spec.pop()
    elif what == "dup":
        specs.append(list(spec))
    else:
        specs[specs.index(spec)] = draw(HOSTILE)
    return _with(frames, h)


ARRAY_NAMES = (
    st.sampled_from(
        [
            "obs/x",
            "next_obs/x",
            "final_obs/x",
            "obs/embedding",
            "obs/embedding_version",
            "final_obs/embedding",
            "reward",
            "action",
            "terminated",
            "policy_version",
            "intervention",
            "policy_action",
            "success",
            "fstate",
            "prefix",
            "actions",
            "d:a:0",
            "i:a:0",
            "v:a:0",
            "d:a:x",
            "evil",
        ]
    )
    | NAMES
)
SMALL_SHAPES = st.lists(st.integers(0, 5), max_size=4) | st.sampled_from(
    [[0, 1 << 34], [1 << 34, 0], [0, 1 << 20, 1 << 20], [0] * 8, [1] * 8, [], [1], [0]]
)


def _data(draw: st.DrawFn, dtype: str, shape: list[int]) -> bytes:
    """Bytes for an array of `dtype` and `shape`: random, or all of one byte (0: zeros, 0xFF: NaNs)."""
    n = int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize
    fill = draw(st.sampled_from([None, 0x00, 0xFF, 0x7F]))
    return draw(st.binary(min_size=n, max_size=n)) if fill is None else bytes([fill]) * n


def reshape_array(draw: st.DrawFn, frames: Frame) -> Frame:
    """An array given another dtype or shape with a data frame of the matching size, so the size
    check passes and the kind's own checks (batch sizes, columns, pieces, chunk shapes) are reached."""
    h = _header(frames)
    specs = h.get("arrays")
    plain = (
        [i for i, sp in enumerate(specs) if isinstance(sp, list) and len(sp) == 3] if isinstance(specs, list) else []
    )
    if not plain or len(frames) != len(specs) + 1:
        return add_array(draw, frames)
    i = draw(st.sampled_from(plain))
    dtype = draw(st.sampled_from([specs[i][1], *sorted(DTYPES)]))
    shape = draw(SMALL_SHAPES)
    specs[i] = [specs[i][0], dtype, shape]
    return [*_with(frames, h)[: 1 + i], _data(draw, dtype, shape), *frames[2 + i :]]


def add_array(draw: st.DrawFn, frames: Frame) -> Frame:
    """One more array, well formed (spec and frame agree), under a name some kind knows, or not."""
    h = _header(frames)
    specs = h.get("arrays")
    if not isinstance(specs, list) or len(frames) != len(specs) + 1:
        return frames
    dtype, shape = draw(st.sampled_from(sorted(DTYPES))), draw(SMALL_SHAPES)
    specs.append([draw(ARRAY_NAMES), dtype, shape])
    return [*_with(frames, h), _data(draw, dtype, shape)]


def drop_array(draw: st.DrawFn, frames: Frame) -> Frame:
    """One array left out, its spec with it (a message missing a column, a piece, its actions)."""
    h = _header(frames)
    specs = h.get("arrays")
    if not isinstance(specs, list) or not specs or len(frames) != len(specs) + 1:
        return add_array(draw, frames)
    i = draw(st.integers(0, len(specs) - 1))
    del specs[i]
    return [*_with(frames, h)[: 1 + i], *frames[2 + i :]]


def resize_frame(draw: st.DrawFn, frames: Frame) -> Frame:
    """A frame cut short, grown, or with bytes flipped (NaNs, bad image tags, bad digests)."""
    i = draw(st.integers(0, len(frames) - 1))
    f = bytearray(frames[i])
    how = draw(st.sampled_from(["cut", "grow", "flip"]))
    if how == "cut":
        f = f[: draw(st.integers(0, max(len(f) - 1, 0)))]
    elif how == "grow":
        f += draw(st.binary(min_size=1, max_size=64))
    elif f:
        for _ in range(draw(st.integers(1, 4))):
            at = draw(st.integers(0, len(f) - 1))
            f[at] = draw(st.sampled_from([0x00, 0xFF, 0x7F, 0xC1, 0xDD, 0x80])) if i == 0 else f[at] ^ 0xFF
    return [*frames[:i], bytes(f), *frames[i + 1 :]]


def frame_count(draw: st.DrawFn, frames: Frame) -> Frame:
    """Data frames left out, added, swapped, or many empty ones (past MAX_FRAMES)."""
    how = draw(st.sampled_from(["drop", "add", "swap", "flood", "header-only"]))
    if how == "drop" and len(frames) > 1:
        i = draw(st.integers(1, len(frames) - 1))
        return frames[:i] + frames[i + 1 :]
    if how == "add":
        return frames + draw(st.lists(st.binary(max_size=16), min_size=1, max_size=3))
    if how == "swap" and len(frames) > 2:
        return [frames[0], *reversed(frames[1:])]
    if how == "flood":
        return frames + [b""] * draw(st.sampled_from([MAX_FRAMES - len(frames) + 1, MAX_FRAMES + 5]))
    return frames[:1]


def new_header(draw: st.DrawFn, frames: Frame) -> Frame:
    """A header that is another msgpack object, garbage, deep nesting or a header past the cap."""
    how = draw(st.sampled_from(["hostile", "int-key", "garbage", "deep", "big", "none"]))
    if how == "hostile":
        return _with(frames, draw(HOSTILE))
    if how == "int-key":
        return _with(frames, _header(frames) | {draw(st.integers(0, 9)): 1})
    if how == "garbage":
        return [draw(st.binary(max_size=40)), *frames[1:]]
    if how == "deep":  # nesting msgpack's own limit stops (or not): arrays of one array of ...
        depth = draw(st.sampled_from([100, 1000, 5000, 100_000]))
        return [b"\x81\xa6schema" + b"\x91" * depth + b"\x01", *frames[1:]]
    if how == "big":
        return _with(frames, _header(frames) | {"evil": "z" * MAX_HEADER_BYTES})
    return frames[1:]


# weighted by repetition: the mutations that reach the kinds' own checks come most often
MUTATIONS: list[Mutation] = (
    [set_field] * 4
    + [reshape_array] * 3
    + [add_array, drop_array] * 2
    + [drop_field, other_kind, edit_spec, resize_frame, frame_count, new_header]
)


@st.composite
def mutated(draw: st.DrawFn) -> Frame:
    """A valid message of any kind, then one or two mutations."""
    frames = frames_of(draw(MESSAGES))
    for mutate in draw(st.lists(st.sampled_from(MUTATIONS), min_size=1, max_size=2)):
        if frames and msgpack_map(frames[0]):
            frames = mutate(draw, frames)
    return frames


def msgpack_map(head: bytes) -> bool:
    """The header is still a msgpack map (header-level mutations need one)."""
    try:
        return isinstance(msgpack.unpackb(head, raw=False), dict)
    except Exception:  # noqa: BLE001 - garbage from an earlier mutation
        return False


def same(a: object, b: object) -> bool:
    """Arrays equal with their dtypes, encoded columns byte for byte, anything else by ==."""
    if isinstance(a, Frames) or isinstance(b, Frames):
        return isinstance(a, Frames) and isinstance(b, Frames) and a.blobs == b.blobs and a.shape == b.shape
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and np.array_equal(a, b)
        )
    return a == b


# --- the properties --------------------------------------------------------------------------------
@MUTANTS
@given(mutated())
def test_decode_returns_a_message_of_a_known_kind_or_raises_wire_error_only(frames: Frame) -> None:
    try:
        msg = decode(frames)
    except WireError:
        return  # refused: the one exception a receiver has to catch
    assert isinstance(msg, MESSAGE_TYPES) and msg.kind in KINDS


@MUTANTS
@given(mutated())
def test_a_refusal_is_named_by_a_check_not_by_the_last_resort_wrapper(frames: Frame) -> None:
    """`decode` turns any other exception into a WireError (a receiver survives it); but such a
    message got past every check, which names what was wrong with it no longer."""
    try:
        decode(frames)
    except WireError as e:
        if not str(e).startswith(KNOWN_UNNAMED):
            assert not str(e).startswith(BACKSTOP), f"no check refused it: {e}"


def test_a_0d_integer_array_in_weights_is_named_or_taken():
    """Found by the property above (shrunk): a `weights` message with a 0-d non-float array."""
    frames = [
        msgpack.packb(
            {"schema": 1, "kind": "weights", "arrays": [["obs/x", "bool", []]], "version": 0, "architecture": ""}
        ),
        b"\x00",
    ]
    try:
        msg = decode(frames)
    except WireError as e:
        assert not str(e).startswith(BACKSTOP), f"no check refused it: {e}"
    else:
        assert isinstance(msg, Weights) and msg.arrays["obs/x"].shape == ()


def test_a_0d_array_round_trips_as_0d():
    out = decode(frames_of(Weights(3, {"log_std": np.array(-0.5, np.float32)}, "mlp")))
    assert isinstance(out, Weights) and out.arrays["log_std"].shape == ()


@settings(FAST, max_examples=80)
@given(st.sampled_from(KINDS).flatmap(lambda k: VALID[k]))
def test_valid_messages_of_every_kind_round_trip(msg: Message) -> None:
    out = decode(frames_of(msg))
    assert type(out) is type(msg)
    for name in msg.__dataclass_fields__:
        want, got = getattr(msg, name), getattr(out, name)
        if name == "arrays" and isinstance(msg, TransitionBatch):  # decode completes compact batches
            want = standard_columns(expand_next_obs(want))
        if isinstance(want, dict):
            assert got.keys() == want.keys() and all(same(got[k], want[k]) for k in want), name
        else:
            assert same(got, want), (name, got, want)


@FAST
@given(MESSAGES, st.data())
def test_a_data_frame_of_the_wrong_size_is_refused(msg: Message, data: st.DataObject) -> None:
    frames = frames_of(msg)
    if len(frames) == 1:
        frames.append(b"")  # no arrays: any data frame at all is one too many
        i = 1
    else:
        i = data.draw(st.integers(1, len(frames) - 1))
        delta = data.draw(st.sampled_from([-1, 1, 7]) if frames[i] else st.integers(1, 8))
        frames[i] = frames[i][:delta] if delta < 0 else frames[i] + b"\0" * delta
    with pytest.raises(WireError):
        decode(frames)


REQUIRED = {  # header fields with no default: a message without one is refused
    "transitions": ["actor_id", "seq"],
    "episode": ["actor_id", "episode", "episode_return", "length", "success", "policy_version"],
    "weights": ["version"],
    "wpart": ["version", "part", "parts", "precision"],
    "status": ["updates", "version", "env_steps", "allowed_env_steps"],
    "heartbeat": ["actor_id", "env_steps", "policy_version"],
    "infer": ["actor_id", "req"],
    "chunk": ["req", "version"],
    "gap": ["actor_id", "seq", "count"],
}


@FAST
@given(MESSAGES, st.data())
def test_a_header_without_a_required_field_or_with_an_unknown_one_or_another_schema_is_refused(
    msg: Message, data: st.DataObject
) -> None:
    frames = frames_of(msg)
    h = _header(frames)
    how = data.draw(st.sampled_from(["drop", "unknown", "schema"]))
    if how == "drop":
        h.pop(data.draw(st.sampled_from(["schema", "kind", "arrays", *REQUIRED[msg.kind]])))
    elif how == "unknown":
        h[data.draw(st.text(min_size=1, max_size=8).filter(lambda k: k not in KNOWN_KEYS))] = data.draw(HOSTILE)
    else:
        h["schema"] = data.draw(HOSTILE.filter(lambda v: not (type(v) is int and v == 1)))
    with pytest.raises(WireError):
        decode(_with(frames, h))

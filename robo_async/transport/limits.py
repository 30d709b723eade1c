"""The limits of what a received message may hold (every size, count and range the checks use,
listed in the wire-format reference) and the readers of a header's fields that hold a value to them:
`read_int`, `read_bool`, `read_text`, `read_finite`, `finite_array`, each raising `WireError` that
names the field and shows the bad value bounded in size (`show`).
"""

from __future__ import annotations

import math
import reprlib

import numpy as np

from robo_async.transport.messages import FINAL_OBS, Frames, WireError

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
MAX_FIGURE = 1e15  # an actor's float figures (ms, rad/s^3): far above any real one
MISSING = object()
Header = dict[str, object]  # a decoded msgpack header
Arrays = dict[str, np.ndarray]


def read_int(header: Header, name: str, lo: int, hi: int, default: object = MISSING) -> int:
    """Header field `name` (or `default` when absent), an int in [lo, hi]; WireError otherwise."""
    value = header.get(name, default)
    if type(value) is not int or not lo <= value <= hi:
        raise WireError(f"header field '{name}' is {show(value)}, expected an int in [{lo}, {hi}]")
    return value


def read_bool(header: Header, name: str, default: object = MISSING) -> bool:
    """Header field `name` (or `default` when absent), true or false; WireError otherwise."""
    value = header.get(name, default)
    if type(value) is not bool:
        raise WireError(f"header field '{name}' is {show(value)}, expected true or false")
    return value


def read_text(header: Header, name: str, default: object = MISSING, max_len: int = MAX_TEXT) -> str:
    """Header field `name` (or `default` when absent), a string of at most `max_len` chars; WireError otherwise."""
    value = header.get(name, default)
    if type(value) is not str or len(value) > max_len:
        raise WireError(f"header field '{name}' is {show(value)}, expected a string of at most {max_len} chars")
    return value


def read_finite(header: Header, name: str) -> float:
    """Header field `name`, a finite number (at most 1e30 in size) as a float; WireError otherwise."""
    value = header.get(name, MISSING)
    if not isinstance(value, (int, float)) or type(value) is bool or not math.isfinite(value) or abs(value) > 1e30:
        raise WireError(f"header field '{name}' is {show(value)}, expected a finite number")
    return float(value)


def all_finite(a: np.ndarray) -> bool:
    """No NaN or infinity in `a`, in one pass without an array-sized temporary: NaN or inf make
    the sum non-finite; only when the (fast, own-precision) sum is not finite, because finite
    values can overflow it, are the elements looked at one by one."""
    with np.errstate(over="ignore", invalid="ignore"):  # (+inf and -inf together: NaN, no warning)
        if np.isfinite(a.sum()):
            return True
        return bool(np.isfinite(np.add.reduce(a, dtype=np.float64)))  # finite float32/16 cannot overflow float64


_REPR = reprlib.Repr(maxlevel=2, maxtuple=4, maxlist=4, maxdict=4, maxset=4, maxstring=40, maxlong=40, maxother=40)


def show(value: object) -> str:
    """An untrusted value in an error message: bounded in size and depth (never its whole repr)."""
    if value is MISSING:
        return "missing"
    try:
        text = _REPR.repr(value)
    except Exception:  # noqa: BLE001 - whatever a hostile value does in repr
        return f"<a {type(value).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


def finite_array(kind: str, name: str, a: np.ndarray | Frames, ndim: int | None = None) -> np.ndarray:
    """`a`, a raw array without NaN or infinities (and float32 with `ndim` dimensions if given)."""
    if isinstance(a, Frames) or (ndim is not None and (a.ndim != ndim or a.dtype != np.float32)):
        raise WireError(
            f"{kind} array '{name}' must be float32 with {ndim} dimensions, "
            f"got {getattr(a, 'dtype', 'frames')}{getattr(a, 'shape', '')}"
        )
    if a.dtype.kind == "f" and a.size and not np.isfinite(a).all():
        raise WireError(f"{kind} array '{name}' has NaN or infinite values")
    return a

"""What each message kind's header and arrays must hold, once the envelope is read (`checks.decode`):
the header fields each kind may carry (`KIND_FIELDS`), and one reader per kind that checks its
fields and arrays (transition columns, finite floats, chunk shapes, an actor's figures; the two weight
kinds' in `weight_checks`) and returns the message, or raises `WireError` naming what was wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import numpy as np

from robo_async.transport.limits import (
    COLUMN_DTYPES,
    EPISODE_LABELS,
    MAX_ACTION_DIM,
    MAX_ACTOR_ID,
    MAX_COUNT,
    MAX_FIGURE,
    MAX_HORIZON,
    MAX_SPEC,
    OBS_PREFIXES,
    TRANSITION_COLUMNS,
    Arrays,
    Header,
    finite_array,
    read_bool,
    read_finite,
    read_int,
    read_text,
    show,
)
from robo_async.transport.messages import (
    FINAL_OBS,
    ChunkReply,
    EpisodeStats,
    Frames,
    Heartbeat,
    InferRequest,
    LearnerStatus,
    Message,
    StreamGap,
    TransitionBatch,
    WireError,
    expand_next_obs,
    standard_columns,
)
from robo_async.transport.stats import FIELD_TYPES, HIST_EDGES_MS, ActorStats
from robo_async.transport.weight_checks import weight_part, weights

_COLUMN_NP = {k: np.dtype(v) for k, v in COLUMN_DTYPES.items()}  # compared per batch (a dtype's .name is slow)

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
        raise WireError(f"heartbeat 'stats' must be a map of at most {len(FIELD_TYPES)} figures, got {show(value)}")
    for k, v in value.items():
        want = FIELD_TYPES.get(k) if type(k) is str else None
        if want is None:
            raise WireError(f"heartbeat 'stats' has an unknown figure {show(k)}; known: {sorted(FIELD_TYPES)}")
        if want is tuple:  # a histogram: its bins' counts
            n = len(HIST_EDGES_MS[k])
            ok = type(v) in (list, tuple) and len(v) == n and all(type(c) is int and 0 <= c <= MAX_COUNT for c in v)
            if not ok:
                raise WireError(f"heartbeat figure '{k}' is {show(v)}, expected {n} counts in [0, {MAX_COUNT}]")
            continue
        if want is bool:
            ok = type(v) is bool
        elif want is int:
            ok = type(v) is int and 0 <= v <= MAX_COUNT
        else:
            ok = type(v) in (int, float) and 0 <= v <= MAX_FIGURE  # (NaN and infinities fail the range)
        if not ok:
            raise WireError(f"heartbeat figure '{k}' is {show(v)}, expected {_EXPECTED[want]}")
    return ActorStats(**value)


KIND_FIELDS = {
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


def infer_request(header: Header, arrays: dict[str, np.ndarray | Frames]) -> InferRequest:
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
                finite_array("infer", k, a)
            obs[k[4:]] = a
        elif k == "fstate":
            fstate = finite_array("infer", k, a, 1)
        elif k == "prefix":
            prefix = finite_array("infer", k, a, 2)
            if not (len(prefix) <= MAX_HORIZON and 0 < prefix.shape[1] <= MAX_ACTION_DIM):
                raise WireError(f"infer 'prefix' has shape {prefix.shape}: at most {MAX_HORIZON} x {MAX_ACTION_DIM}")
        else:
            raise WireError(f"infer carries an unknown array '{k}'; known: obs/<key>, fstate, prefix")
    hello = read_bool(header, "hello", False)
    if hello and arrays:
        raise WireError("an infer hello carries no arrays")
    return InferRequest(
        read_int(header, "actor_id", 0, MAX_ACTOR_ID),
        read_int(header, "req", 0, MAX_COUNT),
        read_int(header, "tick", 0, MAX_COUNT, 0),
        read_int(header, "delay", 0, MAX_HORIZON, 0),
        read_bool(header, "deterministic", False),
        obs,
        fstate,
        prefix,
        hello,
        read_text(header, "policy", ""),
        read_text(header, "spec", "", MAX_SPEC),
        read_text(header, "instruction", ""),
    )


def _chunk_reply(header: Header, arrays: Arrays) -> ChunkReply:
    """`actions` [H, A] float32, finite, 1 <= H <= MAX_HORIZON; or an `error` and no arrays; or
    (a hello's answer) a `horizon` and no arrays."""
    error = read_text(header, "error", "", 1024)
    actions = arrays.get("actions")
    if set(arrays) - {"actions"}:
        raise WireError(f"chunk carries unknown arrays {sorted(set(arrays) - {'actions'})}; known: actions")
    horizon = read_int(header, "horizon", 0, MAX_HORIZON, 0)
    if actions is not None and error:
        raise WireError("a chunk carries 'actions' or an 'error', not both")
    if actions is None and not error and not horizon:
        raise WireError("a chunk carries 'actions', an 'error' or (a hello's answer) a 'horizon'")
    if actions is not None:
        finite_array("chunk", "actions", actions, 2)
        if not (1 <= len(actions) <= MAX_HORIZON and 1 <= actions.shape[1] <= MAX_ACTION_DIM):
            raise WireError(f"chunk 'actions' has shape {actions.shape}: 1-{MAX_HORIZON} x 1-{MAX_ACTION_DIM}")
    return ChunkReply(
        read_int(header, "req", 0, MAX_COUNT),
        read_int(header, "version", -1, MAX_COUNT),
        read_text(header, "architecture", ""),
        actions,
        error,
        horizon,
        read_text(header, "spec", "", MAX_SPEC),
        read_int(header, "infer_us", 0, 1 << 40, 0),
        read_int(header, "batch", 0, 1 << 20, 0),
    )


def transitions(header: Header, arrays: dict[str, np.ndarray | Frames]) -> TransitionBatch:
    """A transitions message: the required columns, one batch size, known columns with their dtypes and
    finite floats; a refusal names the stream range (`WireError.stream`) so the learner can pass over it."""
    required = {"action", "reward", "terminated", "truncated", "policy_version"}
    missing = required - arrays.keys()
    if missing:
        raise WireError(f"transitions missing arrays {sorted(missing)}")
    n = arrays["reward"].shape[0] if arrays["reward"].ndim else -1
    bad = [k for k, a in arrays.items() if a.ndim == 0 or (a.shape[0] != n and not k.startswith(FINAL_OBS))]
    if n <= 0 or bad:
        raise WireError(f"transitions arrays disagree on batch size {n}: {bad}")
    actor, seq = read_int(header, "actor_id", 0, MAX_ACTOR_ID), read_int(header, "seq", 0, MAX_COUNT - n)
    try:
        _check_transition_arrays(arrays)
        # camera columns stay encoded (`Frames`, array-like by rows) for the store to keep as they came
        columns = cast(Arrays, arrays)
        return TransitionBatch(actor, seq, standard_columns(expand_next_obs(columns)))
    except WireError as e:  # the stream's range is known: the learner can pass over it
        raise WireError(str(e), stream=(actor, seq, n)) from None


def _episode(header: Header, arrays: Arrays) -> EpisodeStats:
    length = read_int(header, "length", 0, MAX_COUNT)
    label = header.get("label", "")
    if type(label) is not str or label not in EPISODE_LABELS:
        raise WireError(f"episode 'label' is {show(label)}, expected one of {EPISODE_LABELS}")
    return EpisodeStats(
        read_int(header, "actor_id", 0, MAX_ACTOR_ID),
        read_int(header, "episode", 0, MAX_COUNT),
        read_finite(header, "episode_return"),
        length,
        read_bool(header, "success"),
        read_int(header, "policy_version", -1, MAX_COUNT),
        read_bool(header, "evaluation", False),
        read_int(header, "operator_ticks", 0, length, 0),
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
        raise WireError(f"status 'acked' must be a list of [actor_id, seq] pairs, got {show(acked)}")
    return LearnerStatus(
        read_int(header, "updates", 0, MAX_COUNT),
        read_int(header, "version", 0, MAX_COUNT),
        read_int(header, "env_steps", 0, MAX_COUNT),
        read_int(header, "allowed_env_steps", 0, MAX_COUNT),
        read_bool(header, "stopping", False),
        read_text(header, "boot_id", "", 64),
        tuple((a, s) for a, s in acked),
        read_int(header, "actors", 0, MAX_ACTOR_ID, 1),
        read_bool(header, "paused", False),
    )


def _heartbeat(header: Header, arrays: Arrays) -> Heartbeat:
    return Heartbeat(
        read_int(header, "actor_id", 0, MAX_ACTOR_ID),
        read_int(header, "env_steps", 0, MAX_COUNT),
        read_int(header, "policy_version", -1, MAX_COUNT),
        actor_stats(header.get("stats", {})),
    )


def _gap(header: Header, arrays: Arrays) -> StreamGap:
    count = read_int(header, "count", 1, 1 << 40)
    return StreamGap(
        read_int(header, "actor_id", 0, MAX_ACTOR_ID),
        read_int(header, "seq", 0, MAX_COUNT - count),
        count,
        read_text(header, "reason", ""),
    )


# how each kind without encoded frames is read from its checked header and arrays
PLAIN: dict[str, Callable[[Header, Arrays], Message]] = {
    "weights": weights,
    "wpart": weight_part,
    "chunk": _chunk_reply,
    "episode": _episode,
    "status": _status,
    "heartbeat": _heartbeat,
    "gap": _gap,
}

"""What the two weight kinds must hold: `weights` (a whole policy, every float finite, checked in
slices) and `wpart` (one part of a push: version, part and base in range, precision, the manifest of
arrays with their digests in part 0, the per-array sums, and the pieces named d:|i:|v:<name>:<offset>,
finite). The pieces' meaning (parts, deltas, digests) is `transport.weights`'.
"""

from __future__ import annotations

import numpy as np

from robo_async.transport.limits import (
    MAX_ARRAYS,
    MAX_COUNT,
    MAX_NAME,
    MAX_NDIM,
    Arrays,
    Header,
    all_finite,
    read_int,
    read_text,
    show,
)
from robo_async.transport.messages import DTYPES, WeightPart, Weights, WireError


def weight_part(header: Header, arrays: Arrays) -> WeightPart:
    """A `wpart` message: version, part and base in range, the precision, part 0's manifest (names
    unique, shapes, dtypes, digests), the per-array sums and the pieces (d:|i:|v:<name>:<offset>, 1-D, finite)."""
    version = read_int(header, "version", 0, MAX_COUNT)
    parts = read_int(header, "parts", 1, 1 << 20)
    part = read_int(header, "part", 0, parts - 1)
    base = read_int(header, "base", -1, max(version - 1, -1))
    precision = header.get("precision")
    if precision not in ("fp32", "fp16"):
        raise WireError(f"wpart 'precision' is {show(precision)}, expected fp32 or fp16")
    manifest = header.get("manifest")
    if not isinstance(manifest, list) or len(manifest) > MAX_ARRAYS["wpart"] or (part == 0) != bool(manifest):
        raise WireError(f"wpart 'manifest' must be a list of arrays in part 0 (only), got {show(manifest)}")
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
            raise WireError(f"wpart manifest entry {show(m)}: expected [name, shape, dtype, digest], names unique")
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
        raise WireError(f"wpart 'sums' must be a list of [array name, digest], names unique, got {show(sums)}")
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
        if a.dtype.kind == "f" and a.size and not all_finite(a):
            raise WireError(f"wpart piece '{name}' has NaN or infinite values")
    return WeightPart(
        version,
        part,
        parts,
        base,
        precision,
        read_text(header, "architecture", ""),
        tuple((n, tuple(sh), dt, c) for n, sh, dt, c in manifest),
        arrays,
        tuple((n, c) for n, c in sums),
    )


def weights(header: Header, arrays: Arrays) -> Weights:
    """A whole `weights` message: every float finite (checked in slices, no full-size temporary)."""
    for k, a in arrays.items():
        flat = a.reshape(-1) if a.dtype.kind == "f" else a.reshape(-1)[:0]  # (a 0-d array too)
        for lo in range(0, flat.size, 1 << 22):  # in slices: no full-size temporary for a big policy
            if not np.isfinite(flat[lo : lo + (1 << 22)]).all():
                raise WireError(f"weights array '{k}' has NaN or infinite values")
    return Weights(read_int(header, "version", 0, MAX_COUNT), arrays, read_text(header, "architecture", ""))

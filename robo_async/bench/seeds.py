"""A learning row's figures over seeds (`bench learn`, `bench envs`, `bench hil`): the median, the
range [min, max] and every seed's value, so one lucky or unlucky run does not make the row.

Two kinds of figure:
- a "to X" figure (seconds, env steps or robot-minutes until the rolling success reaches X%) is
  None for a seed that never reached X; such a seed counts as +inf (it may reach X later, or
  never), so the median is None ("not reached") when the middle seed (either middle seed, for an
  even count) never reached X, and the range's max is None when any seed never did;
- any other figure (final success, BC start, updates/s, env steps) is None only where a run
  produced none (it failed): such a seed is left out, and `n` counts the seeds that have it.

`spread` computes one figure, `merge` a row's figures from its seeds' dicts (the medians under the
figures' own keys, beside `<key>_range` and `<key>_seeds`), `cell` writes one for a table:
`86 [74, 120]` (median [min, max]), `never [74, never]` where seeds did not get there.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

# keys that name one run -> the list `merge` gathers them into (None: left out)
PER_RUN = {"seed": "seed_numbers", "run": None, "run_dir": "run_dirs", "returncode": "returncodes", "curve": None}


@dataclass(frozen=True)
class Spread:
    """One figure over seeds: median, min and max (None: not reached, or no seed has it), the
    number of seeds it is taken over and each seed's value in seed order."""

    median: float | None
    low: float | None
    high: float | None
    n: int
    values: tuple[float | None, ...]

    @property
    def reached(self) -> int:
        """Seeds with a value (for a "to X" figure: seeds that reached X)."""
        return sum(v is not None for v in self.values)


def spread(values: Sequence[float | None], *, reach: bool = True) -> Spread:
    """`values` (one per seed) as median and [min, max]. `reach`: a "to X" figure, a None is a
    seed that never reached X and counts as +inf (a median or max of +inf is None); otherwise a
    None is a seed without the figure and is left out."""
    vals = tuple(None if v is None else float(v) for v in values)
    if reach:
        pool = [math.inf if v is None else v for v in vals]
    else:
        pool = [v for v in vals if v is not None]
    if not pool:
        return Spread(None, None, None, 0, vals)

    def finite(x: float) -> float | None:
        return None if math.isinf(x) else x

    return Spread(finite(statistics.median(pool)), finite(min(pool)), finite(max(pool)), len(pool), vals)


def merge(runs: Sequence[Mapping[str, object]], reach: Iterable[str], values: Iterable[str] = ()) -> dict[str, object]:
    """One row from its seeds' dicts (`runs`, in seed order): every other key as the first seed
    has it, each figure of `reach` ("to X": None is never) and `values` (None is missing) as its
    median under its own key, `<key>_range` ([min, max]) and `<key>_seeds` (each seed's value);
    `seeds`: the number of runs; what names one run (`PER_RUN`) as lists (`seed_numbers`,
    `run_dirs`, `returncodes`), its curve left out."""
    out: dict[str, object] = {k: v for k, v in (runs[0] if runs else {}).items() if k not in PER_RUN}
    for k, plural in PER_RUN.items():
        if plural and any(k in r for r in runs):
            out[plural] = [r.get(k) for r in runs]
    for keys, is_reach in ((reach, True), (values, False)):
        for k in keys:
            s = spread([_num(r.get(k)) for r in runs], reach=is_reach)
            out[k] = _tidy(s.median)
            out[f"{k}_range"] = [_tidy(s.low), _tidy(s.high)]
            out[f"{k}_seeds"] = [_tidy(v) for v in s.values]
    out["seeds"] = len(runs)
    return out


def _num(v: object) -> float | None:
    return None if v is None else float(v)  # type: ignore[arg-type]


def _tidy(v: float | None) -> float | int | None:
    """A whole number as an int, other numbers to 4 significant decimals (JSON and tables)."""
    if v is None:
        return None
    return int(v) if float(v).is_integer() else round(v, 4)


def of(row: Mapping[str, object], key: str, *, reach: bool = True) -> Spread:
    """The spread of `key` of a row that `merge` made, from its `<key>_seeds` (a row without them,
    one run's: its value)."""
    seeds = row.get(f"{key}_seeds")
    vals = list(seeds) if isinstance(seeds, list) else [row.get(key)]
    return spread([_num(v) for v in vals], reach=reach)


def cell(s: Spread, fmt: str = "{:.0f}", reach: bool = True) -> str:
    """One figure for a table: `median [min, max]`; `never` for a "to X" median or max that a seed
    did not reach; `-` where no seed has the figure; just the value for a single seed."""
    gone = "never" if reach else "-"

    def one(x: float | None) -> str:
        return gone if x is None else fmt.format(x)

    if s.n == 0 or (not reach and s.median is None):
        return "-"
    if len(s.values) == 1:
        return one(s.median)
    return f"{one(s.median)} [{one(s.low)}, {one(s.high)}]"

"""`Sampler`: training batches mixed from several tables, prepared ahead on a background thread.

    sampler = Sampler(store, batch_size=256, mix={"online": 0.5, "demos": 0.5}, seed=0).start()
    batch = sampler.get()       # None until some table has data; never waits on disk
    ...
    sampler.close()

The mix is RLPD-style: each batch takes a fixed share from each table (rounded, summing to
`batch_size`); a table with nothing cached yet gives its share to the others.

`window=H` (H > 1) samples windows of H consecutive transitions of one actor's episode instead
of single transitions (chunked critics; see `TableCache.sample_windows` for the keys).

Staleness bound (AReaL-style): with `max_lag=K`, online rows whose `policy_version` is below
`version_floor` (the learner sets it to its version - K before each update) are dropped and
replaced by fresh draws; `dropped_stale` counts them. Other tables (demos, interventions) are
never dropped for age.

Hindsight relabelling (`her`, `her.py`): goal-conditioned rows get, in a share of each batch, a
goal their episode achieved later, with the reward recomputed; `relabelled` counts them.

Rejection sampling (`successful_only`, filtered BC): online windows are kept only when their
episode is known to have succeeded. Every batch carries `table` (the index in TABLES of the table
each row came from), so algorithms can weight tables.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Mapping
from types import MappingProxyType

import numpy as np

from robo_async.buffer.her import HerStrategy, Relabel, relabel
from robo_async.buffer.layout import TABLES
from robo_async.buffer.store import ReplayStore

# `buffer.mix` and `buffer.prefetch` defaults, the one definition (the `buffer:` section, the learner's config and
# the sampler take them from here): RLPD-style, half online, half human data; batches assembled ahead
DEFAULT_MIX: Mapping[str, float] = MappingProxyType({"online": 0.5, "demos": 0.25, "interventions": 0.25})
PREFETCH = 2


def split(batch_size: int, mix: Mapping[str, float]) -> dict[str, int]:
    """Largest-remainder split of `batch_size` by the weights in `mix` (weights need not sum to 1)."""
    total = sum(mix.values())
    if total <= 0:
        return {}
    exact = {t: batch_size * w / total for t, w in mix.items()}
    out = {t: int(v) for t, v in exact.items()}
    for t in sorted(exact, key=lambda t: out[t] - exact[t])[: batch_size - sum(out.values())]:
        out[t] += 1
    return {t: n for t, n in out.items() if n > 0}


def check_mix(mix: Mapping[str, float]) -> dict[str, float]:
    """`mix` with its weights as floats and zero weights dropped; raises ValueError for unknown tables,
    negative weights or all zero."""
    unknown = set(mix) - set(TABLES)
    if unknown:
        raise ValueError(f"buffer.mix names unknown tables {sorted(unknown)}; tables: {list(TABLES)}")
    if any(w < 0 for w in mix.values()) or sum(mix.values()) <= 0:
        raise ValueError(f"buffer.mix weights must be >= 0 and not all 0, got {dict(mix)}")
    return {t: float(w) for t, w in mix.items() if w > 0}


class Sampler:
    """Training batches from a store's RAM caches, mixed across tables by `mix` and prepared ahead on a thread
    (see the module's docstring): `start()`, then `get()` each update, `close()` at the end."""

    def __init__(
        self,
        store: ReplayStore,
        batch_size: int,
        mix: Mapping[str, float],
        seed: int = 0,
        prefetch: int = PREFETCH,
        window: int = 1,
        max_lag: int | None = None,
        successful_only: bool = False,
        lookback: int = 0,
        exclude: frozenset[str] = frozenset(),
        embedding_version: int | None = None,
        her: Relabel | None = None,
    ) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, not {window}")
        if lookback < 0 or (lookback and window < 2):
            raise ValueError(f"lookback must be >= 0 and needs windows (window >= 2), not lookback={lookback}")
        if successful_only and window < 2:
            raise ValueError("successful_only needs windows (window >= 2): outcomes are known per episode")
        if her is not None and window > 1:
            raise ValueError("algo.her relabels single transitions; this algorithm samples windows")
        self.store = store
        self.window = window
        self.lookback = lookback  # windows also bring the observation up to this many ticks before them
        self.max_lag = max_lag
        self.successful_only = successful_only  # online windows only from episodes that succeeded
        self.rejected_outcome = 0
        # windows: observation columns not gathered (frames whose embeddings are stored), and the
        # frozen-encoder version every drawn row must carry (others are left out and counted)
        self.exclude = frozenset(exclude)
        self.embedding_version = embedding_version
        self.dropped_embeddings = 0
        self.her = her  # hindsight relabelling of goal-conditioned rows (`her.py`)
        self.relabelled = 0
        self.version_floor = -(1 << 62)  # online rows from policies older than this are dropped
        self.dropped_stale = 0
        self.batch_size = batch_size
        self.mix = check_mix(mix)
        self._rng = np.random.default_rng(seed)
        self._queue: queue.Queue[dict[str, np.ndarray]] = queue.Queue(max(prefetch, 1))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_shares: dict[str, int] = {}
        self.error: BaseException | None = None  # what killed the prefetch thread, re-raised by get()

    def sample_now(self) -> dict[str, np.ndarray] | None:
        """One mixed batch assembled on the calling thread (None if nothing is cached)."""
        live = {t: w for t, w in self.mix.items() if self.store.can_sample(t)}
        shares = split(self.batch_size, live)
        if not shares:
            return None
        parts = []
        for t, n in shares.items():
            part = self._draw(t, n)
            if part is not None:
                part["table"] = np.full(len(part["policy_version"]), TABLES.index(t), np.int8)
                parts.append(part)
        if not parts:
            return None
        self.last_shares = shares
        if len(parts) == 1:
            return parts[0]
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}

    def _one(self, table: str, n: int) -> dict[str, np.ndarray] | None:
        if self.window > 1:
            return self.store.sample_windows(
                n, self.window, self._rng, table, lookback=self.lookback, exclude=self.exclude
            )
        if self.her is None:
            return self.store.sample(n, self._rng, table)
        her = self.her
        part = self.store.sample(n, self._rng, table, goal_at=her.column, final=her.strategy is HerStrategy.final)
        self.relabelled += relabel(part, part.pop("her/goal"), self._rng, her)
        return part

    def _keep(self, part: dict[str, np.ndarray], table: str = "online") -> np.ndarray:
        """Which rows (windows) pass the embedding version, and online ones the staleness bound and
        the outcome filter."""
        keep = np.ones(len(part["policy_version"]), bool)
        if self.embedding_version is not None:
            ok = np.ones(len(keep), bool)
            for k in ("obs/embedding_version", "next_obs/embedding_version"):
                ok &= part[k] == self.embedding_version if k in part else False
            self.dropped_embeddings += int((~ok).sum())
            keep &= ok
        if table != "online":
            return keep
        if self.max_lag is not None:
            fresh = part["policy_version"] >= self.version_floor
            self.dropped_stale += int((~fresh).sum())
            keep &= fresh
        if self.successful_only:
            won = part["episode_success"] == 1
            self.rejected_outcome += int((keep & ~won).sum())
            keep &= won
        return keep

    def _draw(self, table: str, n: int, rounds: int = 8) -> dict[str, np.ndarray] | None:
        """n rows (or windows) of one table; online rows that fail `_keep` are replaced by new draws."""
        part = self._one(table, n)
        filters = self.embedding_version is not None or (
            table == "online" and (self.max_lag is not None or self.successful_only)
        )
        if part is None or not filters:
            return part
        kept: list[dict[str, np.ndarray]] = []
        drawn = have = 0
        for _ in range(rounds):
            fresh = self._keep(part, table)
            drawn += len(fresh)
            have += int(fresh.sum())
            kept.append({k: v[fresh] for k, v in part.items()})
            missing = n - have
            if missing <= 0:
                break
            # draw enough that the fresh share of it covers what is missing
            part = self._one(table, min(int(missing * drawn / max(have, drawn / 50)) + 8, 64 * n))
            if part is None:
                break
        if not sum(len(p["policy_version"]) for p in kept):
            return None  # nothing cached passes (too old, or no success yet): the other tables fill the batch
        return {k: np.concatenate([p[k] for p in kept])[:n] for k in kept[0]}

    def start(self) -> Sampler:
        """Start the prefetch thread; returns the sampler. Without it, `get()` samples on the caller's thread."""
        self._thread = threading.Thread(target=self._run, name="replay-prefetch", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            self._prefetch()
        except Exception as e:  # noqa: BLE001 - watched: get() raises it on the learner's thread
            self.error = e

    def _prefetch(self) -> None:
        while not self._stop.is_set():
            batch = self.sample_now()
            if batch is None:
                time.sleep(0.01)
                continue
            while not self._stop.is_set():
                try:
                    self._queue.put(batch, timeout=0.05)
                    break
                except queue.Full:
                    pass

    def get(self, timeout: float = 0.0) -> dict[str, np.ndarray] | None:
        """The next prefetched batch; None if none is ready within `timeout` seconds."""
        if self._thread is None:
            return self.sample_now()
        if self.error is not None:
            raise RuntimeError(
                f"replay prefetch thread died: {type(self.error).__name__}: {self.error}"
            ) from self.error
        try:
            return self._queue.get(timeout=timeout) if timeout > 0 else self._queue.get_nowait()
        except queue.Empty:
            return None

    def close(self) -> None:
        """Stop the prefetch thread (waits up to 2 s)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None

"""`TableCache`: decoded transitions of one table in RAM, so sampling never touches the disk.

Two regions of preallocated columns:
- `recent`: a ring of the newest committed transitions (filled by the store's writer at commit);
- `reservoir`: a random subset of the older transitions, paged in from disk by a background
  thread (newest first after a restart, then random runs of consecutive records).
A sample draws from each region in proportion to the share of the table it stands for, so it is
uniform over the whole table when the older data fits the reservoir, and close to it otherwise.

Windows (`sample_windows`): each cached row remembers its `(actor_id, seq)` and where the same
actor's next transition sits in the same region (`succ`). A window follows those links from a
random start for H steps; a link counts only if the row it points at still holds that actor's
next seq (slots get overwritten), so a window never mixes actors, and it stops at the first
`terminated` or `truncated` row, so it never spans episodes. A window whose episode goes on past
what is cached (the newest rows of a running episode) is not used.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

import numpy as np

from robo_async.buffer.codec import Schema
from robo_async.buffer.her import future_slots


class _Region:
    """Preallocated columns plus per-row (actor, seq, successor slot)."""

    def __init__(self, schema: Schema, capacity: int) -> None:
        self.capacity = capacity
        self.cols = {c.name: np.zeros((capacity, *c.shape), c.dtype) for c in schema.columns}
        self.actor = np.full(capacity, -1, np.int64)
        self.seq = np.full(capacity, -1, np.int64)
        self.succ = np.full(capacity, -1, np.int64)
        self.pred = np.full(capacity, -1, np.int64)  # the same actor's previous row, where cached here
        self.outcome = np.full(capacity, -1, np.int8)  # its episode: 1 succeeded, 0 did not, -1 not known yet
        self.filled = 0

    def link(self, slots: np.ndarray, actors: np.ndarray, seqs: np.ndarray) -> None:
        """Rows just written to `slots`: point each at the next seq of its actor among them."""
        order = np.lexsort((seqs, actors))
        s, a, q = slots[order], actors[order], seqs[order]
        nxt = np.full(len(s), -1, np.int64)
        follows = (a[1:] == a[:-1]) & (q[1:] == q[:-1] + 1)
        nxt[:-1] = np.where(follows, s[1:], -1)
        self.succ[s] = nxt
        prv = np.full(len(s), -1, np.int64)
        prv[1:] = np.where(follows, s[:-1], -1)
        self.pred[s] = prv
        # outcomes: each row takes its episode's if that episode's last row is in this run
        ends = self.cols["terminated"][s] | self.cols["truncated"][s]
        won = self.cols["success"][s]
        out = np.full(len(s), -1, np.int8)
        cur, ok = -1, False
        for j in range(len(s) - 1, -1, -1):  # backwards: carry the outcome of the next end
            if ends[j]:
                cur, ok = int(won[j]), True
            elif not ok or j + 1 >= len(s) or not follows[j]:
                ok = False
                cur = -1
            if ok and won[j]:
                cur = 1
            out[j] = cur
        self.outcome[s] = out


class TableCache:
    """Decoded transitions of one table in RAM (see the module's docstring): a ring of the newest rows and a
    reservoir of older ones. The store's committer appends, its pager fills the reservoir, the sampler
    reads; all under `lock`."""

    def __init__(self, schema: Schema, capacity: int) -> None:
        capacity = max(capacity, 2)
        self.schema = schema
        self.recent_capacity = capacity - capacity // 2
        self.reservoir_capacity = capacity // 2
        self._rec = _Region(schema, self.recent_capacity)
        self._res = _Region(schema, self.reservoir_capacity)
        self.reservoir_index = np.full(self.reservoir_capacity, -1, np.int64)  # table index per slot
        self._next = 0
        self._tail: dict[int, tuple[int, int]] = {}  # actor -> (ring slot, seq) of its newest row
        # actor -> (first seq, any success, ring slots, their count) of its running episode
        self._open: dict[int, tuple[int, bool, list[np.ndarray], int]] = {}
        self.total = 0  # committed transitions in the table (indices 0..total-1, ever)
        self.first = 0  # the oldest index still on disk (retention evicts below it)
        self.lock = threading.Lock()

    @property
    def recent_filled(self) -> int:
        """Rows held in the ring of newest transitions."""
        return self._rec.filled

    @property
    def reservoir_filled(self) -> int:
        """Rows held in the reservoir of older transitions."""
        return self._res.filled

    # --- filled by the writer (recent) and the pager (reservoir) ----------------------------
    def set_total(self, total: int, first: int = 0) -> None:
        """The table now has `total` committed rows and holds indices from `first` on (after recovery or an
        eviction)."""
        with self.lock:
            self.total = total
            self.first = first

    def append(
        self, arrays: Mapping[str, np.ndarray], total_after: int, actor_id: int = -1, first_seq: int = -1
    ) -> None:
        """Newly committed rows (a batch of one actor, seqs `first_seq`..., leading dim n) and the
        table size after the commit."""
        n = len(next(iter(arrays.values())))
        cap = self.recent_capacity
        if n > cap:
            arrays = {k: a[-cap:] for k, a in arrays.items()}
            first_seq += n - cap
            n = cap
        first = min(n, cap - self._next)  # up to the end of the ring, then from its start
        r = self._rec
        slots = (self._next + np.arange(n)) % cap
        with self.lock:
            for k, a in arrays.items():
                col = r.cols[k]
                col[self._next : self._next + first] = a[:first]
                if first < n:
                    col[: n - first] = a[first:]
            r.actor[slots] = actor_id
            r.seq[slots] = first_seq + np.arange(n)
            r.succ[slots[:-1]] = slots[1:]
            r.succ[slots[-1]] = -1
            r.pred[slots[1:]] = slots[:-1]
            r.pred[slots[0]] = -1
            tail = self._tail.get(actor_id)
            if tail is not None and tail[1] == first_seq - 1:
                r.succ[tail[0]] = slots[0]  # the same actor's previous batch continues here
                r.pred[slots[0]] = tail[0]
            self._tail[actor_id] = (int(slots[-1]), first_seq + n - 1)
            self._set_outcomes(arrays, slots, actor_id, first_seq)
            self._next = int((self._next + n) % cap)
            r.filled = min(cap, r.filled + n)
            self.total = total_after

    def _set_outcomes(self, arrays: Mapping[str, np.ndarray], slots: np.ndarray, actor: int, first_seq: int) -> None:
        """When an episode ends, every ring row of it learns whether it succeeded (rejection
        sampling on outcomes); rows of a running episode stay unknown (-1). The ring slots of each
        actor's running episode are kept (at most the ring's size), so an episode's end touches its
        own rows, not the whole ring: with many actors (a vectorized actor's 64 streams) ending
        episodes every few ticks, a scan of the ring per end was a fifth of the learner's time."""
        r = self._rec
        r.outcome[slots] = -1
        if "terminated" not in arrays:
            return
        ends = np.nonzero(np.asarray(arrays["terminated"]) | np.asarray(arrays["truncated"]))[0]
        won = np.asarray(arrays.get("success", np.zeros(len(slots), bool)))
        start_seq, any_won, held, count = self._open.get(actor, (first_seq, False, [], 0))
        lo = 0
        for e in ends:
            any_won = any_won or bool(won[lo : e + 1].any())
            end_seq = first_seq + int(e)
            s = np.concatenate([*held, slots[lo : e + 1]])
            # slots since overwritten (by this actor's later rows or another's) are left alone
            mine = (r.actor[s] == actor) & (r.seq[s] >= start_seq) & (r.seq[s] <= end_seq)
            r.outcome[s[mine]] = int(any_won)
            start_seq, any_won, lo, held, count = end_seq + 1, False, int(e) + 1, [], 0
        if lo < len(slots):
            held.append(slots[lo:])
            count += len(slots) - lo
            while count - len(held[0]) >= self.recent_capacity:  # older ones are overwritten by now
                count -= len(held.pop(0))
        self._open[actor] = (start_seq, any_won or bool(won[lo:].any()), held, count)

    def older_count(self) -> int:
        """Table indices `[first, first + older_count)` are on disk and not in the recent ring
        (rows paged into the reservoir before an eviction stay until the pager replaces them)."""
        return max(0, self.total - self.first - self.recent_filled)

    def put_reservoir(
        self, slot: int, table_index: int, row: Mapping[str, np.ndarray], actor_id: int = -1, seq: int = -1
    ) -> None:
        """One older row paged in at reservoir `slot` (see `put_reservoir_run`)."""
        self.put_reservoir_run([slot], [table_index], [row], [actor_id], [seq])

    def put_reservoir_run(
        self,
        slots: list[int],
        table_index: list[int],
        rows: list[Mapping[str, np.ndarray]],
        actors: list[int],
        seqs: list[int],
    ) -> None:
        """Rows paged in together; consecutive records of one actor among them are linked."""
        if not slots:
            return
        r = self._res
        s = np.asarray(slots, np.int64)
        with self.lock:
            for slot, row in zip(slots, rows, strict=False):
                for k, a in row.items():
                    r.cols[k][slot] = a
            r.actor[s] = actors
            r.seq[s] = seqs
            r.link(s, np.asarray(actors, np.int64), np.asarray(seqs, np.int64))
            self.reservoir_index[s] = table_index
            r.filled = max(r.filled, int(s.max()) + 1)

    # --- read by the sampler ----------------------------------------------------------------
    def ready(self) -> bool:
        """Whether any row is cached (sampling is possible)."""
        return self.recent_filled + self.reservoir_filled > 0

    def cached(self) -> int:
        """Rows cached in both regions."""
        return self.recent_filled + self.reservoir_filled

    def _split(self, n: int, rng: np.random.Generator) -> tuple[int, int]:
        """(from the ring, from the reservoir) for a sample of n."""
        older = self.older_count()
        res, rec = self._res.filled, self._rec.filled
        if res + rec == 0:
            raise LookupError("nothing cached yet")
        if res == 0:
            n_old = 0
        elif rec == 0:
            n_old = n
        else:
            n_old = int(rng.binomial(n, older / max(older + rec, 1)))
        return n - n_old, n_old

    def sample(self, n: int, rng: np.random.Generator, goal_at: str | None = None, final: bool = False) -> dict:
        """`n` rows drawn uniformly from both regions, in proportion to the part of the table each stands for
        (LookupError while nothing is cached). `goal_at` (HER, `her.py`): also `her/goal`, that column at a
        later row of each row's episode (its last cached row with `final`, else a uniform draw)."""
        with self.lock:
            n_new, n_old = self._split(n, rng)
            parts = []
            if n_new:
                parts.append((self._rec, rng.integers(0, self._rec.filled, size=n_new)))
            if n_old:
                parts.append((self._res, rng.integers(0, self._res.filled, size=n_old)))
            out = {c.name: _gather(parts, c.name) for c in self.schema.columns}
            if goal_at is not None:
                out["her/goal"] = _gather([(r, future_slots(r, i, rng, final)) for r, i in parts], goal_at)
            return out

    def sample_windows(
        self,
        n: int,
        horizon: int,
        rng: np.random.Generator,
        tries: int = 8,
        lookback: int = 0,
        exclude: frozenset[str] = frozenset(),
    ) -> dict[str, np.ndarray] | None:
        """n windows of `horizon` consecutive transitions of one actor's episode (see the module
        docstring); None if no complete window is cached yet. Keys: `obs/*` (the first row),
        `next_obs/*`, `terminated`, `truncated`, `success` (the last row inside the episode),
        `actions` [n, H, A] and `rewards` [n, H] (repeated / 0 after an episode end), `mask`
        [n, H] (1 inside the episode), `steps` [n] (rows inside the episode, 1..H), and the first
        row's `policy_version` and `episode_success` (1: its episode succeeded, 0: it did not, -1:
        not known: still running, or its end is not cached).

        `lookback=D` > 0 adds, per window, a lag d drawn uniformly from 0..min(D, rows of the same
        episode cached before the window): `lag` [n], `lag_obs/*` (the observation d rows before
        the window's first) and `lag_actions` [n, D, A] (the d actions executed between that
        observation and the window, in order, then zeros): what an asynchronous actor had when it
        asked for the window's chunk d ticks ahead (the delay-consistent input of a chunk actor).

        `exclude`: observation columns (`obs/front`, `next_obs/front`) left out of the batch (and
        their `lag_` twins), e.g. frames when the learner trains on their stored embeddings."""
        picked: list[tuple[_Region, np.ndarray]] = []
        got = 0
        with self.lock:
            for _ in range(tries):
                n_new, n_old = self._split(2 * (n - got), rng)  # oversample: some starts fail
                for region, k in ((self._rec, n_new), (self._res, n_old)):
                    if k == 0 or region.filled == 0 or got >= n:
                        continue
                    chains = self._chains(region, rng.integers(0, region.filled, size=k), horizon)
                    chains = chains[: n - got]
                    if len(chains):
                        picked.append((region, chains))
                        got += len(chains)
                if got >= n:
                    break
            if got == 0:
                return None
            return self._window_batch(picked, horizon, n, lookback, rng, exclude)

    def _chains(self, r: _Region, start: np.ndarray, horizon: int) -> np.ndarray:
        """[k', H] slots of complete windows from these starts (rows after an episode end repeat
        the last row inside it); starts that cannot complete a window are left out."""
        term, trunc = r.cols["terminated"], r.cols["truncated"]
        chains = np.empty((len(start), horizon), np.int64)
        chains[:, 0] = start
        ok = r.actor[start] >= 0
        ended = term[start] | trunc[start]
        for k in range(1, horizon):
            cur = chains[:, k - 1]
            nxt = r.succ[cur]
            safe = np.where(nxt >= 0, nxt, 0)
            linked = (nxt >= 0) & (r.actor[safe] == r.actor[cur]) & (r.seq[safe] == r.seq[cur] + 1)
            ok &= ended | linked  # inside the episode the next row must be there
            chains[:, k] = np.where(ended, cur, safe)
            ended = ended | term[chains[:, k]] | trunc[chains[:, k]]
        return chains[ok]

    def _behind(self, r: _Region, first: np.ndarray, lookback: int) -> np.ndarray:
        """[k, D] slots of the D rows before each start, nearest first (-1 past what is cached of
        its episode: another actor's row, an overwritten slot, or the previous episode's end)."""
        back = np.full((len(first), lookback), -1, np.int64)
        cur, ok = first, np.ones(len(first), bool)
        for j in range(lookback):
            prv = r.pred[cur]
            safe = np.where(prv >= 0, prv, 0)
            ok &= (
                (prv >= 0)
                & (r.actor[safe] == r.actor[cur])
                & (r.seq[safe] == r.seq[cur] - 1)
                & ~(r.cols["terminated"][safe] | r.cols["truncated"][safe])
            )
            back[:, j] = np.where(ok, safe, -1)
            cur = np.where(ok, safe, cur)
        return back

    def _window_batch(
        self,
        picked: list[tuple[_Region, np.ndarray]],
        horizon: int,
        n: int,
        lookback: int = 0,
        rng: np.random.Generator | None = None,
        exclude: frozenset[str] = frozenset(),
    ) -> dict[str, np.ndarray]:
        out: dict[str, list[np.ndarray]] = {}
        columns = [c for c in self.schema.columns if c.name not in exclude]

        def add(k: str, v: np.ndarray) -> None:
            out.setdefault(k, []).append(v)

        for r, ch in picked:
            first = ch[:, 0]
            same = ch[:, 1:] == ch[:, :-1]  # repeats: past the episode end
            mask = np.ones(ch.shape, np.float32)
            mask[:, 1:] = 1.0 - np.maximum.accumulate(same, axis=1)
            steps = mask.sum(1).astype(np.int64)
            last = ch[np.arange(len(ch)), steps - 1]
            for c in columns:
                if c.name.startswith("obs/"):
                    add(c.name, r.cols[c.name][first])
                elif c.name.startswith("next_obs/"):
                    add(c.name, r.cols[c.name][last])
            add("actions", r.cols["action"][ch])
            if "intervention" in r.cols:  # who acted on each step (wire.POLICY/OPERATOR/TAKEOVER)
                add("interventions", r.cols["intervention"][ch])
            add("rewards", r.cols["reward"][ch] * mask)
            add("mask", mask)
            add("steps", steps)
            for k in ("terminated", "truncated", "success"):
                add(k, r.cols[k][last])
            add("policy_version", r.cols["policy_version"][first])
            add("episode_success", r.outcome[first])
            if lookback > 0:
                assert rng is not None
                back = self._behind(r, first, lookback)
                have = (back >= 0).sum(1)
                lag = rng.integers(0, have + 1)  # uniform over 0..what this episode has cached
                rows = np.arange(len(first))
                src = np.where(lag > 0, back[rows, np.maximum(lag - 1, 0)], first)
                for c in columns:
                    if c.name.startswith("obs/"):
                        add("lag_" + c.name, r.cols[c.name][src])
                # the committed actions in order: rows k-d .. k-1 (back[:, d-1] .. back[:, 0])
                j = np.arange(lookback)
                idx = back[rows[:, None], np.clip(lag[:, None] - 1 - j[None], 0, lookback - 1)]
                acts = r.cols["action"][np.where(idx >= 0, idx, 0)]
                acts[j[None] >= lag[:, None]] = 0
                add("lag_actions", acts)
                add("lag", lag.astype(np.int64))
        return {k: (v[0] if len(v) == 1 else np.concatenate(v))[:n] for k, v in out.items()}


def _gather(parts: list[tuple[_Region, np.ndarray]], name: str) -> np.ndarray:
    arrays = [r.cols[name][i] for r, i in parts]
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def window_targets(
    rewards: np.ndarray, mask: np.ndarray, steps: np.ndarray, terminated: np.ndarray, gamma: float
) -> tuple[np.ndarray, np.ndarray]:
    """(discounted H-step reward sum_k gamma^k r_k over the rows inside the episode, the
    bootstrap factor gamma^steps on the value after the window, 0 after a termination; a
    truncation (time limit) still bootstraps)."""
    h = rewards.shape[1]
    disc = gamma ** np.arange(h, dtype=np.float64)
    ret = (rewards * mask * disc).sum(1).astype(np.float32)
    boot = (gamma ** steps.astype(np.float64)) * (1.0 - terminated.astype(np.float64))
    return ret, boot.astype(np.float32)

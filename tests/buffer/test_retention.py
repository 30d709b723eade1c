"""Retention: tables stay within their limits, oldest first; images go with the last record that
uses them (never earlier: interventions share online's frames); the archive gets the evicted rows;
sampling keeps working; counts, first indices and high-water marks survive a reopen."""

import time

import numpy as np

from robo_async.buffer.codec import decode_record
from robo_async.buffer.lmdb_store import PersistentReplayStore, StoreConfig
from robo_async.transport.wire import OPERATOR
from tests.buffer.test_lmdb_store import batch


def opened(path, **kw):
    return PersistentReplayStore(path, StoreConfig(commit_ms=5, **kw)).open()


def fill(store, actors=2, per_actor=500, n=25, images=1, operated=()):
    """Batches of n rows per actor, episodes of 50 ticks; rows in `operated` (seq ranges) by an operator."""
    for seq in range(0, per_actor, n):
        for a in range(actors):
            b = batch(a, seq, n, images=images, size=8)
            arrays = dict(b.arrays)
            arrays["truncated"] = (np.arange(seq, seq + n) + 1) % 50 == 0
            iv = np.zeros(n, np.uint8)
            for lo, hi in operated:
                iv[(np.arange(seq, seq + n) >= lo) & (np.arange(seq, seq + n) < hi)] = OPERATOR
            arrays["intervention"] = iv
            store.insert(b.__class__(a, seq, arrays))
    assert store.flush()


def settle(store, table="online", limit=None, timeout=30):
    """Retention runs on the committer thread after commits and when idle: wait until it caught up."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and store.live(table) > (limit or 0):
        time.sleep(0.05)


def image_audit(store):
    """(image keys referenced by held records, image keys stored): equal means no leak, none dangling."""
    referenced, stored = set(), set()
    with store._env.begin() as txn:
        for t in ("online", "demos", "interventions"):
            for i in range(store.first[t], store.counts[t]):
                v = txn.get(i.to_bytes(8, "big"), db=store._dbs[f"t:{t}"])
                referenced.update(decode_record(store.schema, v)[3])
        stored.update(k for k, _ in txn.cursor(db=store._dbs["img"]))
    return referenced, stored


def test_a_table_stays_within_max_rows_oldest_first_and_sampling_keeps_working(tmp_path):
    s = opened(tmp_path / "r", max_rows={"online": 300})
    fill(s)
    settle(s, limit=300)
    assert s.counts["online"] == 1000 and s.live("online") == 300 and s.first["online"] == 700
    seqs = sorted((a, q) for _, a, q, _ in s.records("online"))
    assert seqs == sorted((a, q) for a in (0, 1) for q in range(350, 500))  # the newest 150 per actor
    referenced, stored = image_audit(s)
    assert referenced <= stored and stored == referenced  # frames of evicted rows went with them
    assert s.corrupt_records == 0
    rng = np.random.default_rng(0)
    batch_ = s.sample(64, rng)
    assert batch_["reward"].shape == (64,)
    w = s.sample_windows(16, 4, rng)
    assert w is not None and w["actions"].shape[:2] == (16, 4)
    assert s.high_water() == {0: 500, 1: 500}
    s.close()
    s = opened(tmp_path / "r", max_rows={"online": 300})  # reopened: where it stood
    assert s.first["online"] == 700 and s.live("online") == 300 and len(s) == 300
    assert s.insert(batch(0, 100, 25, images=1, size=8)) == 0  # an evicted seq resent: still a duplicate
    s.close()


def test_interventions_keep_the_frames_they_share_with_evicted_online_rows(tmp_path):
    s = opened(tmp_path / "r", max_rows={"online": 200})
    fill(s, operated=[(10, 30), (260, 275)])
    settle(s, limit=200)
    assert s.live("online") == 200 and s.live("interventions") == 2 * (20 + 15)
    rows = list(s.rows("interventions"))  # decodes every frame: a missing one is a corrupt record
    assert len(rows) == 70 and s.corrupt_records == 0
    referenced, stored = image_audit(s)
    assert referenced == stored
    s.close()
    # now the interventions table is limited too: its oldest rows and their frames go as well
    s = opened(tmp_path / "r", max_rows={"online": 200, "interventions": 30})
    fill_more = batch(0, 500, 25, images=1, size=8)
    s.insert(fill_more)
    s.flush()
    settle(s, "interventions", limit=30)
    settle(s, limit=200)
    assert s.live("interventions") == 30 and s.live("online") == 200
    referenced, stored = image_audit(s)
    assert referenced == stored
    assert len(list(s.rows("interventions"))) == 30 and s.corrupt_records == 0
    s.close()


def test_evicted_rows_are_archived_first_and_max_gb_bounds_the_data(tmp_path):
    s = opened(tmp_path / "r", max_rows={"online": 100}, archive_dir=str(tmp_path / "archive"))
    fill(s, actors=1, per_actor=400)
    settle(s, limit=100)
    assert s.live("online") == 100 and s.archived == 300
    s.close()
    a = PersistentReplayStore(tmp_path / "archive").open(readonly=True)
    got = [(act, q) for _, act, q, _ in a.records("online")]
    assert got == [(0, q) for q in range(300)] and a.corrupt_records == 0  # frames came along
    a.close()
    s = opened(tmp_path / "g", max_gb=0.5 / 1024)  # 0.5 MB of data pages
    fill(s, actors=1, per_actor=1000, images=2)
    settle(s, limit=999)
    deadline = time.monotonic() + 30
    while s.data_bytes() > 0.5 * 2**20 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert s.data_bytes() <= 0.5 * 2**20 and 0 < s.live("online") < 1000
    s.close()


def test_retention_is_set_from_the_command_line(tmp_path):
    """`buffer.max_rows.online=N` (every table is listed in the config, null: no limit) reaches the
    store the learner opens, which then keeps that table within N."""
    from robo_async.config import compose_config
    from robo_async.launch.builders import build_plan

    plan = build_plan(compose_config(["buffer.max_rows.online=300", "eval_episodes=0"]), tmp_path / "run")
    assert plan.learner.store.max_rows == {"online": 300, "demos": None, "interventions": None}
    s = PersistentReplayStore(tmp_path / "r", plan.learner.store).open()
    fill(s, per_actor=400)
    settle(s, limit=300)
    assert s.live("online") == 300 and s.counts["online"] == 800
    s.close()
    # a limit below one row is named when the run is planned, before any process starts
    import pytest

    from robo_async.launch.mirrors import ConfigError

    with pytest.raises(ConfigError, match=r"buffer.max_rows \{'online': 0, .*limits at least 1"):
        build_plan(compose_config(["buffer.max_rows.online=0", "eval_episodes=0"]), tmp_path / "run0")

import logging
import subprocess
import sys
import time

import lmdb
import numpy as np
import pytest

from robo_async.bench.loadgen import make_row
from robo_async.buffer.codec import STORE_SCHEMA
from robo_async.buffer.lmdb_store import PersistentReplayStore, StoreConfig, StoreError
from robo_async.buffer.sampler import Sampler, split
from robo_async.buffer.store import ReplayError
from robo_async.transport.wire import TransitionBatch


def batch(actor, seq, n, images=0, size=16, dim=4):
    cols = {}
    for i in range(n):
        o, x = make_row(seq + i, dim, images, size)
        for k in o:
            cols.setdefault(f"obs/{k}", []).append(o[k])
            cols.setdefault(f"next_obs/{k}", []).append(x[k])
    arrays = {k: np.stack(v) for k, v in cols.items()}
    arrays.update(
        action=np.zeros((n, 2), np.float32),
        reward=np.arange(seq, seq + n, dtype=np.float32),
        terminated=np.zeros(n, bool),
        truncated=np.zeros(n, bool),
        policy_version=np.zeros(n, np.int64),
        success=np.zeros(n, bool),
    )
    return TransitionBatch(actor, seq, arrays)


def opened(path, **kw):
    return PersistentReplayStore(path, StoreConfig(commit_ms=5, **kw)).open()


def test_a_refused_range_is_passed_over_durably_and_the_stream_goes_on(tmp_path):
    """A batch the learner refuses for what it holds would be resent and refused forever, its
    stream waiting for it: `refuse` passes over its range (only the next one the stream expects),
    counted; the ack moves past it, later batches are taken, and all of it survives a reopen and a
    rebuild of the high-water marks from the rows."""
    s = opened(tmp_path / "r")
    assert s.refuse(0, 0, 4, "before any row") == 4  # a store whose first news is a refusal
    assert s.insert(batch(0, 4, 6)) == 6
    assert s.refuse(0, 20, 5, "not the next range") == 0  # a later range comes round again in order
    assert s.refuse(0, 10, 5, "NaN in obs/state") == 5
    assert s.insert(batch(0, 10, 5)) == 0  # the refused range, resent: already passed over
    assert s.insert(batch(0, 15, 3)) == 3
    assert s.flush()
    assert s.ack(0) == 18 and len(s) == 9 and s.rows_refused == 9
    assert [r["reward"] for _, r in s.rows("online")] == [*range(4, 10), 15, 16, 17]
    s.close()
    s = opened(tmp_path / "r")
    assert s.ack(0) == 18 and s.rows_refused == 9
    s.close()
    from robo_async.buffer.recovery import rebuild_high_water

    s = opened(tmp_path / "r")
    assert rebuild_high_water(s._h, writable=False)[0] == 18  # rows end at 18; a refused tail would be kept too
    assert s.refuse(0, 18, 2, "a refused tail") == 2
    assert s.flush()
    assert rebuild_high_water(s._h, writable=False)[0] == 20  # from the refused mark, no row past 18
    s.close()


def test_duplicates_and_gaps_are_dropped_and_acks_follow_commits(tmp_path):
    s = opened(tmp_path / "r")
    assert s.insert(batch(0, 0, 10)) == 10
    assert s.insert(batch(0, 0, 10)) == 0  # a resend
    assert s.insert(batch(0, 5, 10)) == 5  # overlap: only the new tail
    assert s.insert(batch(0, 40, 5)) == 0  # a gap: an earlier batch was lost in flight
    assert s.insert(batch(1, 0, 3)) == 3
    assert s.flush()
    assert s.ack(0) == 15 and s.ack(1) == 3 and len(s) == 18 and s.out_of_order == 1
    s.close()
    s = opened(tmp_path / "r")  # recovery: counts and high-water marks come back
    assert len(s) == 18 and s.high_water() == {0: 15, 1: 3}
    assert s.insert(batch(0, 10, 10)) == 5
    s.flush()
    rewards = sorted(float(r["reward"]) for _, r in s.rows())
    assert rewards == sorted(list(range(20)) + [0, 1, 2])
    s.close()


def test_images_round_trip_losslessly_and_are_stored_once(tmp_path):
    s = opened(tmp_path / "r")
    b = batch(0, 0, 20, images=2)
    s.insert(b)
    s.insert(batch(0, 20, 20, images=2))
    s.flush()
    s.close()
    s = opened(tmp_path / "r")
    rows = dict(s.rows())
    np.testing.assert_array_equal(rows[7]["obs/cam1"], b.arrays["obs/cam1"][7])
    np.testing.assert_array_equal(rows[7]["next_obs/cam0"], b.arrays["next_obs/cam0"][7])
    with s._env.begin(db=s._dbs["img"]) as txn:  # a next_obs frame equal to the next obs frame is not stored twice
        assert txn.stat()["entries"] == 2 * 2 * 21  # per batch and camera: 20 obs frames + the last next frame
    s.close()


def test_png_and_qoi_frames_mix_in_one_store_and_a_damaged_frame_is_named(tmp_path):
    s = opened(tmp_path / "r", image_codec="png")  # a store written with PNG frames ...
    a = batch(0, 0, 10, images=1, size=32)
    s.insert(a)
    s.flush()
    s.close()
    s = opened(tmp_path / "r")  # ... continued with QOI (the default)
    b = batch(0, 10, 10, images=1, size=32)
    s.insert(b)
    s.flush()
    rows = dict(s.rows())
    np.testing.assert_array_equal(rows[3]["obs/cam0"], a.arrays["obs/cam0"][3])
    np.testing.assert_array_equal(rows[15]["obs/cam0"], b.arrays["obs/cam0"][5])
    with s._env.begin(db=s._dbs["img"]) as txn:
        tags = {bytes(v[:1]) for _, v in txn.cursor()}
    assert tags == {b"P", b"Q"}
    with s._env.begin(write=True, db=s._dbs["img"]) as txn:  # break one QOI frame (checksum kept valid)
        key, blob = next((k, bytes(v)) for k, v in txn.cursor() if bytes(v[:1]) == b"Q")
        bad = blob[5:20] + b"garbage"
        import zlib

        txn.put(key, b"Q" + zlib.crc32(bad).to_bytes(4, "little") + bad)
    with pytest.raises(Exception, match="does not decode"):
        with s._env.begin() as txn:
            for i in range(20):
                s._read_row(txn, "online", i)
    s.close()


def encoded(b, codec="qoi"):
    from robo_async.buffer.codec import encode_frames

    return TransitionBatch(b.actor_id, b.seq, encode_frames(b.arrays, codec))


def test_frames_encoded_by_the_actor_are_stored_as_they_came(tmp_path):
    s = opened(tmp_path / "r", image_codec="png")  # the store's own codec is not used for them
    raw = batch(0, 0, 10, images=2, size=32)
    sent = encoded(raw)
    assert s.insert(sent) == 10
    s.flush()
    sample = s.sample(64, np.random.default_rng(0))  # the RAM cache holds the decoded pixels
    for img, r in zip(sample["obs/cam0"], sample["reward"], strict=False):
        np.testing.assert_array_equal(img, raw.arrays["obs/cam0"][int(r)])
    with s._env.begin(db=s._dbs["img"]) as txn:
        stored = {bytes(v) for _, v in txn.cursor()}
    assert set(sent.arrays["obs/cam1"].blobs) <= stored and all(b[:1] == b"Q" for b in stored)
    assert len(stored) == 2 * 11  # next_obs frames equal to the next obs are kept once
    s.close()
    s = opened(tmp_path / "r")
    rows = dict(s.rows())
    np.testing.assert_array_equal(rows[9]["next_obs/cam1"], raw.arrays["next_obs/cam1"][9])
    s.close()


def test_an_undecodable_frame_from_an_actor_is_refused_and_nothing_of_it_is_kept(tmp_path):
    import zlib

    s = opened(tmp_path / "r")
    good = encoded(batch(0, 0, 5, images=1, size=16))
    assert s.insert(good) == 5
    bad = encoded(batch(0, 5, 5, images=1, size=16))
    f = bad.arrays["obs/cam0"]
    junk = f.blobs[3][5:12] + b"junk"  # a valid checksum over bytes that are not an image
    f.blobs[3] = b"Q" + zlib.crc32(junk).to_bytes(4, "little") + junk
    with pytest.raises(ReplayError, match=r"actor 0 seq 5: 'obs/cam0' image 3: .*does not decode"):
        s.insert(bad)
    s.flush()
    assert s.ack(0) == 5 and len(s) == 5  # refused whole; the actor still holds it (unacked)
    assert s.insert(encoded(batch(0, 5, 5, images=1, size=16))) == 5  # a good resend is taken
    s.flush()
    assert s.ack(0) == 10
    s.close()


def test_jpeg_codec_is_close_not_exact(tmp_path):
    s = opened(tmp_path / "r", image_codec="jpeg", jpeg_quality=90)
    b = batch(0, 0, 4, images=1, size=32)
    s.insert(b)
    s.flush()
    row = dict(s.rows())[2]["obs/cam0"].astype(int)
    assert np.abs(row - b.arrays["obs/cam0"][2]).mean() < 8
    s.close()


def test_damaged_tail_is_discarded_with_a_log_and_resent_data_is_accepted(tmp_path, caplog):
    s = opened(tmp_path / "r")
    s.insert(batch(0, 0, 30))
    s.flush()
    s.close()
    env = lmdb.open(str(tmp_path / "r"), max_dbs=8)
    db = env.open_db(b"t:online")
    with env.begin(write=True, db=db) as txn:  # what a failing disk leaves behind
        for i in (28, 29):
            value = bytearray(txn.get(i.to_bytes(8, "big")))
            value[10:20] = b"\x00" * 10
            txn.put(i.to_bytes(8, "big"), bytes(value))
    env.close()
    with caplog.at_level(logging.WARNING):
        s = opened(tmp_path / "r")
    assert "discarded 2 damaged record(s)" in caplog.text
    assert len(s) == 28 and s.ack(0) == 28
    assert s.insert(batch(0, 0, 30)) == 2  # the actor's resend fills the hole
    s.flush()
    assert len(s) == 30 and sorted(float(r["reward"]) for _, r in s.rows()) == list(range(30))
    s.close()


def test_batch_that_does_not_fit_is_refused_by_name(tmp_path):
    s = opened(tmp_path / "r")
    s.insert(batch(0, 0, 5))
    with pytest.raises(ReplayError, match=r"'next_obs/state' is float32\(5,\), the store holds float32\(4,\)"):
        s.insert(batch(0, 5, 5, dim=5))
    with pytest.raises(ReplayError, match="unknown table 'nope'"):
        s.insert(batch(0, 5, 5), table="nope")
    s.flush()
    assert len(s) == 5 and s.ack(0) == 5
    s.close()


def test_incompatible_or_garbage_store_is_refused(tmp_path):
    s = opened(tmp_path / "r")
    s.insert(batch(0, 0, 5))
    s.flush()
    with s._env.begin(write=True, db=s._dbs["meta"]) as txn:
        import msgpack

        d = msgpack.unpackb(txn.get(b"schema"))
        d["store_schema"] = STORE_SCHEMA + 1
        txn.put(b"schema", msgpack.packb(d))
    s.close()
    with pytest.raises(StoreError, match=f"store schema {STORE_SCHEMA + 1}, this version reads {STORE_SCHEMA}"):
        opened(tmp_path / "r")
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "data.mdb").write_bytes(b"not an lmdb file" * 1000)
    with pytest.raises(StoreError, match="damaged or not a replay store"):
        opened(tmp_path / "g")


def test_full_store_fails_loudly_keeps_acks_honest_and_sampling_goes_on(tmp_path, caplog):
    s = PersistentReplayStore(tmp_path / "r", StoreConfig(commit_ms=5, map_size_gb=2**-6)).open()  # 16 MiB
    s.insert(batch(0, 0, 10, images=1, size=64))
    s.flush()
    assert s.ack(0) == 10
    with caplog.at_level(logging.ERROR):
        seq = 10
        while s.write_errors == 0 and seq < 20_000:  # random-ish frames until the map is full
            b = batch(0, seq, 50, images=1, size=64)
            b.arrays["obs/cam0"][:] = np.random.default_rng(seq).integers(0, 255, b.arrays["obs/cam0"].shape)
            s.insert(b)
            s.flush()
            seq += 50
    assert s.write_errors >= 1 and "not acked" in caplog.text and "MapFullError" in s.last_error
    acked = s.ack(0)
    assert acked < seq  # what failed was never acked: the actor still holds it
    assert s.sample(8, np.random.default_rng(0))["obs/state"].shape == (8, 4)
    assert s.insert(batch(0, acked, 5, images=1, size=64)) == 5  # a resend is accepted again
    s.close()


DISK_FULL = """
import resource, signal, sys
import numpy as np
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # writes past the limit fail with EFBIG, like ENOSPC
resource.setrlimit(resource.RLIMIT_FSIZE, (4 * 2**20, 4 * 2**20))
sys.path.insert(0, sys.argv[2])
from tests.buffer.test_lmdb_store import batch
from robo_async.buffer.lmdb_store import PersistentReplayStore, StoreConfig
s = PersistentReplayStore(sys.argv[1], StoreConfig(commit_ms=5)).open()
seq = 0
while s.write_errors == 0 and seq < 50_000:
    b = batch(0, seq, 50, images=1, size=64)
    b.arrays["obs/cam0"][:] = np.random.default_rng(seq).integers(0, 255, b.arrays["obs/cam0"].shape)
    s.insert(b); s.flush(); seq += 50
print("errors", s.write_errors, "acked", s.ack(0), "sent", seq, s.last_error)
s.close()
"""


def test_disk_full_during_commit_loses_nothing_acked(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", DISK_FULL, str(tmp_path / "r"), str(__import__("pathlib").Path(__file__).parents[2])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    words = out.stdout.split()
    errors, acked, sent = int(words[1]), int(words[3]), int(words[5])
    assert errors >= 1 and acked < sent, out.stdout
    s = PersistentReplayStore(tmp_path / "r").open(readonly=True)  # everything acked is there, intact
    assert sorted(float(r["reward"]) for _, r in s.rows()) == list(range(acked))
    s.close()


def test_cache_pages_older_data_in_after_restart(tmp_path):
    s = opened(tmp_path / "r", cache_transitions=200)
    for seq in range(0, 1000, 50):
        s.insert(batch(0, seq, 50))
    s.flush()
    s.close()
    s = opened(tmp_path / "r", cache_transitions=200, refresh_per_s=0)
    deadline = time.monotonic() + 30
    while s.caches["online"].reservoir_filled < 100 and time.monotonic() < deadline:
        time.sleep(0.01)
    cache = s.caches["online"]
    assert cache.reservoir_filled == 100 and cache.recent_filled == 0
    first_fill = set(cache.reservoir_index[:100].tolist())
    assert first_fill == set(range(900, 1000))  # newest first after a restart
    s.close()
    s = opened(tmp_path / "r", cache_transitions=200, refresh_per_s=2000)
    deadline = time.monotonic() + 30
    idx = s.caches["online"].reservoir_index
    while not (idx.min() >= 0 and idx.min() < 900) and time.monotonic() < deadline:
        time.sleep(0.01)  # then random refresh across the whole table
    assert 0 <= idx.min() < 900
    out = s.sample(256, np.random.default_rng(0))
    np.testing.assert_array_equal(out["obs/state"][:, 0], out["reward"])
    s.close()


def test_uniform_sampling_when_everything_fits(tmp_path):
    s = opened(tmp_path / "r")
    s.insert(batch(0, 0, 100))
    s.flush()
    s.close()
    s = opened(tmp_path / "r")  # half the table is paged into the reservoir, the rest arrives new
    deadline = time.monotonic() + 30
    while s.caches["online"].reservoir_filled < 100 and time.monotonic() < deadline:
        time.sleep(0.01)
    s.insert(batch(0, 100, 100))
    s.flush()
    r = s.sample(40_000, np.random.default_rng(0))["reward"]
    counts = np.bincount(r.astype(int), minlength=200)
    assert counts.min() > 120 and counts.max() < 290  # 200 per index expected
    s.close()


def test_split_and_mixed_batches(tmp_path):
    assert split(256, {"online": 0.5, "demos": 0.25, "interventions": 0.25}) == {
        "online": 128,
        "demos": 64,
        "interventions": 64,
    }
    assert sum(split(255, {"online": 1, "demos": 1, "interventions": 1}).values()) == 255
    s = opened(tmp_path / "r")
    s.insert(batch(0, 0, 50))
    s.flush()
    sampler = Sampler(s, 64, {"online": 0.5, "demos": 0.5})
    assert len(sampler.sample_now()["reward"]) == 64 and sampler.last_shares == {"online": 64}
    demo = batch(7, 0, 50)
    demo.arrays["reward"][:] = -1
    s.insert(demo, table="demos")
    s.flush()
    sampler.start()
    b = None
    while b is None:
        b = sampler.get(timeout=1)
    b = sampler.get(timeout=5)  # one assembled after the demos arrived
    assert (b["reward"] == -1).sum() == 32 and sampler.last_shares == {"online": 32, "demos": 32}
    sampler.close()
    with pytest.raises(ValueError, match="unknown tables"):
        Sampler(s, 8, {"offline": 1.0})
    s.close()


def test_damaged_record_mid_table_is_skipped_and_counted(tmp_path, caplog):
    s = opened(tmp_path / "r", refresh_per_s=0)
    s.insert(batch(0, 0, 100))
    s.flush()
    s.close()
    env = lmdb.open(str(tmp_path / "r"), max_dbs=8)
    with env.begin(write=True, db=env.open_db(b"t:online")) as txn:
        txn.put((40).to_bytes(8, "big"), b"garbage")
    env.close()
    with caplog.at_level(logging.WARNING):
        s = opened(tmp_path / "r")  # the tail is fine: nothing discarded at open
        rows = [float(r["reward"]) for _, r in s.rows()]
    assert len(s) == 100 and 40.0 not in rows and len(rows) == 99
    assert s.corrupt_records >= 1 and "skipping damaged record 40" in caplog.text  # (the pager may meet it too)
    s.close()

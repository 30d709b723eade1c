"""The actor's delivery path against real sockets: resend until acked, journal across restarts."""

import time

import numpy as np
import pytest

from robo_async.actor.uplink import Uplink
from robo_async.actor.uplink_config import UplinkConfig
from robo_async.buffer.codec import Column, decode_frames
from robo_async.transport.channels import TransitionReceiver
from robo_async.transport.publisher import WeightPublisher
from robo_async.transport.wire import Frames, LearnerStatus, TransitionBatch
from tests.buffer.test_lmdb_store import batch


class Learnerish:
    """Receiver plus a status publisher whose acks the test controls."""

    def __init__(self):
        self.rx = TransitionReceiver("tcp://127.0.0.1:0")
        self.pub = WeightPublisher("tcp://127.0.0.1:0")
        self.boot, self.acked, self.paused = "a", 0, False
        self.status = None

    def publish(self):
        self.status = LearnerStatus(0, 0, 0, 0, False, self.boot, ((0, self.acked),), paused=self.paused)
        self.pub.publish_status(self.status)

    def collect(self, until, timeout=20.0):
        got, deadline = [], time.monotonic() + timeout
        while time.monotonic() < deadline and not until(got):
            self.publish()
            got += [m for m in self.rx.poll(timeout_ms=10) if isinstance(m, TransitionBatch)]
        return got

    def close(self):
        self.rx.close()
        self.pub.close()


def seqs(msgs):
    return [m.seq for m in msgs]


def test_resends_until_acked_and_after_a_learner_restart(tmp_path):
    L = Learnerish()
    up = Uplink(0, L.rx.address, lambda: L.status, UplinkConfig(journal_dir=None, resend_s=0.3))
    L.publish()
    up.start(0)
    for s in (0, 10, 20):
        up.put(batch(0, s, 10))
    got = L.collect(lambda g: len(g) >= 6)  # nothing acked: everything sent twice
    assert seqs(got)[:6] == [0, 10, 20, 0, 10, 20] and up.resends >= 1
    L.acked = 20
    L.collect(lambda g: up.unacked == 10)
    L.collect(lambda g: False, timeout=0.6)  # drain: a resend of 0 or 10 sent before the ack was taken
    L.boot = "b"  # the learner restarted: what is unacked goes again at once
    got = L.collect(lambda g: 20 in seqs(g))
    assert 0 not in seqs(got) and 10 not in seqs(got)
    L.acked = 30
    L.collect(lambda g: up.unacked == 0)
    assert up.unacked == 0
    up.close(drain_s=0)
    L.close()


def test_while_the_learner_says_its_ingest_is_paused_nothing_is_resent_and_that_is_said_once(tmp_path, caplog):
    """A learner whose disk is nearly full stops reading and acking; its status says so. The uplink
    keeps its rows without resending them every resend_s (each round would only queue the same rows
    again), says so once, and resends as ever once the learner reads again and acks still stall."""
    L = Learnerish()
    L.paused = True
    up = Uplink(0, L.rx.address, lambda: L.status, UplinkConfig(journal_dir=None, resend_s=0.1))
    L.publish()
    up.start(0)
    for s in (0, 10):
        up.put(batch(0, s, 10))
    deadline = time.monotonic() + 2.0  # 20 resend periods: an uplink ignoring the pause resends here
    got = L.collect(lambda g: time.monotonic() > deadline and "paused ingest" in caplog.text, timeout=60)
    assert seqs(got) == [0, 10] and up.resends == 0
    assert caplog.text.count("paused ingest") == 1 and "no ack for" not in caplog.text
    L.paused = False  # it reads again, but acks nothing: the stall is a stall again
    got = L.collect(lambda g: up.resends >= 1 and 0 in seqs(g), timeout=60)
    assert 0 in seqs(got) and "the learner reads again" in caplog.text
    up.close(drain_s=0)
    L.close()


def test_journal_survives_a_restart_and_spills_beyond_the_ram_budget(tmp_path):
    L = Learnerish()
    cfg = UplinkConfig(journal_dir=str(tmp_path / "j"), max_ram_mb=0.01, resend_s=60)
    up = Uplink(0, L.rx.address, lambda: L.status, cfg)
    assert up.open() == 0
    L.publish()
    up.start(0)
    for s in range(0, 200, 20):
        up.put(batch(0, s, 20, images=1, size=16))
    L.collect(lambda g: len(g) >= 10 and up.spilled > 0)
    assert up.spilled > 0  # the oldest batches live only in the journal now
    L.acked = 60
    L.collect(lambda g: up.unacked == 140)
    up.close(drain_s=0)
    up2 = Uplink(0, L.rx.address, lambda: L.status, cfg)
    assert up2.open() == 200 and up2.unacked == 140  # acked batches were deleted from the journal
    L.boot = "c"
    up2.start(60)
    got = L.collect(lambda g: len(g) >= 7)
    assert seqs(got)[:7] == list(range(60, 200, 20))  # read back from disk, in order
    frames = got[0].arrays["obs/cam0"]  # encoded here (QOI), stored by the learner as they come
    assert isinstance(frames, Frames) and frames.blobs[0][:1] == b"Q"
    np.testing.assert_array_equal(
        decode_frames(frames, Column("obs/cam0", "uint8", (16, 16, 3))),
        batch(0, 60, 20, images=1, size=16).arrays["obs/cam0"],
    )
    L.acked = 200
    L.collect(lambda g: up2.unacked == 0)
    up2.close(drain_s=0)
    up3 = Uplink(0, L.rx.address, lambda: L.status, cfg)
    assert up3.open() == 0 and up3.unacked == 0
    up3.close(drain_s=0)
    L.close()


def test_a_damaged_journal_entry_becomes_a_declared_gap_and_the_stream_goes_on(tmp_path):
    """A journal entry damaged on disk (seq 10..19 here) can never be resent: before, the learner
    waited for those seqs forever and took nothing of this actor after them. Now the reopened
    uplink declares the range lost (a StreamGap, in the stream's order, resent until acked); a real
    store passes over it and takes what follows; the damaged entry goes once acked."""
    import lmdb

    from robo_async.buffer.lmdb_store import PersistentReplayStore, StoreConfig
    from robo_async.transport.wire import StreamGap

    L = Learnerish()
    cfg = UplinkConfig(journal_dir=str(tmp_path / "j"), resend_s=60)
    up = Uplink(0, L.rx.address, lambda: L.status, cfg)
    up.open()
    L.publish()
    up.start(0)
    for s in (0, 10, 20):
        up.put(batch(0, s, 10))
    L.collect(lambda g: len(g) >= 3 and up.durable() == 30)
    up.close(drain_s=0)
    env = lmdb.open(str(tmp_path / "j"), max_dbs=2)
    with env.begin(write=True, db=env.open_db(b"batches")) as txn:
        assert txn.replace((10).to_bytes(8, "big"), b"\xc1 damaged") is not None
    env.close()

    up2 = Uplink(0, L.rx.address, lambda: L.status, cfg)
    assert up2.open() == 30 and up2.gaps == 1 and up2.unacked == 30
    L.boot = "b"
    up2.start(0)
    store = PersistentReplayStore(tmp_path / "store", StoreConfig(commit_ms=5)).open()
    got, deadline = [], time.monotonic() + 30
    while time.monotonic() < deadline and store.ack(0) < 30:  # the learner's part, on a real store
        L.publish()
        for m in L.rx.poll(timeout_ms=10):
            got.append(m)
            if isinstance(m, TransitionBatch):
                store.insert(m)
            elif isinstance(m, StreamGap):
                store.refuse(m.actor_id, m.seq, m.count, m.reason)
        store.flush()
        L.acked = store.ack(0)
    assert [(type(m).__name__, m.seq) for m in got[:3]] == [
        ("TransitionBatch", 0),
        ("StreamGap", 10),
        ("TransitionBatch", 20),
    ]
    assert got[1].count == 10 and "damaged" in got[1].reason
    assert store.ack(0) == 30 and len(store) == 20 and store.rows_refused == 10
    store.close()
    L.collect(lambda g: up2.unacked == 0)
    assert up2.unacked == 0
    up2.close(drain_s=0)
    up3 = Uplink(0, L.rx.address, lambda: L.status, cfg)
    assert up3.open() == 0 and up3.gaps == 0  # the damaged entry was deleted with the ack
    up3.close(drain_s=0)
    L.close()


def test_put_sends_in_order_itself_or_through_the_thread_when_it_is_busy(tmp_path):
    """The control loop's put() sends the newest batch itself when nothing older waits; while the
    uplink thread holds the lock (busy), puts queue and the thread sends them, in seq order."""
    L = Learnerish()
    cfg = UplinkConfig(journal_dir=str(tmp_path / "j"), resend_s=60)
    up = Uplink(0, L.rx.address, lambda: L.status, cfg)
    up.open()
    L.publish()
    up.start(0)
    s, deadline = 0, time.monotonic() + 20
    while up.direct_sends == 0 and time.monotonic() < deadline:
        # the thread may hold the lock at this instant (then the batch queues for it): try again
        up.put(batch(0, s, 10))
        s += 10
        time.sleep(0.005)
    assert up.direct_sends == 1  # sent by put(), on the caller's thread
    up._step = lambda sock: False  # the thread takes the lock but leaves the queue alone
    with up._lock:  # the thread is at work: puts must not send, nor block
        queued = len(up._inbox)
        for _ in range(3):
            up.put(batch(0, s, 10))
            s += 10
        assert up.direct_sends == 1 and len(up._inbox) == queued + 3
    up.put(batch(0, s, 10))  # the lock is free but older batches wait: this one queues behind them
    s += 10
    assert up.direct_sends == 1 and len(up._inbox) == queued + 4
    del up._step  # the thread works again and sends the queue
    up._wake.set()
    got = L.collect(lambda g: len(g) >= s // 10)
    assert seqs(got) == list(range(0, s, 10))  # order kept across both paths; nothing twice
    L.acked = s
    L.collect(lambda g: up.unacked == 0)
    assert up.unacked == 0
    up.close(drain_s=0)
    L.close()


def test_episode_summaries_and_heartbeats_go_by_the_thread_and_close_waits_for_them(tmp_path):
    """put() queues episode summaries and heartbeats for the uplink thread (the control loop pays
    no send for them); close() waits until they are out, so the last episode's summary arrives."""
    from robo_async.transport.wire import EpisodeStats, Heartbeat

    L = Learnerish()
    up = Uplink(0, L.rx.address, lambda: L.status, UplinkConfig(journal_dir=None))
    L.publish()
    up.start(0)
    sent = [EpisodeStats(0, k, float(k), 50, k % 2 == 0, 3, False) for k in range(3)] + [Heartbeat(0, 150, 3)]
    with up._lock:  # the thread cannot run: what put() did, it did on this thread
        for m in sent:
            up.put(m)
        assert len(up._other_in) == 4 and not up._other
    up.close(drain_s=10)  # returns once the thread has sent them
    got, deadline = [], time.monotonic() + 10
    while len(got) < 4 and time.monotonic() < deadline:
        got += L.rx.poll(timeout_ms=50)
    assert got == sent
    L.close()


def test_numpy_scalars_in_summaries_are_sent_and_a_dead_uplink_thread_is_raised(tmp_path):
    """pick_lift reports success as numpy.bool_: it must reach the learner. A thread that dies
    for any reason must stop the control loop's next put(), not go silent."""
    import zmq

    from robo_async.actor.uplink import Uplink, UplinkError
    from robo_async.actor.uplink_config import UplinkConfig
    from robo_async.transport.wire import ActorStats, EpisodeStats, Heartbeat, decode

    ctx = zmq.Context.instance()
    pull = ctx.socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    up = Uplink(0, f"tcp://127.0.0.1:{port}", lambda: None, UplinkConfig(journal_dir=None))
    up.start()
    try:
        up.put(EpisodeStats(0, 3, np.float32(-1.5), np.int64(100), np.bool_(True), np.int64(7), np.bool_(False)))
        up.put(Heartbeat(0, 10, 1, ActorStats(clipped=np.int64(2), operator=np.bool_(True))))
        assert pull.poll(60_000)
        got = decode(pull.recv_multipart())
        assert got == EpisodeStats(0, 3, -1.5, 100, True, 7, False) and type(got.success) is bool
        assert pull.poll(60_000)
        assert decode(pull.recv_multipart()).stats.figures() == {"clipped": 2, "operator": True}

        def boom(*_):
            raise RuntimeError("disk on fire")

        up._step = boom  # the thread's next round fails
        deadline = time.monotonic() + 60
        while up.error is None and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(UplinkError, match="disk on fire"):
            up.put(EpisodeStats(0, 4, 0.0, 1, False, 7))
    finally:
        up.close(drain_s=0.1)
        pull.close(0)


def test_streams_sharing_one_thread_each_deliver_and_close_on_their_own_and_die_together(tmp_path):
    """A vectorized actor's streams share one uplink thread: each is delivered and resent in its
    own order, closing one leaves the others running, the thread ends with the last, and a thread
    that dies stops every stream's next put()."""
    import threading

    from robo_async.actor.uplink import UplinkError, UplinkThread

    L = Learnerish()
    shared = UplinkThread("uplink-test")
    ups = [Uplink(a, L.rx.address, lambda: L.status, UplinkConfig(journal_dir=None, resend_s=0.3)) for a in (0, 1024)]

    def drivers():  # this test's uplink threads (another test's may still be ending in this process)
        return [t for t in threading.enumerate() if t.name in ("uplink-test", "uplink-0", "uplink-1024", "uplink-2048")]

    try:
        L.publish()
        for u in ups:
            u.start(0, thread=shared)
        assert [t.name for t in drivers()] == ["uplink-test"]  # one thread for both
        for s in (0, 10):
            for a, u in zip((0, 1024), ups, strict=False):
                u.put(batch(a, s, 10))
        # nothing acked: resent (the two streams' sockets reach the receiver in no set order)
        got = L.collect(lambda g: all(sum(m.actor_id == a for m in g) >= 4 for a in (0, 1024)))
        for a in (0, 1024):
            assert [m.seq for m in got if m.actor_id == a][:4] == [0, 10, 0, 10], a
        ups[0].close(drain_s=0.0)
        assert shared._thread is not None and shared._thread.is_alive()  # still driving stream 1024
        ups[1].put(batch(1024, 20, 10))
        assert 20 in [
            m.seq for m in L.collect(lambda g: 20 in [m.seq for m in g if m.actor_id == 1024]) if m.actor_id == 1024
        ]

        def boom(*_):
            raise RuntimeError("disk on fire")

        late = Uplink(2048, L.rx.address, lambda: L.status, UplinkConfig(journal_dir=None))
        late.start(0, thread=shared)
        ups.append(late)
        late._step = boom  # one stream's round fails: the shared thread dies
        deadline = time.monotonic() + 60
        while ups[1].error is None and time.monotonic() < deadline:
            time.sleep(0.01)
        for a, u in zip((1024, 2048), ups[1:], strict=False):
            with pytest.raises(UplinkError, match="disk on fire"):
                u.put(batch(a, 30, 10))
        assert shared._thread is None
    finally:
        for u in ups:
            u.close(drain_s=0.0)
        L.close()
    assert not drivers()  # the thread ended (it died with the failing stream)

"""`bench chaos`'s judgement of a run (robo_async/bench/judge.py): which ack gaps count against a
healthy actor, which process deaths are crashes, counters summed over learner restarts; and its
hostile peer's named cases (robo_async/bench/hostile.py) refused by the checks that name them."""

from __future__ import annotations

import numpy as np

from robo_async.bench.hostile import KILLER
from robo_async.bench.judge import Hit, ack_stalls, crashes, total
from robo_async.bench.mutate import valid
from robo_async.transport.wire import TransitionBatch, WireError, decode, encode


def test_an_ack_gap_counts_unless_chaos_aimed_at_that_actor_or_the_learner_overlaps_it():
    acks = {0: [0.0, 1.0, 2.0, 9.0, 10.0], 1: [0.0, 1.0, 2.0, 9.0, 10.0]}
    stop1 = Hit(t=3.0, action="stop actor", actor=1, pids=(11,), end=8.0, done=True)
    assert ack_stalls(acks, [stop1], end=20.0) == {0: 7.0, 1: 1.0}  # actor 0's 7 s wait is not actor 1's fault
    learner = Hit(t=2.5, action="kill learner", actor=None, pids=(10,), end=8.5, done=True)
    assert ack_stalls(acks, [stop1, learner], end=20.0) == {0: 1.0, 1: 1.0}
    undone = Hit(t=3.0, action="drop link", actor=0, pids=(12,), end=8.0, done=False)
    assert ack_stalls(acks, [undone], end=20.0)[0] == 7.0  # a hit that did not happen explains nothing
    later = Hit(t=9.5, action="kill actor", actor=0, pids=(12,), end=9.8, done=True)
    assert ack_stalls(acks, [later], end=20.0)[0] == 7.0  # nor one after the gap


def test_deaths_our_chaos_explains_are_not_crashes_anything_else_is():
    hits = [Hit(1.0, "kill learner", None, (100,), 5.0, True), Hit(6.0, "stop actor", 0, (200, 201), 26.0, True)]
    events = [
        {"event": "failed", "who": "learner", "pid": 100, "why": "exit code -9 (SIGKILL)"},
        {"event": "failed", "who": "actor 0", "pid": 200, "why": "hung: no heartbeat for 31 s"},
        {"event": "ready", "who": "learner", "pid": 101},
        {"event": "failed", "who": "learner", "pid": 101, "why": "ValueError: array is too big"},
        {"event": "failed", "who": "actor 1", "pid": 300, "why": "hung: no heartbeat for 31 s"},
        {"event": "failed", "who": "actor 0", "pid": 200, "why": "exit code 1"},
    ]
    found = [(c["who"], c["pid"]) for c in crashes(events, hits)]
    assert found == [("learner", 101), ("actor 1", 300), ("actor 0", 200)]


def test_counters_are_summed_over_learner_lives():
    rows = [{"m": 0}, {"m": 5}, {"x": 1}, {"m": 9}, {"m": 2}, {"m": 4}, {"m": 0}, {"m": 3}]
    assert total(rows, "m") == 9 + 4 + 3


def test_the_hostile_peers_named_cases_are_refused_by_the_checks_that_name_them():
    try:
        decode(KILLER)
        raise AssertionError("the 88-byte message was taken")
    except WireError as e:
        assert "bad shape" in str(e) and "elements" in str(e)
    assert len(b"".join(KILLER)) == 88
    b = valid("transitions", np.random.default_rng(0))
    arrays = dict(b.arrays)
    arrays["reward"] = np.array(arrays["reward"], np.float32)
    arrays["reward"][0] = np.nan
    try:
        decode([bytes(f) for f in encode(TransitionBatch(900, 7, arrays))])
        raise AssertionError("a NaN batch was taken")
    except WireError as e:  # refused with its stream named: the learner passes over exactly that range
        assert e.stream == (900, 7, b.count) and "NaN" in str(e)


def test_the_victims_wait_is_its_longest_ack_gap_during_the_hit(tmp_path):
    from robo_async.bench.judge import plot, victim_wait

    acks = {0: [0.0, 1.0, 2.0, 14.0, 15.0]}
    drop = Hit(t=3.0, action="drop link", actor=0, pids=(12,), end=13.0, done=True)
    assert victim_wait(acks, drop) == 12.0
    # an ack of rows sent just before the hit ends the gap that holds it: the long wait comes after
    early = {0: [0.0, 1.0, 3.5, 14.0, 15.0]}
    assert victim_wait(early, drop) == 10.5
    assert victim_wait(acks, Hit(t=20.0, action="stop actor", actor=0)) is None  # no ack after it yet
    assert victim_wait(acks, Hit(t=3.0, action="kill learner", actor=None)) is None
    plot(tmp_path / "chaos.png", acks, [drop], t0=0.0)
    assert (tmp_path / "chaos.png").read_bytes()[:4] == b"\x89PNG"

"""The fleet: one lease authority per Ray cluster, jobs served first come first served."""

from robo_async.launch.fleet import LeaseAuthority


def test_jobs_wait_in_line_in_arrival_order_and_leases_are_all_or_nothing():
    a = LeaseAuthority()
    assert a.acquire(["robot:x"], "A")["granted"]
    got = a.acquire(["robot:x"], "B")
    assert not got["granted"] and got["blocked"] == {"robot:x": ("A", 1)}
    assert a.acquire(["robot:x"], "C")["blocked"] == {"robot:x": ("A", 2)}
    assert a.table()["robot:x"] == {"holder": "A", "since": a.holders["robot:x"]["since"], "waiting": ["B", "C"]}
    a.release(["robot:x"], "A")
    assert not a.acquire(["robot:x"], "C")["granted"]  # C asks first, but B came first
    assert a.acquire(["robot:x"], "B")["granted"]
    # all or nothing: D wants y and x; x is held by B, so D holds neither
    got = a.acquire(["robot:y", "robot:x"], "D")
    assert not got["granted"] and "robot:y" not in a.holders
    assert a.acquire(["robot:y"], "E")["granted"] is False  # D is first in y's line
    # a holder that stops renewing (its machine died) loses the lease after ttl; so does a silent waiter
    a.holders["robot:x"]["seen"] -= 100
    for w in a.queues["robot:x"]:
        if w["job"] == "C":
            w["seen"] -= 100
    assert a.renew(["robot:x"], "B") == []  # (renewing refreshes: B keeps it)
    a.holders["robot:x"]["seen"] -= 100
    assert a.acquire(["robot:x", "robot:y"], "D", ttl_s=30)["granted"]  # B expired, C left the line
    assert a.renew(["robot:x"], "B") == ["robot:x"]

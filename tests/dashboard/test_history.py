"""The dashboard's curves: one point per new report, bounded for days-long runs (half the
resolution, the whole span), losses and rates picked by name."""

import pytest

from robo_async.dashboard.server import Dashboard, History


def report(t, **kv):
    return {
        "time/elapsed_s": t,
        "time/env_steps_per_s_10s": 10.0 * t,
        "losses/qf_loss": 1.0 / (1 + t),
        "charts/success_rate": float("nan") if t == 3 else 0.5,
        "buffer/online": 7,
        **kv,
    }


def test_points_come_from_new_reports_with_the_curves_by_name():
    h = History(max_points=8)
    for t in (1, 2, 2, 3):  # the repeated report (same clock) adds nothing
        h.add(report(t))
    h.add({"charts/success_rate": 1.0})  # no clock: not a point
    pts = h.points()
    assert [p["t"] for p in pts] == [1, 2, 3]
    assert pts[0] == {"t": 1, "success": 0.5, "env_steps_per_s": 10.0, "losses/qf_loss": 0.5}
    assert pts[2]["success"] is None  # NaN is sent as null (JSON)
    with pytest.raises(ValueError, match="max_points"):
        History(max_points=2)


def test_takeovers_and_labels_are_curves_too():
    h = History()
    h.add(report(1.0, **{"hil/takeovers": 2, "hil/label_success": 1}))
    assert h.points()[0]["takeovers"] == 2 and h.points()[0]["label_success"] == 1


def test_a_long_run_keeps_its_whole_span_in_bounded_memory():
    h = History(max_points=10)
    for t in range(1, 10_001):
        h.add(report(float(t)))
    pts = h.points()
    assert len(pts) <= 10 and pts[0]["t"] == 1.0 and pts[-1]["t"] > 9_000  # the start and near the end
    ts = [p["t"] for p in pts]
    assert ts == sorted(ts)


def test_the_dashboard_feeds_its_history_from_progress_updates():
    d = Dashboard(max_points=16)
    d.update(progress=report(1.0))
    d.update(actors={})  # other parts add no point
    d.update(progress=report(2.0))
    assert [p["t"] for p in d.history.points()] == [1.0, 2.0]

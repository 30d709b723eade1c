"""Async chunk inference: forwarding, a loop that never waits, RTC prefixes, bad policies, hot swap."""

import threading
import time
from collections import deque

import numpy as np
import pytest
import torch

from policies.base import ActionChunk, Policy
from policies.flow import FlowChunkPolicy
from robo_async.actor.inference import AsyncChunkRunner, InferenceEngine, forward_state
from robo_async.actor.latency import LatencyTracker
from robo_async.actor.schedule import ChunkSchedule
from sim import ReachTask

SPEC = ReachTask().spec()
A = SPEC.action_dim


class Scripted(Policy):
    """Chunks whose values encode the forwarded state and prefix; `gate` holds an inference
    until the test releases it (a slow policy without timing)."""

    architecture = "scripted"

    def __init__(self, horizon=8, output=None, gates=()):
        self.horizon, self.output = horizon, output
        self.gate = threading.Event()
        self.gate.set()
        self.gates = list(gates)  # per call: call i waits for gates[i] (if given)
        self.calls = []
        self.seen = []  # obs["state"][0] of each call

    def predict_chunk(self, obs, *, forwarded_state=None, prefix=None):
        i = len(self.calls)
        self.calls.append(
            (None if forwarded_state is None else forwarded_state.copy(), None if prefix is None else np.array(prefix))
        )
        self.seen.append(float(obs["state"][0]))
        self.gate.wait()
        if i < len(self.gates):
            self.gates[i].wait()
        if self.output is not None:
            return ActionChunk(self.output, 1 / 30, self.version)
        acts = np.tile(np.arange(self.horizon, dtype=np.float32)[:, None] * 0.01, (1, A))
        if prefix is not None and len(prefix):
            acts[: len(prefix)] = prefix
        return ActionChunk(acts, 1 / 30, self.version)

    def module(self):
        return torch.nn.Linear(1, 1)


def obs(state=None):
    return {"state": np.zeros(A, np.float32) if state is None else state}


def wait_idle(engine):
    deadline = time.monotonic() + 60
    while engine.busy and time.monotonic() < deadline:
        time.sleep(0.001)
    assert not engine.busy, "inference still running after 60 s"


def test_forwarded_state_is_the_last_committed_target():
    committed = np.array([[0.1] * A, [0.2] * A, [0.3] * A], np.float32)
    np.testing.assert_array_equal(forward_state(np.zeros(A), committed, SPEC), committed[-1])
    np.testing.assert_array_equal(forward_state(np.ones(A), committed[:0], SPEC), np.ones(A))


def test_the_loop_keeps_ticking_while_a_slow_policy_thinks():
    policy = Scripted()
    engine = InferenceEngine(policy, A, 8, timeout_s=60)
    runner = AsyncChunkRunner(engine, SPEC, mode="rtc")
    policy.gate.clear()  # the first inference will not finish until released
    ticks_while_busy = 0
    for t in range(20):
        a = runner.tick(t, obs())
        assert a.shape == (A,)
        ticks_while_busy += engine.busy
    assert ticks_while_busy == 20 and runner.holds == 20  # every tick got an action, none waited
    policy.gate.set()
    wait_idle(engine)
    runner.tick(20, obs())
    assert runner.holds == 21 and len(runner.versions) == 1  # the late chunk's ticks were stale
    engine.close()


class FixedLatency(LatencyTracker):
    def __init__(self, ticks):
        super().__init__(initial_s=ticks / 30)

    def add(self, seconds):
        pass  # as if every inference took `ticks` ticks


def test_rtc_keeps_the_committed_prefix_and_forwards_the_state():
    policy = Scripted(horizon=8)
    engine = InferenceEngine(policy, A, 8)
    engine.latency = FixedLatency(3)
    runner = AsyncChunkRunner(engine, SPEC, mode="rtc")
    first = None
    for t in range(5):
        runner.tick(t, obs())
        wait_idle(engine)
        if t == 0:
            first = np.tile(np.arange(8, dtype=np.float32)[:, None] * 0.01, (1, A))
    # at tick 4 four actions were left (<= 3 ticks of latency + 1 margin): the next inference was
    # asked to keep ticks 4..6 fixed and about the state after them
    fstate, prefix = policy.calls[-1]
    np.testing.assert_array_equal(prefix, first[4:7])
    np.testing.assert_array_equal(fstate, first[6])
    for t, want in ((5, first[5]), (6, first[6])):  # the committed prefix runs exactly as planned
        np.testing.assert_array_equal(runner.tick(t, obs()), want)
    np.testing.assert_array_equal(runner.tick(7, obs()), np.full(A, 0.03, np.float32))  # new chunk, index 3
    engine.close()


def test_schedule_merge_modes():
    s = ChunkSchedule("drop_stale")
    s.merge(np.ones((4, A)), start_tick=0, now=0)
    s.merge(np.full((4, A), 2.0), start_tick=1, now=2)  # tick 1 is already past
    assert s.stale_dropped == 1 and s.pop(2)[0] == 2.0
    b = ChunkSchedule("blend")
    b.merge(np.ones((4, A)), 0, 0)
    b.merge(np.full((4, A), 3.0), 2, 0)
    assert b.pop(2)[0] == 2.0 and b.pop(5)[0] == 3.0
    with pytest.raises(ValueError, match="unknown chunk merge mode"):
        ChunkSchedule("nope")


@pytest.mark.parametrize("bad", [np.full((8, A), np.nan, np.float32), np.zeros((8, A + 1), np.float32)])
def test_a_bad_chunk_is_dropped_and_the_loop_holds(bad):
    engine = InferenceEngine(Scripted(output=bad), A, 8)
    runner = AsyncChunkRunner(engine, SPEC, mode="drop_stale")
    start = np.full(A, 0.3, np.float32)
    for t in range(5):
        a = runner.tick(t, obs(start))
        wait_idle(engine)
        np.testing.assert_array_equal(a, start)  # holding
    assert engine.bad_chunks >= 2
    engine.close()


def test_a_hung_inference_is_reported_and_the_loop_goes_on():
    policy = Scripted()
    policy.gate.clear()
    engine = InferenceEngine(policy, A, 8, timeout_s=0.01)
    runner = AsyncChunkRunner(engine, SPEC, mode="rtc")
    runner.tick(0, obs())
    deadline = time.monotonic() + 10
    while engine.hung_reports == 0 and time.monotonic() < deadline:
        runner.tick(1, obs())
    assert engine.hung_reports == 1 and runner.holds >= 2
    policy.gate.set()
    engine.close()


def test_hot_swap_changes_the_version_between_chunks_without_a_missed_tick():
    policy = FlowChunkPolicy(("state",), (A,), SPEC.joint_low, SPEC.joint_high, horizon=4, steps=2, hidden=(16,))
    engine = InferenceEngine(policy, A, 4)
    runner = AsyncChunkRunner(engine, SPEC, mode="rtc")
    other = FlowChunkPolicy(("state",), (A,), SPEC.joint_low, SPEC.joint_high, horizon=4, steps=2, hidden=(16,), seed=1)
    for t in range(40):
        if t == 10:
            engine.swap_weights(7, other.weights())
        assert runner.tick(t, obs()).shape == (A,)
        wait_idle(engine)
    assert runner.versions[0] == -1 and runner.versions[-1] == 7
    engine.swap_weights(8, {"nope": np.zeros(1)})  # another architecture: refused, v7 kept
    runner.tick(40, obs())
    deadline = time.monotonic() + 10
    while engine.rejected_weights == 0 and time.monotonic() < deadline:  # the refusal, seen
        runner.tick(41, obs())
        time.sleep(0.001)
    assert engine.rejected_weights == 1 and policy.version == 7
    engine.close()


@pytest.mark.e2e
def test_flow_policy_rtc_prefix_is_exact_and_bc_learns():
    torch.manual_seed(0)
    p = FlowChunkPolicy(("state",), (A,), SPEC.joint_low, SPEC.joint_high, horizon=6, steps=4, hidden=(64, 64))
    prefix = np.tile(np.linspace(-0.5, 0.5, A, dtype=np.float32), (2, 1))
    chunk = p.predict_chunk(obs(), prefix=prefix)
    np.testing.assert_array_equal(chunk.actions[:2], prefix)
    assert chunk.actions.shape == (6, A)
    rng = np.random.default_rng(0)
    states = rng.uniform(-1, 1, (512, A)).astype(np.float32)
    targets = np.clip(states[:, None, :] * 0.5 + np.linspace(0, 0.3, 6)[None, :, None], SPEC.low, SPEC.high)
    cond = torch.as_tensor(p.condition({"state": states}))
    x1 = torch.as_tensor(p.normalize(targets.astype(np.float32)))
    opt = torch.optim.Adam(p.net.parameters(), lr=1e-3)
    losses = []
    for _ in range(300):
        idx = torch.as_tensor(rng.integers(0, 512, 64))
        loss = p.bc_loss(cond[idx], x1[idx], torch.as_tensor(rng.integers(0, 3, 64)))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert np.mean(losses[-30:]) < 0.5 * np.mean(losses[:30])


def test_a_short_schedule_is_padded_with_the_hold_so_the_chunk_is_about_its_landing_tick():
    """Latency 3 ticks, nothing committed yet: the robot will hold its last target until the chunk
    lands, so RTC gets that hold as a 3-action prefix and forwarding is about tick now + 3."""
    for mode, forward in (("rtc", True), ("drop_stale", True)):
        policy = Scripted(horizon=8)
        engine = InferenceEngine(policy, A, 8)
        engine.latency = FixedLatency(3)
        runner = AsyncChunkRunner(engine, SPEC, mode=mode, forward=forward)
        here = np.full(A, 0.2, np.float32)
        runner.tick(0, obs(here))  # nothing scheduled: holds `here` and asks for a chunk
        wait_idle(engine)
        fstate, prefix = policy.calls[0]
        np.testing.assert_array_equal(fstate, here)
        if mode == "rtc":
            np.testing.assert_array_equal(prefix, np.tile(here, (3, 1)))
        else:
            assert prefix is None
        runner.tick(1, obs(here))
        runner.tick(2, obs(here))
        a3 = runner.tick(3, obs(here))  # the chunk's first action is for tick 3, none went stale
        want = np.full(A, 0.03, np.float32) if mode == "rtc" else np.zeros(A, np.float32)
        np.testing.assert_array_equal(a3, want)
        if mode != "rtc":  # (rtc re-emits the prefix; its ticks already run are dropped on arrival)
            assert runner.schedule.stale_dropped == 0
        engine.close()


def test_continuous_replanning_asks_whenever_the_engine_is_idle():
    due, cont = Scripted(horizon=8), Scripted(horizon=8)
    for policy, replan in ((due, "due"), (cont, "continuous")):
        engine = InferenceEngine(policy, A, 8)
        engine.latency = FixedLatency(1)
        runner = AsyncChunkRunner(engine, SPEC, mode="drop_stale", forward=True, replan=replan)
        for t in range(16):
            runner.tick(t, obs())
            wait_idle(engine)
        engine.close()
    assert len(cont.calls) == 16 and len(due.calls) < 6
    with pytest.raises(ValueError, match="replan"):
        AsyncChunkRunner(InferenceEngine(Scripted(), A, 8), SPEC, replan="sometimes")


def test_flow_policy_delta_mode_and_image_inputs():
    p = FlowChunkPolicy(
        ("state",),
        (A,),
        SPEC.joint_low,
        SPEC.joint_high,
        horizon=4,
        steps=2,
        hidden=(32,),
        action_mode="delta",
        delta_range=0.5,
        cameras=("front",),
        image_size=32,
    )
    ref = np.full(A, 0.1, np.float32)
    acts = np.tile(ref + 0.2, (4, 1))
    np.testing.assert_allclose(p.denormalize(p.normalize(acts, ref), ref), acts, atol=1e-6)
    o = {"state": ref, "front": np.zeros((48, 48, 3), np.uint8)}  # resized to 32 inside
    p.deterministic = True
    a = p.predict_chunk(o).actions
    assert a.shape == (4, A) and np.all(np.abs(a - ref) <= 0.5 + 1e-6)  # within delta_range of the state
    b = p.predict_chunk({**o, "front": np.full((48, 48, 3), 255, np.uint8)}).actions
    assert not np.allclose(a, b)  # the image is an input
    assert not np.allclose(a, p.predict_chunk(o, delay_ticks=5).actions)  # so is the delay
    assert "1cam32" in p.architecture
    with pytest.raises(KeyError, match="front"):
        p.predict_chunk({"state": ref})
    with pytest.raises(ValueError, match="action_mode"):
        FlowChunkPolicy(("state",), (A,), SPEC.joint_low, SPEC.joint_high, action_mode="relative")


@pytest.mark.e2e
def test_bc_with_camera_frames_lowers_the_loss():
    from robo_async.learner.algorithms.bc.config import BCConfig
    from robo_async.learner.algorithms.bc.offline import clone

    rng = np.random.default_rng(0)
    eps = []
    for _ in range(4):  # the action depends on the image's brightness only
        level = rng.uniform(0, 1, 30).astype(np.float32)
        frames = (level[:, None, None, None] * 255 * np.ones((30, 16, 16, 3))).astype(np.uint8)
        acts = np.tile((level[:, None] - 0.5), (1, A)).astype(np.float32)
        eps.append({"obs/state": np.zeros((30, A), np.float32), "obs/front": frames, "action": acts})
    p = FlowChunkPolicy(
        ("state",),
        (A,),
        SPEC.joint_low,
        SPEC.joint_high,
        horizon=2,
        steps=2,
        hidden=(64,),
        cameras=("front",),
        image_size=16,
    )
    losses = clone(p, eps, 300, BCConfig(batch_size=32, max_delay=0))
    assert np.mean(losses[-20:]) < np.mean(losses[:20])
    p.deterministic = True  # the chunk follows the frame: dark -> about -0.4, bright -> about +0.4

    def act(level):
        frame = np.full((16, 16, 3), int(level * 255), np.uint8)
        return p.predict_chunk({"state": np.zeros(A, np.float32), "front": frame}).actions[0]

    dark, bright = act(0.1), act(0.9)
    assert np.all(bright - dark > 0.3), (dark, bright)


def test_pipelined_workers_stagger_requests_and_drop_overtaken_chunks():
    first, second = threading.Event(), threading.Event()
    policy = Scripted(horizon=8, gates=(first, second))
    engine = InferenceEngine(policy, A, 8, workers=2)
    engine.latency = FixedLatency(4)
    runner = AsyncChunkRunner(engine, SPEC, mode="drop_stale", forward=True, replan="continuous")
    for t in range(4):  # both inferences are held: the loop keeps ticking on holds
        runner.tick(t, obs(np.full(A, t, np.float32)))
        time.sleep(0.02)
    deadline = time.monotonic() + 30  # both workers have taken their request (however slow their threads start)
    while len(policy.seen) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert sorted(policy.seen) == [0.0, 2.0]  # the second request waited half the latency, not a whole one
    second.set()  # the newer observation's chunk lands first ...
    deadline = time.monotonic() + 10
    while engine.in_flight == 2 and time.monotonic() < deadline:
        time.sleep(0.001)
    runner.tick(4, obs(np.full(A, 4, np.float32)))
    first.set()  # ... so the older one, landing later, is dropped
    while engine.in_flight and time.monotonic() < deadline:
        time.sleep(0.001)
    runner.tick(5, obs(np.full(A, 5, np.float32)))
    runner.tick(6, obs(np.full(A, 6, np.float32)))  # the obs-2 chunk is about tick 2 + 4
    assert runner.superseded == 1 and runner.schedule.popped_obs_tick == 2
    engine.close()
    with pytest.raises(ValueError, match="workers"):
        InferenceEngine(Scripted(), A, 8, workers=0)


def test_forward_model_comes_from_the_robot_spec():
    import dataclasses

    vel = dataclasses.replace(SPEC, control_mode="joint_velocity")
    committed = np.full((3, A), 0.5, np.float32)
    np.testing.assert_allclose(forward_state(np.zeros(A), committed, vel), np.full(A, 1.5 * SPEC.dt), rtol=1e-6)

    class LaggingArm(type(SPEC)):  # a robot with its own forward model
        def forward_state(self, state, committed):
            return np.asarray(state, np.float32) + 0.5 * (committed[-1] - state) if len(committed) else state

    lag = LaggingArm(**{f.name: getattr(SPEC, f.name) for f in dataclasses.fields(SPEC)})
    np.testing.assert_allclose(forward_state(np.zeros(A), committed, lag), np.full(A, 0.25))


def test_warmup_seeds_the_latency_so_the_first_chunk_is_about_its_landing_tick():
    policy = Scripted(horizon=8)
    engine = InferenceEngine(policy, A, 8)
    engine.warmup(obs(), calls=2)
    assert len(policy.calls) == 2 and len(engine.latency._samples) == 1  # only the second call counts
    engine.close()
    broken = InferenceEngine(Scripted(output=np.zeros((8, A))), A, 8)
    broken.policy.predict_chunk = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("no GPU"))
    broken.warmup(obs())  # reported, not raised: the loop's own checks handle it per chunk
    assert len(broken.latency._samples) == 0
    broken.close()


def test_the_policy_is_told_how_stale_its_observation_will_be():
    class Aware(Scripted):
        def predict_chunk(self, obs, *, forwarded_state=None, prefix=None, delay_ticks=0):
            self.delays = getattr(self, "delays", []) + [delay_ticks]
            return super().predict_chunk(obs, forwarded_state=forwarded_state, prefix=prefix)

    for mode, forward, want in (("drop_stale", True, 3), ("drop_stale", False, 0), ("rtc", True, 3)):
        policy = Aware(horizon=8)
        engine = InferenceEngine(policy, A, 8)
        engine.latency = FixedLatency(3)
        runner = AsyncChunkRunner(engine, SPEC, mode=mode, forward=forward)
        runner.tick(0, obs())
        wait_idle(engine)
        engine.close()
        assert policy.delays == [want], (mode, forward)
    # a policy written without delay_ticks keeps working (Scripted has no such parameter)
    engine = InferenceEngine(Scripted(), A, 8)
    engine.latency = FixedLatency(3)
    runner = AsyncChunkRunner(engine, SPEC, mode="drop_stale")
    runner.tick(0, obs())
    wait_idle(engine)
    assert engine.bad_chunks == 0 and len(engine.poll().chunk.actions) == 8
    engine.close()


@pytest.mark.parametrize("replan, executed", [("end", 8), ("due", 7)])
def test_replan_end_executes_every_action_of_every_chunk(replan, executed):
    """`replan=end` asks at the same moment as `due`, but about the tick where the current chunk
    ends (forwarded through all of it), so no action of a chunk is replaced; `due` replaces the
    last one (latency 2 ticks + margin 1 -> asked with 3 left, about 2 ticks ahead)."""
    policy = Scripted(horizon=8)
    engine = InferenceEngine(policy, A, 8)
    engine.latency = FixedLatency(2)
    runner = AsyncChunkRunner(engine, SPEC, mode="drop_stale", forward=True, replan=replan)
    chunk = np.tile(np.arange(8, dtype=np.float32)[:, None] * 0.01, (1, A))
    got = []
    for t in range(40):
        got.append(runner.tick(t, obs(np.full(A, 0.5, np.float32)))[0])
        wait_idle(engine)
    got = np.round(np.array(got) * 100).astype(int)
    got = got[got != 50]  # the holds (at the state) before the first chunk
    # each chunk's indices run 0..executed-1, then the next chunk starts at 0
    starts = np.nonzero(got == 0)[0]
    assert len(starts) >= 4 and set(np.diff(starts[1:]).tolist()) == {executed}
    if replan == "end":
        fstate = policy.calls[-1][0]
        np.testing.assert_array_equal(fstate, chunk[-1])  # forwarded through the whole current chunk
    engine.close()


def test_latency_is_measured_in_ticks_from_request_to_merge():
    """The clock says inferences take no time; chunks land 5 ticks after they were asked for
    (a remote server behind a network): the runner plans with 5, what the loop saw."""
    gates = [threading.Event() for _ in range(6)]
    policy = Scripted(horizon=10, gates=gates)  # (5 ticks of latency leave 5 new actions: rtc holds)
    engine = InferenceEngine(policy, A, 10)
    engine.latency = FixedLatency(0)
    runner = AsyncChunkRunner(engine, SPEC, mode="rtc")
    assert runner.latency_ticks() == 0
    t = 0
    for i in range(4):
        while not engine.in_flight:  # tick until the runner asks (it may have, on the merging tick)
            runner.tick(t, obs())
            t += 1
        for _ in range(4):
            runner.tick(t, obs())
            t += 1
        gates[i].set()
        wait_idle(engine)
        merged = runner.chunks_merged
        runner.tick(t, obs())  # lands here: 5 ticks after the request (asked on the tick before the 4)
        t += 1
        assert runner.chunks_merged == merged + 1
    assert runner.latency_ticks() == 5, list(runner.tick_latency._samples)
    while not engine.in_flight:
        runner.tick(t, obs())
        t += 1
    gates[4].set()
    wait_idle(engine)
    assert len(policy.calls[-1][1]) == 5  # the committed prefix covers the 5 ticks
    for g in gates:
        g.set()
    engine.close()


def test_rtc_with_a_latency_over_half_the_chunk_asks_about_the_forwarded_state():
    """A prefix of d actions leaves H - d new ones per d ticks of waiting; with fewer than d
    (latency over half the chunk: RTC's bound d <= H - d) the robot would hold between chunks,
    so the rtc runner asks about the tick after the committed actions, as async_forward does."""
    from robo_async.actor.latency import TickLatency

    policy = Scripted(horizon=4)
    engine = InferenceEngine(policy, A, 4)
    engine.latency = FixedLatency(5)
    runner = AsyncChunkRunner(engine, SPEC, mode="rtc")
    runner.tick_latency = TickLatency(min_samples=10**6)  # plan with the engine's (fixed) latency
    runner.tick(0, obs())
    wait_idle(engine)
    fstate, prefix = policy.calls[-1]
    assert prefix is None and fstate is not None
    engine.latency = FixedLatency(3)  # shorter than the chunk, but 3 + 3 > 4: still forwarded
    for t in range(1, 8):
        runner.tick(t, obs())
        wait_idle(engine)
    assert len(policy.calls) > 1 and all(p is None for _, p in policy.calls)
    engine.latency = FixedLatency(2)  # half the chunk: a committed prefix again
    for t in range(8, 16):
        runner.tick(t, obs())
        wait_idle(engine)
    assert any(p is not None and len(p) == 2 for _, p in policy.calls[1:])
    engine.close()


def test_tick_latency_leaves_out_lost_requests():
    from robo_async.actor.latency import TickLatency

    lat = TickLatency()
    for _ in range(40):
        lat.add(8)
    for _ in range(4):  # 10% of requests lost and answered on a re-request, 28 ticks late
        lat.add(28)
    assert lat.ticks() == 8
    for _ in range(50):  # a real change (a slower server): the median moves, so does the plan
        lat.add(14)
    assert lat.ticks() == 14


def test_choose_inference_is_the_one_rule_for_auto_and_inline():
    from robo_async.actor.inference_modes import InferenceModeError, choose_inference

    def pick(requested, purpose, **kw):
        return choose_inference(requested, purpose=purpose, **kw)

    # training: inline on an as-fast sim whatever the horizon, else inference beside the loop
    assert pick("auto", "train") == pick("auto", "train", horizon=8) == pick("auto", "train", horizon=1) == "inline"
    for where in ({"realtime": True}, {"robot": "so101"}, {"server": "tcp://127.0.0.1:5560"}):
        for chunk in ({"horizon": 8}, {}):  # a chunk policy, or a horizon not known
            assert pick("auto", "train", **where, **chunk) == "async_forward"
            assert pick("auto", "evaluate", **where, **chunk) == "async_forward_rtc"
    # a one-step policy where ticks keep wall-clock time is asked about each tick's own observation
    for where in ({"realtime": True}, {"robot": "so101"}):
        assert pick("auto", "train", horizon=1, **where) == pick(None, "evaluate", horizon=1, **where) == "sync_bounded"
    assert pick("auto", "train", horizon=1, server="tcp://127.0.0.1:5560") == "async_forward"  # not on the network
    # evaluating: inline only for a one-step policy on an as-fast sim; a chunk policy as it will run
    assert pick(None, "evaluate", horizon=1) == pick("auto", "evaluate", horizon=1) == "inline"
    assert pick(None, "evaluate", horizon=8) == pick(None, "evaluate") == "async_forward_rtc"
    # a named mode is used as asked, inline too on a sim
    assert pick("async_naive", "train", robot="so101") == "async_naive"
    assert pick("inline", "evaluate", horizon=8, realtime=True) == "inline"
    with pytest.raises(InferenceModeError, match="would wait on the network on the control thread"):
        pick("inline", "train", server="tcp://127.0.0.1:5560")
    with pytest.raises(InferenceModeError, match="robot so101 needs an asynchronous mode"):
        pick("inline", "evaluate", robot="so101")
    with pytest.raises(InferenceModeError, match="actor.inference 'fast' unknown"):
        pick("fast", "train")
    assert issubclass(InferenceModeError, ValueError)


def test_a_new_episode_asks_at_once_while_the_last_episodes_inference_runs():
    """An episode that ends while an inference about it is running: the next episode's first
    request starts on its first tick (the spare worker), not after the stale one; the stale
    chunk is discarded, and no episode gets more than `workers` inferences at once."""
    old, new = threading.Event(), threading.Event()
    policy = Scripted(horizon=8, gates=(old, new))
    engine = InferenceEngine(policy, A, 8, workers=1)
    engine.latency = FixedLatency(4)
    runner = AsyncChunkRunner(engine, SPEC, mode="drop_stale", forward=True)
    runner.tick(0, obs(np.full(A, 1.0, np.float32)))  # episode 1 asks; its inference is held
    deadline = time.monotonic() + 10
    while not policy.seen and time.monotonic() < deadline:
        time.sleep(0.001)
    runner.reset()  # episode 1 ends (success) before the chunk lands
    for t in range(3):
        runner.tick(t, obs(np.full(A, 2.0, np.float32)))
        while len(policy.seen) < 2 and time.monotonic() < deadline:
            time.sleep(0.001)
    assert policy.seen == [1.0, 2.0]  # asked on the new episode's first tick
    assert engine.in_flight == 2 and not engine.can_take(runner.epoch)  # one per episode, no more
    old.set()  # the stale chunk lands ...
    while engine.in_flight == 2 and time.monotonic() < deadline:
        time.sleep(0.001)
    runner.tick(10, obs(np.full(A, 2.0, np.float32)))  # (spaced past the latency: only the per-episode cap holds it)
    assert runner.chunks_merged == 0  # ... and is dropped
    assert engine.in_flight == 1  # no second request of the new episode (submit is synchronous)
    new.set()
    while engine.in_flight and time.monotonic() < deadline:
        time.sleep(0.001)
    runner.tick(11, obs(np.full(A, 2.0, np.float32)))  # the new episode's chunk covers ticks 4-11
    assert runner.chunks_merged == 1 and runner.schedule.popped_obs_tick == 0
    engine.close()


def test_the_window_percentile_is_numpys_linear_percentile():
    """The trackers' percentile (pure Python, on every remote request) equals numpy's default."""
    from robo_async.actor.latency import percentile

    rng = np.random.default_rng(3)
    for n in (1, 2, 3, 7, 50):
        values = deque(rng.exponential(0.1, n).tolist(), maxlen=50)
        for q in (0, 5, 50, 95, 99, 100):
            assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), abs=1e-12)

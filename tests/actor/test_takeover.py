"""Takeovers, releases, labels and the e-stop through the real control loop, with LeRobot's
teleoperator class (`sim_leader`) behind our adapter and the virtual operator in sim."""

import numpy as np
import pytest

from hal.safety import SafeRobot
from hal.teleop import Teleop, TeleopEvent, TeleopEventKind
from hardware.lerobot_teleop import LeRobotTeleop, make_lerobot_teleop_device
from policies.scripted import ScriptedPolicy
from robo_async.actor.adder import Adder
from robo_async.actor.loop import ControlLoop
from robo_async.actor.loop_config import LoopConfig
from robo_async.actor.takeover import TeleopMismatch, check_teleops
from robo_async.buffer.lmdb_store import PersistentReplayStore, StoreConfig
from robo_async.launch.experts import StoreOutlet
from robo_async.transport.wire import OPERATOR, POLICY, TAKEOVER, decode, encode
from sim import PushTask, ReachTask, SimRobot, TableConfig
from sim.operator import make_virtual_operator


def leader(**cfg):
    return LeRobotTeleop(make_lerobot_teleop_device({"type": "sim_leader", "id": "t", **cfg}))


class Rows:
    """A sink keeping every transition's fields (and episode summaries)."""

    def __init__(self):
        self.rows, self.episodes = [], []

    def add(
        self,
        obs,
        action,
        reward,
        next_obs,
        terminated,
        truncated,
        policy_version,
        success=False,
        intervention=0,
        policy_action=None,
    ):
        self.rows.append(
            dict(
                state=obs["state"].copy(),
                action=np.array(action),
                reward=reward,
                terminated=terminated,
                truncated=truncated,
                success=success,
                intervention=intervention,
                policy_action=None if policy_action is None else np.array(policy_action),
            )
        )

    def send_episode(self, stats):
        self.episodes.append(stats)

    def send_heartbeat(self, beat):
        pass

    def flush(self):
        pass


def run(teleops, ticks, policy_target=None, sink=None, inference="inline", episode_ticks=200, task=None, act=None):
    robot = SafeRobot(SimRobot(task or ReachTask()))
    robot.connect()
    state0 = robot.reset(seed=0).state.copy()
    target = state0 + 0.2 if policy_target is None else policy_target
    policy = ScriptedPolicy(act or (lambda: target), robot.spec.dt)
    seen = []
    for t in teleops:
        t.connect()
    loop = ControlLoop(
        robot,
        policy,
        LoopConfig(
            episode_ticks=episode_ticks, max_steps=ticks, eval_every=0, inference=inference, warmup_inference=False
        ),
        sink=sink if sink is not None else Rows(),
        teleops=tuple(teleops),
        observer=seen.append,
    )
    loop.run()
    robot.close()
    return loop, seen, target, robot


def test_takeover_executes_the_teleops_actions_and_release_hands_back_without_a_jump():
    sink = Rows()
    loop, seen, target, robot = run([leader(events={5: "is_intervention", 15: "is_intervention"})], 30, sink=sink)
    # the same device, read as many times, gives the operator's commands
    twin = leader()
    twin.connect()
    expected = [twin.get_action() for _ in range(10)]
    chosen = [s.action for s in seen]
    for k in range(10):  # polls 5..14 are ticks 4..13
        np.testing.assert_allclose(chosen[4 + k], expected[k], atol=1e-6)
    assert all(np.allclose(a, target) for a in chosen[:4] + chosen[14:])  # the policy's before and after
    assert [r["intervention"] for r in sink.rows] == [POLICY] * 4 + [TAKEOVER] + [OPERATOR] * 9 + [POLICY] * 16
    for r in sink.rows[4:14]:  # the policy's action recorded beside the operator's
        np.testing.assert_allclose(r["policy_action"], target, atol=1e-6)
    assert all(r["policy_action"] is None for r in sink.rows[:4] + sink.rows[14:])
    applied = np.array([s.applied for s in seen])
    steps = np.abs(np.diff(applied, axis=0)).max()
    assert steps <= robot.spec.max_step_rad + 1e-5  # no jump beyond the safety limit, either way
    assert loop.operators.takeovers == 1 and loop.operators.operator_ticks == 10 and loop.operators.active is None


def test_release_in_async_mode_asks_about_the_state_the_operator_left():
    # as fast as possible, the loop runs on while a chunk is computed: the latency measured in ticks
    # (and so how far ahead the first chunk after the release is placed) depends on the machine's load
    loop, seen, target, robot = run(
        [leader(events={5: "is_intervention", 15: "is_intervention"})], 1500, inference="async_forward"
    )
    # the first policy action after the release (tick 14) comes from an observation at or after it
    after = [s for s in seen[14:] if s.obs_tick >= 0]
    assert after and after[0].obs_tick >= 14
    # until that chunk lands the robot holds the operator's last target (no jump back)
    held = [s for s in seen[14:] if s.tick < after[0].tick]
    for s in held:
        np.testing.assert_allclose(s.applied, seen[13].applied, atol=1e-5)


def test_intervention_rows_land_in_the_interventions_table_with_the_policys_action(tmp_path):
    store = PersistentReplayStore(tmp_path / "replay", StoreConfig(commit_ms=5)).open()
    adder = Adder(0, StoreOutlet(store, "online"), flush_every=8)
    loop, seen, target, robot = run([leader(events={5: "is_intervention", 15: "is_intervention"})], 30, sink=adder)
    assert store.flush()
    assert store.counts["online"] == 30 and store.counts["interventions"] == 10
    rows = [r for _, r in store.rows("interventions")]
    assert [int(r["intervention"]) for r in rows] == [TAKEOVER] + [OPERATOR] * 9
    for r in rows:
        np.testing.assert_allclose(r["policy_action"], target, atol=1e-6)
        assert not np.allclose(r["action"], target)
    online = [r for _, r in store.rows("online")]
    assert [int(r["intervention"]) for r in online].count(POLICY) == 20
    # the cache serves them to the sampler (windows inside one takeover only)
    w = store.sample_windows(4, 4, np.random.default_rng(0), "interventions")
    assert w is not None and (w["interventions"] > 0).all()
    store.close()


def test_an_estop_from_sim_leader_inside_a_run_latches_a_hold():
    k = iter(range(10**6))
    loop, seen, target, robot = run(
        [leader(events={10: "estop"})], 25, act=lambda: np.full(6, 0.3 * np.sin(next(k) / 3), np.float32)
    )
    assert robot.estopped
    applied = np.array([s.applied for s in seen])
    assert np.abs(applied[8] - applied[7]).max() > 0.01  # moving before (poll 10 is tick 9)
    for a in applied[10:]:
        np.testing.assert_allclose(a, applied[9], atol=1e-6)  # held from tick 9 on


@pytest.mark.parametrize(
    "label,terminated,success", [("success", True, True), ("failure", False, False), ("rerecord_episode", False, False)]
)
def test_labels_end_the_episode_with_the_right_flags(label, terminated, success):
    sink = Rows()
    run([leader(events={6: label})], 10, sink=sink)
    ep = sink.episodes[0]
    assert ep.length == 6 and ep.success is success
    assert ep.label == {"rerecord_episode": "rerecord"}.get(label, label)
    last = sink.rows[5]
    assert last["terminated"] is terminated and last["truncated"] is (not terminated) and last["success"] is success
    if success:
        assert last["reward"] >= 1.0
    assert decode(encode(ep)) == ep  # labels travel to the learner


def test_estop_wins_a_tick_with_conflicting_events():
    sink = Rows()
    loop, seen, target, robot = run([leader(events={6: "success"}), leader(events={6: "estop"})], 10, sink=sink)
    assert robot.estopped
    assert sink.episodes == [] and loop.operators.labels["success"] == 0  # the success label was dropped


def test_a_teleop_lost_mid_takeover_holds_the_robot_and_returns_control_to_the_policy():
    sink = Rows()
    loop, seen, target, robot = run([leader(events={5: "is_intervention"}, disconnect_at=9)], 30, sink=sink)
    ops = loop.operators
    assert ops.lost == 1 and ops.active is None and ops.teleops == []
    # ticks 4..7 the operator's; tick 8 its poll worked but get_action raised: hold; then the policy
    np.testing.assert_allclose(seen[8].applied, seen[7].applied, atol=1e-6)
    assert [r["intervention"] for r in sink.rows[4:9]] == [TAKEOVER] + [OPERATOR] * 4
    assert all(r["intervention"] == POLICY for r in sink.rows[9:])
    assert np.allclose(seen[-1].action, target) and len(sink.rows) == 30  # the run went on


def test_a_teleop_whose_actions_do_not_fit_the_robot_is_refused():
    with pytest.raises(TeleopMismatch, match="gives 6 joint targets, the robot takes 4"):
        check_teleops((leader(),), 4)


def test_the_virtual_operator_takes_over_a_stalled_policy_and_never_in_evaluation_episodes():
    robot = SafeRobot(SimRobot(PushTask(TableConfig())))
    op = make_virtual_operator(robot, "push", {"type": "virtual", "stall_ticks": 20, "hold_ticks": 15})
    robot.connect()
    robot.reset(seed=0)
    hold = robot.get_observation().state.copy()
    policy = ScriptedPolicy(lambda: hold, robot.spec.dt)  # never moves: it stalls
    policy.version = 0
    sink = Rows()
    loop = ControlLoop(
        robot,
        policy,
        LoopConfig(episode_ticks=80, max_episodes=4, eval_every=2, inference="inline", warmup_inference=False),
        sink=sink,
        teleops=(op,),
    )
    loop.run()
    robot.close()
    ends = np.flatnonzero([r["terminated"] or r["truncated"] for r in sink.rows]) + 1
    iv = np.split(np.array([r["intervention"] for r in sink.rows]), ends[:-1])
    assert len(iv) == 4
    assert (iv[0] == TAKEOVER).sum() >= 1 and (iv[0] > 0).sum() >= 15  # training episodes: taken over
    assert (iv[2] > 0).any()
    assert (iv[1] == 0).all() and (iv[3] == 0).all()  # evaluation episodes (odd ones): never
    first = int(np.argmax(iv[0] > 0))
    assert first >= 20  # only after it stalled
    moved = np.array([r["action"] for r in sink.rows[first : first + 15]])
    assert np.abs(moved - hold).max() > 0.05  # the expert drove the arm
    assert [e.operator_ticks for e in sink.episodes][1::2] == [0, 0]


class Buttons(Teleop):
    """A device with buttons only (a gamepad or keyboard, not on this machine): scripted events per poll."""

    def __init__(self, events):
        self.script, self.polls = events, 0

    name = "buttons"

    def connect(self):
        pass

    def close(self):
        pass

    def get_action(self):
        return None

    def events(self):
        self.polls += 1
        return [TeleopEvent(k) for k in self.script.get(self.polls, [])]


def test_a_buttons_only_device_hands_control_to_the_leader_arm():
    sink = Rows()
    buttons = Buttons({3: [TeleopEventKind.INTERVENTION_ON], 8: [TeleopEventKind.INTERVENTION_OFF]})
    loop, seen, target, robot = run([leader(), buttons], 15, sink=sink)
    assert [r["intervention"] for r in sink.rows][:9] == [POLICY] * 2 + [TAKEOVER] + [OPERATOR] * 4 + [POLICY] * 2
    twin = leader()
    twin.connect()
    np.testing.assert_allclose(seen[2].action, twin.get_action(), atol=1e-6)  # the leader drove


def test_lerobots_rerecord_key_is_a_rerecord_not_a_failure():
    class Keys:  # LeRobot's keyboard_ee reports 'r' as rerecord_episode and terminate_episode together
        name, action_features, is_connected = "keyboard_ee", {"delta_x": float}, True

        def get_teleop_events(self):
            return {"is_intervention": False, "terminate_episode": True, "success": False, "rerecord_episode": True}

    assert [e.kind for e in LeRobotTeleop(Keys()).events()] == [TeleopEventKind.RERECORD]

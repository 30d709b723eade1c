"""Other people's environments as tasks: any Gymnasium env (success keys, truncation, nested
cameras, narrowed action limits, seeded resets, an outside scripted expert), gym_hil and
Meta-World with their defaults and experts."""

import gymnasium as gym
import numpy as np
import pytest

from hal.conformance import check_robot
from hal.robot import RobotError
from hal.safety import SafeRobot
from robo_async.actor.loop import ControlLoop
from robo_async.actor.loop_config import LoopConfig
from robo_async.launch.experts import EpisodeCollector, expert_policy
from robo_async.launch.tasks import TaskArgs, make_robot
from sim import GymConfig, GymRobot
from sim.gym_robot import load_callable

ENV = "robo_async_test/Toy-v0"


class ToyEnv(gym.Env):
    """Succeeds (info[key]) when the action's first value is above 0.5 for 3 ticks running;
    `limit` ticks truncate it; the target position comes from numpy's global generator (as
    gym_hil's cube does); images under a nested `pixels` dict."""

    def __init__(self, key="succeed", limit=6, nested=True):
        self.key, self.limit, self.nested = key, limit, nested
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        spaces = {
            "agent_pos": gym.spaces.Box(-9, 9, (3,), np.float32),
            "environment_state": gym.spaces.Box(-9, 9, (2,), np.float32),
        }
        if nested:
            spaces["pixels"] = gym.spaces.Dict({"front": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)})
        self.observation_space = gym.spaces.Dict(spaces)

    def _obs(self):
        o = {"agent_pos": np.array([self.t, self.run, 0], np.float32), "environment_state": self.target}
        if self.nested:
            o["pixels"] = {"front": np.full((8, 8, 3), self.t, np.uint8)}
        return o

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.run = 0, 0
        self.target = np.random.uniform(-1, 1, 2).astype(np.float32)  # the global generator, on purpose
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        self.run = self.run + 1 if action[0] > 0.5 else 0
        done = self.run >= 3
        return self._obs(), float(done), done, self.t >= self.limit and not done, {self.key: done}


gym.register(ENV, entry_point=ToyEnv)


def push_right(obs):
    """An outside scripted policy (module:callable): a function of the env's raw observation."""
    return np.array([1.0, float(obs["environment_state"][0])], np.float32)


class PushRightPolicy:
    """The same as a class with `get_action`, as Meta-World's scripted policies are."""

    def get_action(self, obs):
        return push_right(obs)


def toy(**cfg) -> GymRobot:
    kwargs = tuple((k, cfg.pop(k)) for k in ("key", "limit", "nested") if k in cfg)
    return GymRobot(GymConfig(ENV, kwargs=kwargs, **cfg))


def test_success_from_the_keys_envs_use_and_truncation_kept():
    for key in ("is_success", "success", "succeed"):
        r = toy(key=key)
        r.connect()
        r.reset(seed=0)
        for _ in range(3):
            r.send_action(np.array([1.0, 0.0], np.float32))
        out = r.outcome()
        assert out.success and out.terminated and not out.truncated, key
        r.close()
    r = toy(key="done_ok", success_key="done_ok")  # a configured key
    r.connect()
    r.reset(seed=0)
    for _ in range(3):
        r.send_action(np.array([1.0, 0.0], np.float32))
    assert r.outcome().success
    r.reset(seed=0)
    for _ in range(6):  # never three in a row: the env's own time limit
        r.send_action(np.array([0.0, 0.0], np.float32))
    assert r.outcome().truncated and not r.outcome().terminated and not r.outcome().success
    r.close()
    r = toy(success_key="nope")
    r.connect()
    r.reset(seed=0)
    with pytest.raises(RobotError, match=r"no info\['nope'\].*info keys: \['succeed'\]"):
        r.send_action(np.zeros(2, np.float32))
    r.close()


def test_nested_cameras_features_limits_and_seeded_resets():
    r = toy(action_low=(-0.5, -1.0), action_high=(0.5, 1.0))
    spec = r.spec
    assert [c.name for c in spec.cameras] == ["front"] and dict(spec.features) == {"environment_state": 2}
    assert spec.name == "gym_robo_async_test_Toy-v0"
    np.testing.assert_allclose(spec.low, [-0.5, -1.0])
    np.testing.assert_allclose(spec.high, [0.5, 1.0])
    r.connect()
    a = r.reset(seed=7).features["environment_state"]
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    b = r.reset(seed=7)
    np.testing.assert_array_equal(a, b.features["environment_state"])  # the seed decides the global draw
    np.testing.assert_array_equal(np.random.get_state()[1], before)  # ... and the generator is put back
    assert b.images["front"].shape == (8, 8, 3) and b.state.tolist() == [0, 0, 0]
    r.close()
    with pytest.raises(RobotError, match="action_low has 3 values.*takes 2"):
        _ = toy(action_low=(0, 0, 0)).spec
    with pytest.raises(RobotError, match="no action range"):
        _ = toy(action_low=(0.6, 0.0), action_high=(0.5, 1.0)).spec
    check_robot(lambda: toy())


def still(obs):
    return np.zeros(2, np.float32)


class _Sink(EpisodeCollector):
    def __init__(self):
        super().__init__()
        self.flags = []

    def add(self, obs, action, reward, next_obs, terminated, truncated, *a, **k):
        super().add(obs, action, reward, next_obs, terminated, truncated, *a, **k)
        self.flags.append((terminated, truncated))


def _run_expert(robot, episodes=1):
    sink = _Sink()
    robot.connect()
    try:
        ControlLoop(
            robot,
            expert_policy(TaskArgs("gym", {}), robot),
            LoopConfig(episode_ticks=50, max_episodes=episodes, inference="inline", eval_every=1),
            sink=sink,
        ).run()
    finally:
        robot.close()
    return sink


def test_a_truncating_env_ends_the_loops_episode_as_truncated():
    sink = _run_expert(SafeRobot(toy(limit=4, expert="tests.sim.test_gym_envs:still")))
    assert sink.flags == [(False, False)] * 3 + [(False, True)]  # the env's limit (4), not the loop's (50)
    sink = _run_expert(SafeRobot(toy(limit=9, expert="tests.sim.test_gym_envs:PushRightPolicy")))
    assert sink.flags == [(False, False)] * 2 + [(True, False)] and sink.successes == [True]


def test_outside_experts_load_by_name_and_bad_names_are_one_line():
    obs = {"environment_state": np.array([0.25, 0.0], np.float32)}
    assert load_callable("tests.sim.test_gym_envs:push_right")(obs)[1] == pytest.approx(0.25)
    assert load_callable("tests.sim.test_gym_envs:PushRightPolicy")(obs)[0] == 1.0
    for bad, why in (
        ("nocolon", "not module:callable"),
        ("no_such_module_x:f", "cannot be imported"),
        ("tests.sim.test_gym_envs:nope", "has no nope"),
        ("tests.sim.test_gym_envs:ENV", "not callable"),
    ):
        with pytest.raises(ValueError, match=why):
            load_callable(bad)
    from sim.experts import NoExpert, make_expert

    with pytest.raises(NoExpert, match="task.expert=module:callable"):
        make_expert("gym", SafeRobot(toy()))
    with pytest.raises(NoExpert, match="cannot be imported"):
        make_expert("gym", SafeRobot(toy(expert="no_such_module_x:f")))


def test_buffer_demos_with_an_outside_expert_and_a_refusal_that_leaves_nothing(tmp_path, capsys):
    from robo_async.cli import main

    out = tmp_path / "none"
    assert main(["buffer", "demos", "task=gym", f"out={out}", "episodes=1"]) == 2
    assert "task.expert=module:callable" in capsys.readouterr().err and not out.exists()
    out = tmp_path / "toy"
    assert (
        main(
            [
                "buffer",
                "demos",
                "task=gym",
                f"task.env_id={ENV}",
                f"out={out}",
                "episodes=2",
                "task.expert=tests.sim.test_gym_envs:PushRightPolicy",
            ]
        )
        == 0
    )
    assert "(100% successful episodes)" in capsys.readouterr().out
    from robo_async.buffer.lmdb_store import PersistentReplayStore, StoreConfig

    store = PersistentReplayStore(out, StoreConfig()).open()
    try:
        assert store.live("demos") == 6  # 2 episodes of 3 ticks
    finally:
        store.close()


def test_train_cfg_takes_hydras_spelling_and_tasks_bring_their_policy_keys(capsys):
    import yaml

    from robo_async.cli import main
    from robo_async.config import compose_config

    for args in (["--cfg", "job", "task=gym_hil"], ["--cfg=all", "task=gym_hil"], ["task=gym_hil", "--cfg"]):
        assert main(["train", *args]) == 0
        printed = yaml.safe_load(capsys.readouterr().out)
        assert printed["task"]["env_id"] == "gym_hil/PandaPickCube-v0", args
        assert (
            printed["policy"]["obs_keys"] == ["state", "environment_state"]
            and printed["policy"]["action_mode"] == "absolute"
        )
    cfg = compose_config(["task=gym_hil", "policy=flow", "policy.obs_keys=[state]"])
    assert list(cfg.policy.obs_keys) == ["state"] and cfg.policy.action_mode == "absolute"  # the user's key wins
    assert compose_config(["task=reach"]).policy.action_mode == "delta"  # our sims bring none
    assert list(compose_config(["task=metaworld"]).policy.obs_keys) == ["state"]


@pytest.mark.parametrize(
    "task, name, actions", [("gym_hil", "gym_gym_hil_PandaPickCube-v0", 4), ("metaworld", "metaworld_pick-place-v3", 4)]
)
def test_peer_envs_are_sim_resources_whose_experts_succeed(task, name, actions):
    from robo_async.config import compose_config
    from robo_async.launch.builders import task_args

    targs = task_args(compose_config([f"task={task}"]).task)
    assert targs.resource_need == f"sim:{task}"
    robot = SafeRobot(make_robot(targs))
    assert robot.spec.name == name and robot.spec.action_dim == actions
    sink = _Sink()
    robot.connect()
    try:
        ControlLoop(
            robot,
            expert_policy(targs, robot),
            LoopConfig(
                episode_ticks=int(targs.options.get("episode_ticks", 100)),
                max_episodes=2,
                seed=3,
                inference="inline",
                eval_every=1,
            ),
            sink=sink,
        ).run()
    finally:
        robot.close()
    assert sink.successes == [True, True]  # the scripted expert, through the safety layer and the one loop
    assert sink.flags[-1] == (True, False)


@pytest.mark.e2e
def test_peer_envs_pass_the_conformance_suite_and_name_bad_tasks():
    from sim import GymHilConfig, GymHilRobot, MetaWorldConfig, MetaWorldRobot

    check_robot(lambda: GymHilRobot(GymHilConfig()), ticks=3)
    check_robot(lambda: MetaWorldRobot(MetaWorldConfig(env_name="reach-v3")), ticks=3)
    with pytest.raises(RobotError, match="no task 'pick-plase-v3'; did you mean"):
        _ = MetaWorldRobot(MetaWorldConfig(env_name="pick-plase-v3")).spec
    with pytest.raises(RobotError, match="cannot be made"):
        _ = GymHilRobot(GymHilConfig(env_id="gym_hil/NoSuch-v0")).spec


def test_gym_hil_from_cameras_the_expert_alone_sees_the_cube():
    from robo_async.config import compose_config
    from robo_async.launch.builders import task_args

    cfg = compose_config(["task=gym_hil", "task.image_obs=true", "policy=flow"])
    assert list(cfg.policy.obs_keys) == ["state"] and list(cfg.policy.cameras) == ["front", "wrist"]
    targs = task_args(cfg.task)
    robot = SafeRobot(make_robot(targs))
    assert [c.name for c in robot.spec.cameras] == ["front", "wrist"] and robot.spec.features == ()
    sink = _Sink()
    robot.connect()
    try:
        import mujoco

        flags = robot.inner._env.unwrapped._viewer.scene.flags  # rendered without the costly effects
        assert not flags[mujoco.mjtRndFlag.mjRND_SHADOW] and not flags[mujoco.mjtRndFlag.mjRND_REFLECTION]
        ControlLoop(
            robot,
            expert_policy(targs, robot),
            LoopConfig(episode_ticks=100, max_episodes=1, seed=5, inference="inline", eval_every=1),
            sink=sink,
        ).run()
    finally:
        robot.close()
    assert sink.successes == [True]  # the expert read the simulator's cube ...
    ep = sink.episodes[0]
    assert "obs/environment_state" not in ep and ep["obs/front"].shape[1:] == (64, 64, 3)  # ... the data did not


def one_operated_episode(robot, op, policy, ticks):
    """One episode of `policy` with the operator `op` watching; (sink, who acted each tick). Closes the robot."""
    interventions = []

    class Note(_Sink):
        def add(self, *a, intervention=0, **k):
            interventions.append(intervention)
            super().add(*a, **k)

    sink = Note()
    robot.connect()
    try:
        ControlLoop(
            robot,
            policy,
            LoopConfig(episode_ticks=ticks, max_episodes=1, inference="inline", eval_every=0),
            sink=sink,
            teleops=(op,),
        ).run()
    finally:
        robot.close()
    return sink, interventions


def test_the_virtual_operator_drives_an_outside_env_with_its_outside_expert():
    from policies.scripted import HoldPolicy
    from robo_async.launch.tasks import make_teleops

    options = {"env_id": ENV, "kwargs": (("limit", 30),), "expert": "tests.sim.test_gym_envs:PushRightPolicy"}
    robot = SafeRobot(make_robot(TaskArgs("gym", options)))
    (op,) = make_teleops(
        TaskArgs("gym", options, teleop={"type": "virtual", "stall_ticks": 4, "hold_ticks": 10}), robot
    )
    # the policy holds (never succeeds); the operator takes over after 4 ticks without progress
    sink, interventions = one_operated_episode(robot, op, HoldPolicy(robot.spec), 30)
    assert op.takeovers == 1 and sink.successes == [True]
    assert interventions[:4] == [0, 0, 0, 0] and interventions[4] == 2 and set(interventions[5:]) == {1}
    with pytest.raises(Exception, match="task.expert=module:callable"):
        make_teleops(
            TaskArgs("gym", {"env_id": ENV}, teleop={"type": "virtual"}),
            SafeRobot(make_robot(TaskArgs("gym", {"env_id": ENV}))),
        )


def test_gym_hil_state_gives_the_gripper_as_a_fraction_closed():
    """gym_hil's agent_pos carries the gripper actuator's 0..255; the state gives it as 0..1 (an MLP
    fed 0..255 beside joint angles did not learn), the raw observation (the expert's) keeps it."""
    from sim import GymHilConfig, GymHilRobot
    from sim.gym_hil import GRIPPER_INDEX

    robot = GymHilRobot(GymHilConfig())
    robot.connect()
    try:
        robot.reset(seed=0)
        for _ in range(6):
            robot.send_action(np.array([0.0, 0.0, 0.0, 2.0], np.float32))  # close
        raw = float(robot.raw_observation["agent_pos"][GRIPPER_INDEX])
        got = float(robot.get_observation().state[GRIPPER_INDEX])
        assert raw > 200 and got == pytest.approx(raw / 255.0) and 0.5 < got <= 1.0
        np.testing.assert_allclose(robot.get_observation().state[-3:], robot.raw_observation["agent_pos"][-3:])
    finally:
        robot.close()


def test_the_virtual_operator_takes_over_on_gym_hil_when_the_policy_strays_from_the_cube():
    """On gym_hil the operator judges progress as a person watching would (gripper to cube, lift), so a
    policy moving away from the cube is taken over at once, long before stall_ticks would."""
    from policies.scripted import ScriptedPolicy
    from robo_async.launch.tasks import make_teleops

    robot = SafeRobot(make_robot(TaskArgs("gym_hil", {})))
    (op,) = make_teleops(
        TaskArgs("gym_hil", {}, teleop={"type": "virtual", "stall_ticks": 40, "hold_ticks": 30}), robot
    )
    away = ScriptedPolicy(lambda: np.array([0.0, 0.0, 1.0, 1.0], np.float32), robot.spec.dt, "up")  # rises away
    robot.connect()
    robot.reset(seed=0)
    start = robot.inner.operator_progress()
    robot.close()
    sink, interventions = one_operated_episode(robot, op, away, 60)
    first = interventions.index(2)  # the takeover tick
    assert 0 < first < 10, interventions[:12]  # rising 2.5 cm a tick: 10 cm worse than its best within ~5 ticks
    assert op.takeovers >= 1 and sink.successes == [True]  # the expert then picked the cube
    assert start < 0  # (progress: minus ten times the gripper's distance to the cube, before any lift)

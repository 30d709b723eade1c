"""An actor whose policy runs on a policy server (`actor.inference_server`) takes the learner's
statuses and acks but no weight pushes: its policy's weights reach the server, not the actor.
Real sockets throughout: a `Learner` publishing (its keyframe, republished every second), a
`PolicyServer`, and the `Actor` driving a simulated robot in real time."""

import threading
import time

from hal.safety import SafeRobot
from policies.flow import FlowChunkPolicy
from robo_async.actor.actor import Actor, ActorConfig
from robo_async.actor.loop_config import LoopConfig
from robo_async.actor.remote import RemotePolicy
from robo_async.actor.uplink_config import UplinkConfig
from robo_async.learner.algorithms import PolicySpec
from robo_async.learner.algorithms.sac import SACConfig
from robo_async.learner.config import LearnerConfig
from robo_async.learner.learner import Learner
from robo_async.learner.options import LearnerOptions
from robo_async.serve import PolicyServer, ServeConfig
from robo_async.transport.channels import WeightClient
from sim import ReachTask, SimRobot

SPEC = ReachTask().spec()
OBS = (("state", 6), ("ee_pos", 3), ("target", 3), ("ee_to_target", 3))


def wait_for(condition, what: str, deadline_s: float = 120.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {deadline_s:.0f} s"
        time.sleep(0.02)


def test_an_actor_with_its_policy_on_a_server_gets_statuses_and_acks_but_no_weights(tmp_path):
    learner = Learner(
        LearnerConfig(
            str(tmp_path / "run"),
            "tcp://127.0.0.1:0",
            "tcp://127.0.0.1:0",
            PolicySpec(
                "mlp",
                tuple(k for k, _ in OBS),
                tuple(d for _, d in OBS),
                tuple(SPEC.joint_low),
                tuple(SPEC.joint_high),
                hidden=(32, 32),
            ),
            algo_config=SACConfig(batch_size=16, warmup_steps=1 << 30, hidden=(32, 32)),  # no updates: only pushes
            tensorboard=False,
            stop_at_success=None,
            options=LearnerOptions(checkpoint_every_s=3600.0),
        )
    )
    learner.open()
    data, weights = learner.addresses
    stop_learner = threading.Event()
    stepping = threading.Thread(target=lambda: [learner.step() for _ in iter(stop_learner.is_set, True)])
    stepping.start()
    server = PolicyServer(
        FlowChunkPolicy(("state",), (6,), SPEC.joint_low, SPEC.joint_high, horizon=8),
        SPEC,
        ServeConfig("tcp://127.0.0.1:0"),
    ).start()
    witness = WeightClient(weights, every_s=0.01).start()  # a subscriber that takes weights: they do go out
    stop = threading.Event()
    actor = Actor(
        SafeRobot(SimRobot(ReachTask())),
        RemotePolicy(server.bound, SPEC),
        ActorConfig(
            0,
            data,
            weights,
            LoopConfig(realtime=True, inference="async_forward", episode_ticks=50, eval_every=0),
            delivery=UplinkConfig(journal_dir=None),
            drain_s=60.0,
        ),
    )
    result = {}
    running = threading.Thread(target=lambda: result.update(r=actor.run(stop)))
    running.start()
    try:
        wait_for(lambda: actor.client is not None and actor.client.statuses > 0, "the actor's first status")
        seen = witness.weight_messages
        # three republished pushes reach the witness while the actor is subscribed and ticking
        wait_for(lambda: witness.weight_messages >= seen + 3, "three weight pushes at the witness")
        wait_for(lambda: actor.env_steps >= 60, "60 ticks")
    finally:
        stop.set()
        running.join(120)
    try:
        assert not running.is_alive() and result["r"] is not None and result["r"].ticks >= 60
        client = actor.client
        assert client is not None
        assert client.weight_messages == 0 and client.dropped == 0  # no weight part ever reached it
        assert client.statuses > 0 and actor.uplink.unacked == 0  # statuses came, and acked all it sent
        assert learner.high_water.get(0) == actor.env_steps  # everything it ran is in the store
        assert server.chunks > 0  # its chunks came from the server
    finally:
        witness.close()
        server.close()
        stop_learner.set()
        stepping.join(30)
        learner.close()

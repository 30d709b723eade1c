"""`transport.advertise`: the addresses actors dial when a NAT, a tunnel or a proxy sits between
them and the learner. Checked at plan time (two tcp://host:port addresses), carried in the plan, and
given to every actor the supervisor starts (restarts included) in place of the bound ones;
`addresses.json` stays the learner's own pair."""

from __future__ import annotations

import json

import pytest
import yaml
from omegaconf import OmegaConf

from robo_async.cli import main
from robo_async.config import compose_config, load_config
from robo_async.launch.builders import build_plan, check_advertise
from robo_async.launch.mirrors import ConfigError
from robo_async.launch.runner import Exit, Ready
from robo_async.launch.supervisor import Supervisor, actor_addresses
from robo_async.transport.options import TransportOptions
from tests.launch.test_supervisor import Display, Runner, clock, finish, plan_for  # noqa: F401 (clock: the fixture)

ADVERTISED = ("tcp://gateway:7001", "tcp://gateway:7002")


def _stored(**changes: object) -> OmegaConf:
    """The default config as a plain mapping with `changes` (dotted keys as `a__b`)."""
    cfg = OmegaConf.create(OmegaConf.to_container(compose_config([]), resolve=True))
    for key, value in changes.items():
        OmegaConf.update(cfg, key.replace("__", "."), value, force_add=True)
    return cfg


def test_the_key_defaults_to_none_and_overrides_are_typed():
    assert TransportOptions().advertise is None
    assert compose_config([]).transport.advertise is None
    run = load_config(["transport.advertise=[tcp://a:1,tcp://a:2]"])
    assert run.transport.advertise == ("tcp://a:1", "tcp://a:2")


@pytest.mark.parametrize(
    "advertise, want",
    [
        (["tcp://gateway:7001"], "two addresses"),
        (["tcp://g:1", "tcp://g:2", "tcp://g:3"], "two addresses"),
        (["ipc:///tmp/data", "tcp://gateway:7002"], "the data address must be tcp://host:port"),
        (["tcp://gateway:7001", "gateway:7002"], "the weights address must be tcp://host:port"),
        (["tcp://gateway:0", "tcp://gateway:7002"], "ports are 1 to 65535"),
        (["tcp://gateway:7001", "tcp://gateway:65536"], "ports are 1 to 65535"),
        (["tcp://gateway:http", "tcp://gateway:7002"], "ports are 1 to 65535"),
        (["tcp://gateway", "tcp://gateway:7002"], "needs a host actors can dial and a port"),
        (["tcp://:7001", "tcp://gateway:7002"], "needs a host actors can dial and a port"),
        (["tcp://*:7001", "tcp://gateway:7002"], "needs a host actors can dial and a port"),
    ],
)
def test_a_wrong_advertise_is_refused_at_plan_time_naming_the_key(tmp_path, advertise, want):
    with pytest.raises(ConfigError) as err:
        build_plan(_stored(transport__advertise=advertise), tmp_path / "run")
    msg = str(err.value)
    assert msg.startswith("transport.advertise") and want in msg and "\n" not in msg


def test_a_plan_carries_the_advertised_addresses(tmp_path):
    assert build_plan(_stored(), tmp_path / "a").advertise is None
    plan = build_plan(_stored(transport__advertise=list(ADVERTISED)), tmp_path / "b")
    assert plan.advertise == ADVERTISED
    assert plan.learner.data_address == "tcp://127.0.0.1:0"  # the learner still binds transport.host
    assert check_advertise(["tcp://[::1]:7001", "tcp://10.0.0.2:7002"]) == ("tcp://[::1]:7001", "tcp://10.0.0.2:7002")


def test_actor_addresses_prefers_the_advertised_pair():
    ready = Ready(("tcp://10.0.0.5:5555", "tcp://10.0.0.5:5556"), ("tcp://0.0.0.0:5555", "tcp://0.0.0.0:5556"))
    assert actor_addresses(ready, None) == ready.addresses
    assert actor_addresses(ready, ADVERTISED) == ADVERTISED


class RecordingRunner(Runner):
    """The scripted runner, keeping each actor config it was asked to start."""

    def __init__(self, clock) -> None:  # noqa: F811 - the fixture's value
        super().__init__(clock)
        self.actor_cfgs: list = []

    def start_actor(self, cfg):
        self.actor_cfgs.append(cfg)
        return super().start_actor(cfg)


@pytest.mark.parametrize("advertise", [None, ADVERTISED])
def test_the_supervisor_gives_actors_the_advertised_addresses_restarts_too(tmp_path, clock, advertise):  # noqa: F811
    runner = RecordingRunner(clock)
    plan = plan_for(tmp_path, n_actors=2, backoff_s=1, max_backoff_s=1)
    plan.advertise = advertise
    t0 = clock.now
    clock.at(t0 + 2, lambda: setattr(runner.procs("actor 1")[0], "ended", Exit.FAILED))
    clock.at(t0 + 10, lambda: finish(runner))
    Supervisor(plan, runner, Display()).run()
    assert [c.actor_id for c in runner.actor_cfgs] == [0, 1, 1]  # actor 1 restarted
    want = advertise or ("tcp://a:1", "tcp://a:2")  # the scripted learner's Ready.addresses
    assert {(c.data_address, c.weights_address) for c in runner.actor_cfgs} == {want}
    assert json.loads((tmp_path / "addresses.json").read_text()) == ["tcp://a:1", "tcp://a:2"]  # bound, either way


def test_train_cfg_prints_the_advertised_addresses(capsys):
    assert main(["train", "--cfg", "job", "transport.advertise=[tcp://a:1,tcp://a:2]"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["transport"]["advertise"] == ["tcp://a:1", "tcp://a:2"]

"""Every `robo-async bench <name>` reaches its own entry function with the keys it declares (a
frozen dataclass, parsed by the one key=value parser: unknown keys and bad values refused in one
line, `--help` listing every key with its default and meaning)."""

import dataclasses
import inspect
import json
import typing
from pathlib import Path

import pytest

from robo_async.bench import BENCHES, load_all, parse_keys, run_bench
from robo_async.cli import main
from robo_async.commands.args import _show, key_of
from robo_async.config import UserError

load_all()
NAMES = sorted(BENCHES)


def test_each_bench_is_registered_on_its_entry_function():
    with pytest.raises(Exception, match="unknown benchmark"):
        run_bench("nope", [])
    assert {"learn", "learn-reach", "buffer", "hil", "async-inference", "envs", "chaos", "soak"} <= set(BENCHES)
    for name, b in BENCHES.items():
        assert b.run.__name__.startswith("bench_"), f"bench {name} is registered on {b.run.__name__}"
        assert list(inspect.signature(b.run).parameters) == ["args"], name
        assert b.run.__annotations__["args"] in (b.keys.__name__, b.keys), f"bench {name} takes {b.keys.__name__}"


def test_a_bench_without_declared_keys_is_refused_at_registration():
    from robo_async.bench import register

    with pytest.raises(TypeError, match="frozen dataclass"):
        register("nokeys", dict)


@pytest.mark.parametrize("name", NAMES)
def test_each_bench_declares_its_keys_with_a_default_and_a_meaning(name):
    """A frozen dataclass with at least one key, each with a default (a bench runs with none given)
    and a one-line meaning; every default, written as the help shows it, parses back to itself."""
    keys = BENCHES[name].keys
    fields = dataclasses.fields(keys)
    assert fields and keys.__dataclass_params__.frozen, name
    for f in fields:
        assert f.metadata.get("help") and "\n" not in f.metadata["help"], f"{name}: {f.name} has no one-line help"
        assert f.default is not dataclasses.MISSING, f"{name}: {f.name} has no default"
        got = parse_keys(name, [f"{key_of(f)}={_show(f.default)}"])
        assert getattr(got, f.name) == f.default, f"{name}: {f.name}={_show(f.default)} parses to another value"
    assert parse_keys(name, []) == keys()


@pytest.fixture
def nothing_runs(monkeypatch):
    """Every bench's entry function replaced by one that fails the test if it is reached."""

    def ran(args: object) -> int:
        raise AssertionError(f"the bench ran with {args}")

    for name, b in list(BENCHES.items()):
        monkeypatch.setitem(BENCHES, name, dataclasses.replace(b, run=ran))


@pytest.mark.parametrize("name", NAMES)
def test_an_unknown_or_misspelt_key_is_one_line_naming_it_before_anything_runs(name, capsys, nothing_runs):
    assert main(["bench", name, "no_such_key=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"bench {name}: unknown key no_such_key=" in err and len(err.splitlines()) == 1, err
    first = key_of(dataclasses.fields(BENCHES[name].keys)[0])
    assert f"{first}=" in err  # the keys it knows are named


def _typed(name: str) -> tuple[str, type]:
    """A key of bench `name` whose type is int or float (every bench has one)."""
    hints = typing.get_type_hints(BENCHES[name].keys)
    for f in dataclasses.fields(BENCHES[name].keys):
        if hints[f.name] in (int, float):
            return key_of(f), hints[f.name]
    raise AssertionError(f"bench {name} has no int or float key")


@pytest.mark.parametrize("name", NAMES)
def test_a_typed_key_is_parsed_to_its_type_and_a_bad_value_refused(name):
    key, typ = _typed(name)
    got = getattr(parse_keys(name, [f"{key}=7"]), key)
    assert got == 7 and type(got) is typ
    with pytest.raises(UserError) as e:
        parse_keys(name, [f"{key}=seven"])
    assert f"bench {name}: {key}='seven'" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("name", NAMES)
def test_bench_help_lists_every_key_with_its_default_and_meaning(name, capsys, nothing_runs):
    assert main(["bench", name, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: robo-async bench {name} ")
    for f in dataclasses.fields(BENCHES[name].keys):
        line = next((ln for ln in out.splitlines() if ln.startswith(f"  {key_of(f)} ")), None)
        assert line is not None, f"bench {name} --help does not list {key_of(f)}"
        assert _show(f.default) in line and f.metadata["help"] in line, line


@pytest.mark.parametrize(("bench", "key"), [("learn", "rows"), ("envs", "rows")])
def test_unknown_rows_are_one_error_line_before_anything_runs(bench, key, capsys, tmp_path):
    assert main(["bench", bench, f"{key}=nope", f"dir={tmp_path}"]) == 2
    assert f"unknown {key} ['nope']" in capsys.readouterr().err


@pytest.mark.parametrize("key", ["tasks", "arms"])
def test_bench_hil_refuses_an_unknown_task_or_arm_in_the_parser(key, capsys, tmp_path):
    assert main(["bench", "hil", f"{key}=push,nope", f"dir={tmp_path}"]) == 2
    assert f"bench hil: {key}='push,nope': give one of" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["-1", "nan"])
def test_bench_hil_refuses_a_dagger_weight_that_is_not_finite_and_non_negative(value, capsys, tmp_path):
    assert main(["bench", "hil", f"dagger_weight={value}", f"dir={tmp_path / 'b'}"]) == 2
    assert "bench hil: dagger_weight must be a finite number >= 0" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()  # refused before the bench made its directory or ran anything


@pytest.mark.parametrize("value", ["0", "1.5", "nan"])
def test_bench_hil_refuses_a_start_range_outside_zero_to_one(value, capsys, tmp_path):
    assert main(["bench", "hil", f"start_range={value}", f"dir={tmp_path / 'b'}"]) == 2
    assert "bench hil: start_range must be in (0, 1]" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()  # refused before the bench made its directory or ran anything


@pytest.mark.e2e
def test_bench_envs_compares_a_peer_env_bare_and_through_the_actor(capsys, tmp_path):
    import json

    assert (
        main(["bench", "envs", "rows=metaworld", "skip_learning=true", "steps=100", "rounds=1", f"dir={tmp_path}"]) == 0
    )
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    row = last["rows"]["metaworld"]
    assert row["actor_transitions_received"] == row["actor_transitions_sent"] == 300  # warm-up 200 + one round
    assert last["actor_over_raw_metaworld"] == row["actor_over_raw"] > 0
    assert "metaworld_pick_place_seconds_to_80" in last and last["libero_dsrl_gain_pts"] is None


def test_bench_hil_takes_the_median_over_seeds_and_says_when_a_speedup_is_only_a_bound():
    from robo_async.bench.hil import run_of, summarize_task

    assert run_of("gym_hil", "hil", 2).extra == ("teleop=virtual", "algo.dagger_weight=1.0", "seed=2")
    assert run_of("push", "no_hil", 0).extra == ("seed=0",)
    rt = run_of("gym_hil", "hil", 1, "rlpd", realtime=True)  # its own name: runs saved in dir= do not mix
    assert rt.name == "gym_hil-hil-rlpd-rt-s1" and "algo=rlpd" in rt.overrides(Path("d"), None)
    assert "task.realtime=true" in rt.overrides(Path("d"), None)
    assert "algo.critics=2" in rt.extra  # as the RLPD rows of bench learn and bench envs
    off = run_of("pick_lift", "hil", 0, dagger_weight=0.0)  # corrections only in the replay: a run of its own
    assert "algo.dagger_weight=0.0" in off.extra and off.name == "pick_lift-hil-dw0-s0"
    assert run_of("pick_lift", "no_hil", 0, dagger_weight=0.0).name == run_of("pick_lift", "no_hil", 0).name
    for arm in ("hil", "no_hil"):  # the start-range curriculum: both arms, a run of their own
        cur = run_of("gym_hil", arm, 1, demos="one_start", start_range=0.1)
        assert "actor.start_range=0.1" in cur.extra and cur.name == f"gym_hil-{arm}-onestart-sr0.1-s1"
    runs = {
        "hil": [
            {"seconds_to_80": 100.0, "intervention_rate_last": 0.05, "env_steps_to_80": 1000},
            {"seconds_to_80": 300.0, "env_steps_to_80": 3000},
            {"seconds_to_80": 200.0, "intervention_rate_last": 0.09, "env_steps_to_80": 2000},
        ],
        "no_hil": [
            {"seconds_to_80": 500.0, "env_steps_to_80": 9000},
            {"seconds_to_80": None, "env_steps": 7000},
            {"seconds_to_80": 420.0, "env_steps_to_80": 5000},
        ],
    }
    got = summarize_task(runs, budget=600)
    assert got["hil_seconds_to_80"] == 200.0 and got["no_hil_seconds_to_80"] == 500.0
    assert got["speedup"] == 2.5 and not got["speedup_is_lower_bound"]
    # a seed that never got there counts as +inf: the median of 9000, 5000 and never is 9000
    assert got["no_hil_env_steps_to_80"] == 9000 and got["speedup_env_steps"] == 4.5
    assert got["robot_minutes_speedup"] == 4.5 and not got["speedup_env_steps_is_lower_bound"]
    assert got["no_hil_env_steps_to_80_range"] == [5000.0, None] and got["hil_seconds_to_80_range"] == [100.0, 300.0]
    assert got["no_hil_seconds_to_80_seeds"] == [500.0, None, 420.0]
    assert got["intervention_rate_last"] == 0.07
    runs["no_hil"] = [
        {"seconds_to_80": None, "env_steps": 7000},
        {"seconds_to_80": None, "env_steps": 7000},
        {"seconds_to_80": 420.0, "env_steps_to_80": 5000},
    ]
    got = summarize_task(runs, budget=600)  # most seeds never got there: the budget stands in, a lower bound
    assert got["no_hil_seconds_to_80"] is None and got["speedup"] == 3.0 and got["speedup_is_lower_bound"]
    # in env steps the seeds that never got there count as their own env steps: 7000 / 2000, a bound too
    assert got["speedup_env_steps"] == 3.5 and got["speedup_env_steps_is_lower_bound"]
    runs["hil"] = [{"seconds_to_80": None}] * 2 + [{"seconds_to_80": 100.0}]
    assert summarize_task(runs, budget=600)["speedup"] is None  # the operator's arm did not get there


def test_bench_weight_push_times_every_variant_against_raw_zmq(capsys):
    """The bench's own path (a real publisher, a real client in another process) on a small
    policy: every variant arrives, and the last line carries the best-of and median ratios."""
    assert main(["bench", "weight-push", "sizes_mb=1", "repeats=2"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {r["variant"] for r in out["rows"]} == {
        "raw zmq",
        "full fp32",
        "fp16",
        "delta 1%",
        "delta 1% undeclared",
        "full fp32 CURVE",
        "delta 1% CURVE",
    }
    assert all(0 < r["seconds"] <= r["median_s"] for r in out["rows"])
    assert set(out["full_over_raw"]) == set(out["full_over_raw_median"]) == {"1.0"}


@pytest.mark.e2e
def test_bench_twin_measures_the_cap_at_the_servos_of_the_so101_twin(capsys, tmp_path):
    """The bench's own path on the twin (its own process, LeRobot's so101_follower and leader), with
    tiny budgets: every figure is there and no servo saw a goal change above the safety layer's cap
    (plus the one encoder tick LeRobot's whole-tick goals add)."""
    from robo_async.bench import twin  # noqa: F401  (registers `twin`)

    rc = main(["bench", "twin", "seconds=1", "episodes=1", "episode_s=2", f"dir={tmp_path}"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and out["errors"] == [], out["errors"]
    assert {"max_step_seen_over_cap", "estop_ticks", "watchdog_ms", "jitter_p99_ms", "hil_success"} <= set(out)
    assert 0 < out["max_step_seen_over_cap"] <= 1.0


@pytest.mark.e2e
def test_bench_fuzz_sends_malformed_messages_of_every_kind_to_live_receivers_and_counts_each_drop(capsys):
    """The bench's own path with a tiny budget: a learner, a policy server and a weight client, each
    in its own process, drop every mutant sent (by their own counters), none crashes, and the
    learner stores only the sentinels' rows."""
    from robo_async.transport.wire import KINDS

    assert main(["bench", "fuzz", "messages=12", "round=40"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["messages"] == 3 * 12 * len(KINDS) and out["crashes"] == 0 and out["rows_stored"] == 0
    for name, row in out["targets"].items():
        assert row["dropped"] == row["messages"] == 12 * len(KINDS), name
    learner = out["targets"]["learner"]
    assert learner["store_rows"] == learner["sentinel_rows"] > 0


def test_every_bench_module_is_loaded_where_benches_are_listed():
    """`bench.MODULES` (what run_bench and the docs' benchmark list load) names every module in
    robo_async/bench/ that registers a benchmark."""
    from pathlib import Path

    import robo_async.bench as bench

    here = Path(bench.__file__).parent
    registering = {p.stem for p in here.glob("*.py") if "@register(" in p.read_text() and p.stem != "__init__"}
    assert registering == set(bench.MODULES)


def test_every_bench_ends_with_one_json_line_that_says_where_and_when_it_ran(capsys):
    """Each registering module prints its figures through `bench.emit` (no other last line), and
    the line carries the commit, date, CPU, cores, torch and Python it was measured with."""
    import re
    import subprocess
    from pathlib import Path

    import robo_async.bench as bench

    here = Path(bench.__file__).parent
    for p in here.glob("*.py"):
        text = p.read_text()
        if p.name == "__init__.py":  # emit itself
            continue
        assert not re.search(r"print\(json\.dumps\(", text), f"{p.name} prints its figures itself: use bench.emit"
        if "@register(" in text:
            assert "emit(" in text, f"{p.name} registers a bench but never emits its figures"
    bench.emit({"x": 1})
    line = capsys.readouterr().out.strip().splitlines()[-1]
    out = json.loads(line)
    assert out["x"] == 1
    prov = out["provenance"]
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True)
    assert prov["commit"] == head.stdout.strip() and isinstance(prov["dirty"], bool)
    assert prov["cores"] >= 1 and prov["cpu"] and prov["torch"] and prov["python"].startswith("3.12")
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", prov["date"])

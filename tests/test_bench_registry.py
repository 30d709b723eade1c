"""Every `robo-async bench <name>` reaches its own entry function, which reads its arguments."""

import inspect

import pytest

from robo_async.bench import BENCHES, run_bench
from robo_async.cli import main


def test_each_bench_is_registered_on_its_entry_function():
    with pytest.raises(Exception, match="unknown benchmark"):
        run_bench("nope", {})
    assert {"learn", "learn-reach", "buffer", "hil", "async-inference"} <= set(BENCHES)
    for name, fn in BENCHES.items():
        assert fn.__name__.startswith("bench_"), f"bench {name} is registered on {fn.__name__}"
        assert list(inspect.signature(fn).parameters) == ["args"], name


@pytest.mark.parametrize(("bench", "key"), [("learn", "rows"), ("hil", "runs"), ("envs", "rows")])
def test_unknown_rows_are_one_error_line_before_anything_runs(bench, key, capsys, tmp_path):
    assert main(["bench", bench, f"{key}=nope", f"dir={tmp_path}"]) == 2
    assert f"unknown {key} ['nope']" in capsys.readouterr().err


def test_bench_envs_compares_a_peer_env_bare_and_through_the_actor(capsys, tmp_path):
    import json

    assert main(["bench", "envs", "rows=metaworld", "skip_learning=true", "steps=100", "rounds=1",
                 f"dir={tmp_path}"]) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    row = last["rows"]["metaworld"]
    assert row["actor_transitions_received"] == row["actor_transitions_sent"] == 300  # warm-up 200 + one round
    assert last["actor_over_raw_metaworld"] == row["actor_over_raw"] > 0
    assert "metaworld_pick_place_seconds_to_80" in last and last["libero_dsrl_gain_pts"] is None

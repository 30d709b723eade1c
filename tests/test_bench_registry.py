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


@pytest.mark.parametrize(("bench", "key"), [("learn", "rows"), ("hil", "runs")])
def test_unknown_rows_are_one_error_line_before_anything_runs(bench, key, capsys, tmp_path):
    assert main(["bench", bench, f"{key}=nope", f"dir={tmp_path}"]) == 2
    assert f"unknown {key} ['nope']" in capsys.readouterr().err

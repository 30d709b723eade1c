"""`robo-async buffer inspect|export|import|demos`."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from robo_async.config import UserError

if TYPE_CHECKING:
    from robo_async.buffer.lerobot_io import ImportTarget

USAGE = """usage:
  robo-async buffer inspect <run dir | store dir>
  robo-async buffer export <run dir | store dir> --format lerobot out=<new dir> [table=online] [task=NAME] [fps=30]
                          [videos=true]   (cameras as LeRobot's AV1 videos instead of PNG images)
                          (a run's task, or task=NAME: joints as LeRobot's <motor>.pos, degrees, gripper 0..100)
  robo-async buffer import <run dir | store dir> from=<store | LeRobot dataset> [table=demos] [task=NAME]
                          (task=NAME: a dataset in LeRobot's motor units is converted to that task's rad)
  robo-async buffer demos out=<store dir> [episodes=50] [task=reach] [seed=0] [max_step=<rad per tick>]
                          [hold=false]   (true: on to episode_ticks, holding the goal after success)
                          [miss=false]   (true: the scripted near miss, pick_lift: failure episodes)
                          [cameras=front,wrist] [image_size=64]          (scripted expert)
                          [task.<key>=...]  (the task's keys, e.g. task=gym task.env_id=... task.expert=mod:fn)"""


def _split(args: list[str]) -> tuple[list[str], dict[str, str]]:
    pos, kv = [], {}
    it = iter(args)
    for a in it:
        if a == "--format":
            kv["format"] = next(it, "")
        elif a.startswith("--format="):
            kv["format"] = a.split("=", 1)[1]
        elif "=" in a:
            k, v = a.split("=", 1)
            kv[k] = v
        else:
            pos.append(a)
    return pos, kv


def _allow(kv: dict[str, str], allowed: set[str]) -> None:
    unknown = set(kv) - allowed
    if unknown:
        raise UserError(f"unknown option(s) {sorted(unknown)}; allowed: {sorted(allowed)}")


class _Ticker:
    """A progress line every second on long work."""

    def __init__(self, what: str) -> None:
        self.what, self.next = what, time.monotonic() + 1.0

    def __call__(self, n: int) -> None:
        if time.monotonic() >= self.next:
            self.next = time.monotonic() + 1.0
            print(f"  {self.what}: {n:,}", flush=True)


def export_target(path: Path, task: str | None = None) -> ImportTarget | None:
    """What an export of the store at `path` is written for: a run directory's task and robot
    (its config.yaml), else the task named `task` (its configs/task defaults), else None (rows as stored)."""
    run_cfg = Path(path) / "config.yaml"
    if run_cfg.exists():
        import yaml

        from robo_async.launch.tasks import import_target, task_args

        cfg = yaml.safe_load(run_cfg.read_text())
        return import_target(task_args(dict(cfg["task"]), dict(cfg["robot"]) if cfg.get("robot") else None))
    return named_task_target(task) if task is not None else None


def named_task_target(name: str) -> ImportTarget:
    """The units target of the task `name` as configured (configs/task/<name>.yaml), in the simulator."""
    from robo_async.config import compose_config
    from robo_async.launch.tasks import import_target, task_args

    return import_target(task_args(dict(compose_config([f"task={name}"]).task)))


def _target(resolve: Callable[[], ImportTarget | None]) -> ImportTarget | None:
    """A task's units target (`resolve()`), its config errors as one line."""
    from robo_async.launch.tasks import ConfigError

    try:
        return resolve()
    except ConfigError as e:
        raise UserError(str(e)) from None


def main(args: list[str]) -> int:
    from robo_async.buffer import tools
    from robo_async.buffer.lmdb_store import TABLES, PersistentReplayStore, StoreError
    from robo_async.buffer.store import ReplayError

    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    cmd, (pos, kv) = args[0], _split(args[1:])
    try:
        if cmd == "demos":
            # task.<key>=<value>: the task's own keys (e.g. task.env_id=, task.expert=module:callable)
            task_keys = [f"{k}={v}" for k, v in kv.items() if k.startswith("task.")]
            _allow(
                {k: v for k, v in kv.items() if not k.startswith("task.")},
                {"out", "episodes", "task", "seed", "max_step", "cameras", "image_size", "hold", "miss"},
            )
            if "out" not in kv:
                raise UserError("buffer demos needs out=<store dir>")
            from robo_async.config import compose_config
            from robo_async.launch.builders import task_args

            over = [f"task={kv.get('task', 'reach')}"]
            if kv.get("cameras"):  # frames too, for runs from pixels (the demos must match the run's data)
                over.append(f"task.cameras=[{kv['cameras']}]")
            if kv.get("image_size"):
                over.append(f"task.image_size={int(kv['image_size'])}")
            targs = task_args(compose_config(over + task_keys).task)
            from robo_async.launch.experts import record_demos

            try:
                step = float(kv["max_step"]) if kv.get("max_step") else None
            except ValueError:
                raise UserError(f"buffer demos max_step={kv['max_step']!r}: give rad per tick, e.g. 0.05") from None
            hold, miss = kv.get("hold", "false").lower(), kv.get("miss", "false").lower()
            if hold not in ("true", "false") or miss not in ("true", "false"):
                raise UserError(
                    f"buffer demos hold= and miss= are true or false, not {kv.get('hold')!r}, {kv.get('miss')!r}"
                )
            # hold=true: each episode runs to episode_ticks, the expert holding the goal after success (many
            # success frames: what a success classifier learns from, as an operator holds the goal a while)
            n, rate = record_demos(
                targs,
                Path(kv["out"]),
                int(kv.get("episodes", 50)),
                int(kv.get("seed", 0)),
                progress=_Ticker("episodes"),
                max_step=step,
                until_terminated=hold == "false",
                miss=miss == "true",
            )
            print(
                f"recorded {n:,} expert transitions ({rate:.0%} successful episodes) into table 'demos' "
                f"of {kv['out']}\nuse them: robo-async train buffer.imports='[{{path: {kv['out']}, table: demos}}]'"
            )
            return 0
        if len(pos) != 1:
            raise UserError(f"buffer {cmd} needs one directory\n{USAGE}")
        path = Path(pos[0])
        if cmd != "import" and not path.exists():
            raise UserError(f"{path} does not exist")
        if cmd == "inspect":
            _allow(kv, set())
            print(tools.inspect(path))
            return 0
        if cmd == "export":
            _allow(kv, {"format", "out", "table", "task", "fps", "videos"})
            if kv.get("format", "lerobot") != "lerobot":
                raise UserError(f"export format '{kv['format']}' unknown; formats: lerobot")
            if "out" not in kv:
                raise UserError("buffer export needs out=<new directory>")
            target = _target(lambda: export_target(path, kv.get("task")))
            eps, frames = tools.export(
                path,
                Path(kv["out"]),
                kv.get("table", "online"),
                kv.get("task"),
                int(kv["fps"]) if "fps" in kv else None,
                videos=kv.get("videos", "false").lower() in ("1", "true", "yes"),
                target=target,
            )
            if target is None:
                units = "values as stored (task=<name>: joints in LeRobot's motor names and units)"
            elif target.spec.control_mode == "joint_position":
                units = f"joints as LeRobot's <motor>.pos (degrees, gripper 0..100) of task {target.task}"
            else:
                units = "values as stored"
            print(f"wrote a LeRobotDataset v3 with {eps:,} episodes, {frames:,} frames to {kv['out']}; {units}")
            return 0
        if cmd == "import":
            _allow(kv, {"from", "table", "task"})
            table = kv.get("table", "demos")
            if table not in TABLES:
                raise UserError(f"unknown table '{table}'; tables: {list(TABLES)}")
            if "from" not in kv:
                raise UserError("buffer import needs from=<store or LeRobot dataset>")
            target = _target(lambda: named_task_target(kv["task"])) if kv.get("task") else None
            store = PersistentReplayStore(tools.store_path(path)).open()
            try:
                n = tools.import_source(store, Path(kv["from"]), table, _Ticker("transitions"), target=target)
            finally:
                store.close()
            print(f"imported {n:,} new transitions into table '{table}' of {store.path}")
            return 0
        raise UserError(f"unknown buffer command '{cmd}'\n{USAGE}")
    except (StoreError, ReplayError, ValueError, FileNotFoundError, FileExistsError) as e:
        raise UserError(str(e)) from None

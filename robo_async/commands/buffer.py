"""`robo-async buffer inspect|export|import|demos`: replay stores: counts, LeRobot export and
import, scripted-expert demonstrations.

- inspect: counts per table, episodes, success, disk, last commit, evictions;
- export --format lerobot: a LeRobotDataset v3 of one table (a run's task, or task=NAME: joints as
  LeRobot's <motor>.pos, degrees, gripper 0..100);
- import: a store or a LeRobotDataset v3 into a table (task=NAME: a dataset in LeRobot's motor units
  is converted to that task's rad); importing the same source twice adds nothing;
- demos: scripted-expert demonstrations into the `demos` table of a store; `task.<key>=...` sets the
  task's keys (e.g. task=gym task.env_id=MyEnv-v0 task.expert=mypkg.experts:pick)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from robo_async.commands.args import arg, help_text, parse, parse_known, refuse, usage, wants_help
from robo_async.config import UserError

if TYPE_CHECKING:
    from robo_async.buffer.lerobot_io import ImportTarget


@dataclass(frozen=True, kw_only=True)
class InspectArgs:
    """`robo-async buffer inspect`."""

    path: Path = arg(metavar="run dir | store dir", help="a run directory or a store directory", positional=True)


@dataclass(frozen=True, kw_only=True)
class ExportArgs:
    """`robo-async buffer export`."""

    path: Path = arg(metavar="run dir | store dir", help="a run directory or a store directory", positional=True)
    format: Literal["lerobot"] = arg("lerobot", help="the dataset format (also --format lerobot)")
    out: Path = arg(metavar="new dir", help="a new directory for the dataset")
    table: str = arg("online", help="the table to export")
    task: str | None = arg(
        None, metavar="task", help="the task whose units the joints are written in (default: the run's)"
    )
    fps: int | None = arg(None, help="the dataset's frame rate (default: the task's)")
    videos: bool = arg(False, help="cameras as LeRobot's AV1 videos instead of PNG images")


@dataclass(frozen=True, kw_only=True)
class ImportArgs:
    """`robo-async buffer import`."""

    path: Path = arg(
        metavar="run dir | store dir", help="a run directory or a store directory (created if new)", positional=True
    )
    source: Path = arg(metavar="store | LeRobot dataset", help="a store or a LeRobot dataset to import", key="from")
    table: str = arg("demos", help="the table to import into")
    task: str | None = arg(
        None, metavar="task", help="the task a dataset in LeRobot's motor units is converted to (rad)"
    )


@dataclass(frozen=True, kw_only=True)
class DemosArgs:
    """`robo-async buffer demos`; `task.<key>=...` words set the task's own keys."""

    out: Path = arg(metavar="store dir", help="the store directory (new or existing)")
    episodes: int = arg(50, help="episodes to record")
    task: str = arg("reach", help="the task")
    seed: int = arg(0, help="the first episode's seed")
    max_step: float | None = arg(
        None, metavar="rad per tick", help="the expert's largest step in rad per tick (default: the task's)"
    )
    hold: bool = arg(False, help="on to episode_ticks, the expert holding the goal after success")
    miss: bool = arg(False, help="the scripted near miss (pick_lift): labelled failure episodes")
    cameras: tuple[str, ...] = arg(
        (), metavar="front,wrist", help="camera frames too, e.g. front,wrist (for runs from pixels)"
    )
    image_size: int | None = arg(None, help="the frames' size in pixels (default: the task's)")


SUBCOMMANDS: dict[str, type] = {"inspect": InspectArgs, "export": ExportArgs, "import": ImportArgs, "demos": DemosArgs}


def usage_lines() -> str:
    """This command's usage, one line per subcommand, for `robo-async --help`."""
    return "\n".join(usage(cls, f"buffer {name}") for name, cls in SUBCOMMANDS.items())


def help_all() -> str:
    """`robo-async buffer --help`: what each subcommand does, then each one's keys."""
    parts = ["usage:", *(f"  {u}" for u in usage_lines().splitlines()), "", (__doc__ or "").strip()]
    for name, cls in SUBCOMMANDS.items():
        parts += ["", help_text(cls, f"buffer {name}", None).replace("\n\n\n", "\n")]
    return "\n".join(parts)


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


def main(argv: list[str]) -> int:
    """Run one subcommand: `buffer <inspect|export|import|demos> ...`."""
    from robo_async.buffer.lmdb_store import StoreError
    from robo_async.buffer.store import ReplayError

    if not argv or argv[0] in ("-h", "--help"):
        print(help_all())
        return 0
    cmd, rest = argv[0], _format_flag(argv[1:])
    if cmd not in SUBCOMMANDS:
        raise UserError(
            f"unknown buffer command '{cmd}'; commands: {', '.join(SUBCOMMANDS)} (robo-async buffer --help)"
        )
    if wants_help(rest):
        print(help_text(SUBCOMMANDS[cmd], f"buffer {cmd}", SUBCOMMANDS[cmd].__doc__))
        return 0
    try:
        if cmd == "demos":
            opts, extra = parse_known(DemosArgs, rest, "buffer demos")
            # task.<key>=<value>: the task's own keys (e.g. task.env_id=, task.expert=module:callable)
            refuse(DemosArgs, [a for a in extra if not a.startswith("task.")], "buffer demos")
            return demos(opts, [a for a in extra if a.startswith("task.")])
        if cmd == "inspect":
            return inspect(parse(InspectArgs, rest, "buffer inspect"))
        if cmd == "export":
            return export(parse(ExportArgs, rest, "buffer export"))
        return import_(parse(ImportArgs, rest, "buffer import"))
    except (StoreError, ReplayError, ValueError, FileNotFoundError, FileExistsError) as e:
        raise UserError(str(e)) from None


def _format_flag(argv: list[str]) -> list[str]:
    """`--format lerobot` (export's documented spelling) as the key `format=lerobot`."""
    out, it = [], iter(argv)
    for a in it:
        if a == "--format":
            out.append(f"format={next(it, '')}")
        elif a.startswith("--format="):
            out.append(a[2:])
        else:
            out.append(a)
    return out


def demos(opts: DemosArgs, task_keys: list[str]) -> int:
    """Scripted-expert episodes into the `demos` table of the store at `opts.out`."""
    from robo_async.config import compose_config
    from robo_async.launch.builders import task_args
    from robo_async.launch.experts import record_demos

    over = [f"task={opts.task}"]
    if opts.cameras:  # frames too, for runs from pixels (the demos must match the run's data)
        over.append(f"task.cameras=[{','.join(opts.cameras)}]")
    if opts.image_size:
        over.append(f"task.image_size={opts.image_size}")
    targs = task_args(compose_config(over + task_keys).task)
    # hold=true: each episode runs to episode_ticks, the expert holding the goal after success (many
    # success frames: what a success classifier learns from, as an operator holds the goal a while)
    n, rate = record_demos(
        targs,
        opts.out,
        opts.episodes,
        opts.seed,
        progress=_Ticker("episodes"),
        max_step=opts.max_step,
        until_terminated=not opts.hold,
        miss=opts.miss,
    )
    print(
        f"recorded {n:,} expert transitions ({rate:.0%} successful episodes) into table 'demos' "
        f"of {opts.out}\nuse them: robo-async train buffer.imports='[{{path: {opts.out}, table: demos}}]'"
    )
    return 0


def _existing(path: Path) -> Path:
    if not path.exists():
        raise UserError(f"{path} does not exist")
    return path


def inspect(opts: InspectArgs) -> int:
    """Counts per table, episodes, success, disk, last commit."""
    from robo_async.buffer import tools

    print(tools.inspect(_existing(opts.path)))
    return 0


def export(opts: ExportArgs) -> int:
    """One table as a LeRobotDataset v3."""
    from robo_async.buffer import tools

    path = _existing(opts.path)
    target = _target(lambda: export_target(path, opts.task))
    eps, frames = tools.export(path, opts.out, opts.table, opts.task, opts.fps, videos=opts.videos, target=target)
    if target is None:
        units = "values as stored (task=<name>: joints in LeRobot's motor names and units)"
    elif target.spec.control_mode == "joint_position":
        units = f"joints as LeRobot's <motor>.pos (degrees, gripper 0..100) of task {target.task}"
    else:
        units = "values as stored"
    print(f"wrote a LeRobotDataset v3 with {eps:,} episodes, {frames:,} frames to {opts.out}; {units}")
    return 0


def import_(opts: ImportArgs) -> int:
    """A store or a LeRobotDataset v3 into a table of the store at `opts.path`."""
    from robo_async.buffer import tools
    from robo_async.buffer.lmdb_store import TABLES, PersistentReplayStore

    if opts.table not in TABLES:
        raise UserError(f"unknown table '{opts.table}'; tables: {list(TABLES)}")
    target = _target(lambda: named_task_target(opts.task)) if opts.task else None
    store = PersistentReplayStore(tools.store_path(opts.path)).open()
    try:
        n = tools.import_source(store, opts.source, opts.table, _Ticker("transitions"), target=target)
    finally:
        store.close()
    print(f"imported {n:,} new transitions into table '{opts.table}' of {store.path}")
    return 0

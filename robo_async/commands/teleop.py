"""`robo-async teleop`: demonstrations from people, recorded by the one control loop behind the
safety layer: a leader arm (or another teleop) drives, episodes are labelled by the operator's
success/failure keys (re-record drops one) and stored in a store's table; with `dataset=`, also
written as a new LeRobotDataset v3. Its own keys (below) beside Hydra overrides of the robot,
teleop and task. Scripted-expert demonstrations are in `launch/experts.py`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from robo_async.actor.adder import Adder
from robo_async.actor.loop import ControlLoop
from robo_async.actor.loop_config import LoopConfig
from robo_async.buffer.lmdb_store import PersistentReplayStore, StoreConfig
from robo_async.buffer.tools import IMPORT_ACTOR_BASE
from robo_async.commands.args import arg, groups_help, help_text, parse_known, usage, wants_help
from robo_async.config import UserError, load_config
from robo_async.launch.builders import TaskArgs
from robo_async.launch.experts import StoreOutlet
from robo_async.transport.wire import EpisodeStats, Heartbeat


class EpisodeRecorder:
    """A loop sink for teleop sessions: an episode's transitions are kept until it ends, then
    written to the store (an Adder into a table) unless the operator asked to record it again;
    `kept` counts the episodes stored. Bounded by one episode."""

    def __init__(self, adder: Adder, on_episode: Callable[[EpisodeStats, bool], None]) -> None:
        self.adder, self.on_episode = adder, on_episode
        self._rows: list[tuple[tuple, dict]] = []
        self.kept = self.discarded = 0

    def add(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        self._rows.append((args, kwargs))

    def send_episode(self, stats: EpisodeStats) -> None:
        keep = stats.label != "rerecord"
        if keep:
            for args, kwargs in self._rows:
                self.adder.add(*args, **kwargs)
            self.adder.send_episode(stats)
            self.kept += 1
        else:
            self.discarded += 1
        self._rows = []
        self.on_episode(stats, keep)

    def send_heartbeat(self, beat: Heartbeat) -> None:
        pass

    def flush(self) -> None:
        self.adder.flush()


def teleop_session(
    targs: TaskArgs,
    out: Path,
    episodes: int,
    table: str = "demos",
    realtime: bool = True,
    seed: int = 0,
    on_episode: Callable[[EpisodeStats, bool], None] | None = None,
) -> EpisodeRecorder:
    """`robo-async teleop`: the operator drives the robot (through SafeRobot, the one control loop)
    for `episodes` kept episodes, labelled by their success/failure/re-record keys, into `out`."""
    import threading

    from robo_async.launch.builders import make_safe_robot, make_teleops

    robot = make_safe_robot(targs)
    teleops = make_teleops(targs, robot)
    if not teleops:
        raise ValueError("robo-async teleop needs a teleop (teleop=so101_leader, sim_leader or virtual ...)")
    store = PersistentReplayStore(out, StoreConfig()).open()
    actor = IMPORT_ACTOR_BASE - 2  # teleop sessions are numbered apart from live actors and expert demos
    done = threading.Event()

    def episode(stats: EpisodeStats, kept: bool) -> None:
        if recorder.kept >= episodes:
            done.set()
        if on_episode is not None:
            on_episode(stats, kept)

    recorder = EpisodeRecorder(Adder(actor, StoreOutlet(store, table), 256, start_seq=store.ack(actor)), episode)
    for t in teleops:
        t.connect()
    try:
        robot.connect()
        try:
            from policies.scripted import HoldPolicy

            ControlLoop(
                robot,
                HoldPolicy(robot.spec),
                LoopConfig(
                    episode_ticks=targs.episode_ticks(),
                    seed=seed,
                    realtime=realtime,
                    eval_every=0,
                    inference="inline",
                    teleop_drives=True,
                    warmup_inference=False,
                ),
                sink=recorder,
                teleops=tuple(teleops),
            ).run(done)
        finally:
            robot.close()
        store.flush()
    finally:
        for t in teleops:
            t.close()
        store.close()
    return recorder


TAIL = "teleop=<device> [overrides]"  # the Hydra overrides beside the keys


@dataclass(frozen=True, kw_only=True)
class TeleopArgs:
    """The keys of `robo-async teleop` itself; every other word is a Hydra override."""

    out: Path = arg(metavar="store dir", help="the store directory (new or existing) the episodes go to")
    episodes: int = arg(10, help="kept episodes to record")
    table: str = arg("demos", help="the store's table")
    dataset: Path | None = arg(None, metavar="new dir", help="also write a new LeRobotDataset v3 here")
    fps: float | None = arg(None, help="the dataset's frame rate (default: the task's rate)")


def main(argv: list[str]) -> int:
    """A teleop session: the operator drives; success/failure keys end episodes, re-record drops one."""
    from robo_async.buffer import tools
    from robo_async.buffer.lmdb_store import StoreError
    from robo_async.launch.builders import task_args
    from robo_async.launch.mirrors import ConfigError, as_dict

    if wants_help(argv):
        print(help_text(TeleopArgs, "teleop", __doc__, extra=groups_help(), tail=TAIL))
        return 0
    opts, overrides = parse_known(TeleopArgs, argv, "teleop")
    cfg = load_config(overrides)
    try:
        targs = task_args(as_dict(cfg.task), cfg.robot, as_dict(cfg.safety), cfg.teleop)
    except ConfigError as e:
        raise UserError(str(e)) from None
    realtime = targs.robot is not None or targs.realtime
    labels: dict[str, int] = {}

    def on_episode(stats: EpisodeStats, kept: bool) -> None:
        labels[stats.label or "unlabelled"] = labels.get(stats.label or "unlabelled", 0) + 1
        what = "kept" if kept else "discarded: record it again"
        print(
            f"episode {stats.episode}: {stats.length} ticks, {stats.label or 'no label'}"
            f"{' (success)' if stats.success else ''}, {what}",
            flush=True,
        )

    print(
        f"teleop session: {opts.episodes} episodes into {opts.out} (table {opts.table}); "
        f"success/failure keys end an episode, re-record discards it",
        flush=True,
    )
    try:
        rec = teleop_session(targs, opts.out, opts.episodes, opts.table, realtime, int(cfg.seed), on_episode)
    except (ConfigError, StoreError, ValueError) as e:
        raise UserError(str(e)) from None
    print(f"recorded {rec.kept} episodes ({rec.discarded} discarded), labels {labels}, into {opts.out}")
    if opts.dataset is not None:
        fps = opts.fps if opts.fps is not None else float(targs.options.get("hz", 30))
        eps, frames = tools.export(opts.out, opts.dataset, opts.table, targs.name, int(fps))
        print(f"wrote a LeRobotDataset v3 with {eps} episodes, {frames} frames to {opts.dataset}")
    return 0


def usage_lines() -> str:
    """This command's usage, for `robo-async --help`."""
    return f"{usage(TeleopArgs, 'teleop')} {TAIL}"

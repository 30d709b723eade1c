"""`robo-async`: train, eval, bench. Hydra composes the config; errors are one clear line."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from omegaconf import OmegaConf

from robo_async.config import UserError, compose_config

USAGE = """usage: robo-async <command> [key=value ...]

commands:
  train [overrides]                    train (Hydra overrides, e.g. actors=2 task.cameras=[front])
  train resume=<run dir> [overrides]   continue a run from its last checkpoint
  eval checkpoint=<ckpt|run dir|policy dir> [episodes=20] [inference=<mode>] [video=out.mp4] [delay_ms=]
  bc policy=flow [overrides]           behaviour cloning of a chunk policy from expert demos, then an
                                       evaluation with async inference (actor.inference, policy.inference_delay_ms)
  buffer inspect|export|import|demos   replay stores: counts, LeRobot export/import, expert demos
  reward train from=<run|store> cameras=[front]   a success classifier on camera frames (a learned reward)
  teleop out=<store> teleop=<device> [episodes=10] [dataset=<new dir>] [overrides]
                                       drive a robot with a teleop, record labelled episodes (store + LeRobotDataset)
  serve [overrides]                    the config's policy for edge actors without a GPU (serve.port=5560,
                                       policy.path=, serve.weights=tcp://learner:<weights_port>); actors use
                                       actor.inference_server=tcp://<host>:5560
  keys dir=<keys dir> actors=2         CURVE key pairs: the learner's and one per actor id (transport.keys=<dir>)
  twin so101 [dir=<dir>] [leader=true]  a twin of an SO-101's servo bus on pseudo-terminals: LeRobot's own
                                       so101_follower/so101_leader drive it; prints the robot.* overrides
  resources [inventory=robots.yaml] [sims=reach:4] [ray=true]
                                       robots, buses, cameras, GPUs, sims; who holds them
  bench learn-reach [budget_s=300]     time and env steps to 90% success, actor overhead
  bench buffer                         replay store: ingest, sample latency, recovery, crash trials
  bench multi-actor [seconds=30]       env steps/s and updates/s with 1, 2, 4 actors; lease latency
  bench weight-push [sizes_mb=4,40,400,2048]   weight pushes: full, fp16, delta, CURVE, against raw ZMQ
  bench soak [minutes=20] [actors=4]   a job under chaos (kill -9, cut links): lost/duplicated rows, recovery, RSS
  bench async-inference [episodes=5]   sync vs async chunk inference at 0-300 ms latency: speed, reaction, jitter
  bench remote-inference [episodes=4]  the policy behind a server through a delay/loss proxy; batching gain
  bench twin [seconds=10]              safety on the SO-101 twin: largest step vs the cap, e-stop, watchdog, jitter, HIL
  bench envs [rows=gym_hil,metaworld]  peer environments: bare vs actor steps/s, seconds to 80% from 20 demos
  bench fuzz [messages=100000]         mutated messages of every kind against a live learner, server, weight client
  bench chaos [minutes=60] [actors=3]  kill -9, SIGSTOP, a dropped link, a hostile peer: lost, dup, crashes, ack stalls
"""


def _kv(args: list[str]) -> dict[str, str]:
    out = {}
    for a in args:
        if "=" not in a:
            raise UserError(f"expected key=value, got '{a}'")
        k, v = a.split("=", 1)
        out[k] = v
    return out


def _keys(args: dict[str, str]) -> int:
    from robo_async.transport.curve import MAX_LANES, KeysError, create_keys

    unknown = set(args) - {"dir", "actors", "ids", "lanes"}
    if unknown or "dir" not in args:
        raise UserError(
            "usage: robo-async keys dir=<keys dir> actors=N (ids 0..N-1) | ids=[3,7] "
            f"[lanes=1]   (lanes: the robots each actor steps, actor.envs; 1 to {MAX_LANES})"
        )
    try:
        ids = (
            [int(x) for x in args["ids"].strip("[]").split(",") if x.strip()]
            if "ids" in args
            else list(range(int(args.get("actors", "1"))))
        )
        lanes = int(args.get("lanes", "1"))
    except ValueError:
        raise UserError(f"keys: actors and lanes must be counts and ids a list of integers, got {args}") from None
    if any(i < 0 for i in ids):
        raise UserError("keys: actor ids are >= 0")
    d = Path(args["dir"])
    try:
        written = create_keys(d, ids, lanes)
    except KeysError as e:
        raise UserError(f"keys: {e}") from None
    print(
        f"{len(written)} key files written under {d} (existing ones kept); actor ids {ids}, each issued for "
        f"{lanes} robot stream(s) (actor.envs <= {lanes})"
    )
    print(f"  learner machine: {d}/learner.key_secret, {d}/learner.key and {d}/authorized/ (the allow-list)")
    print(f"  actor <id> machine: {d}/learner.key and {d}/actors/actor-<id>.key_secret, nothing else")
    print(f"  train with: robo-async train transport.keys={d} transport.host=0.0.0.0 ...")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    import signal

    # Ctrl-C stops a run in order (final checkpoint), also when started from a process that
    # ignores SIGINT (the ignore would otherwise be inherited and the run could not be stopped)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    cmd, rest = argv[0], argv[1:]
    try:
        if cmd == "train":
            from robo_async.train import train

            if any(a == "--cfg" or a.startswith("--cfg=") for a in rest):
                # the resolved, typed config (overrides applied), nothing started; Hydra's own spelling
                # (`--cfg job`, `--cfg=all`) is taken too
                from robo_async.train import typed

                cfg = compose_config(_without_cfg_flag(rest))
                typed(cfg)
                print(OmegaConf.to_yaml(cfg, resolve=True))
                return 0
            return train(rest)
        if cmd == "bc":
            from robo_async.imitate import bc

            return bc(rest)
        if cmd == "eval":
            return _eval(_kv(rest))
        if cmd == "resources":
            return _resources(_kv(rest))
        if cmd == "serve":
            from robo_async.serve_cli import serve

            return serve(rest)
        if cmd == "keys":
            return _keys(_kv(rest))
        if cmd == "buffer":
            from robo_async.buffer_cli import main as buffer_main

            return buffer_main(rest)
        if cmd == "teleop":
            return _teleop(rest)
        if cmd == "reward":
            from robo_async.reward import main as reward_main

            return reward_main(rest)
        if cmd == "twin":
            from hardware.twin.server import main as twin_main

            return twin_main(rest)
        if cmd == "bench":
            from robo_async.bench import run_bench

            if not rest:
                raise UserError("bench needs a name: learn-reach")
            return run_bench(rest[0], _kv(rest[1:]))
        raise UserError(f"unknown command '{cmd}'; run `robo-async --help`")
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _teleop(rest: list[str]) -> int:
    """A teleop session: the operator drives; success/failure keys end episodes, re-record drops one."""
    from robo_async.buffer import tools
    from robo_async.buffer.lmdb_store import StoreError
    from robo_async.launch.builders import task_args
    from robo_async.launch.schema import ConfigError, as_dict
    from robo_async.record import teleop_session
    from robo_async.train import typed

    ours = {
        a.split("=", 1)[0]: a.split("=", 1)[1]
        for a in rest
        if a.split("=", 1)[0] in ("out", "episodes", "dataset", "fps", "table")
    }
    overrides = [a for a in rest if a.split("=", 1)[0] not in ours]
    if "out" not in ours:
        raise UserError("teleop needs out=<store dir> (new or existing) and a teleop=<device>")
    try:
        episodes = int(ours.get("episodes", 10))
    except ValueError:
        raise UserError(f"teleop episodes={ours['episodes']!r}: give a number") from None
    cfg = typed(compose_config(overrides))
    try:
        targs = task_args(as_dict(cfg.task), cfg.robot, as_dict(cfg.safety), cfg.teleop)
    except ConfigError as e:
        raise UserError(str(e)) from None
    realtime = targs.robot is not None or targs.realtime
    labels: dict[str, int] = {}

    def on_episode(stats, kept: bool) -> None:
        labels[stats.label or "unlabelled"] = labels.get(stats.label or "unlabelled", 0) + 1
        what = "kept" if kept else "discarded: record it again"
        print(
            f"episode {stats.episode}: {stats.length} ticks, {stats.label or 'no label'}"
            f"{' (success)' if stats.success else ''}, {what}",
            flush=True,
        )

    out = Path(ours["out"])
    print(
        f"teleop session: {episodes} episodes into {out} (table {ours.get('table', 'demos')}); "
        f"success/failure keys end an episode, re-record discards it",
        flush=True,
    )
    try:
        rec = teleop_session(targs, out, episodes, ours.get("table", "demos"), realtime, int(cfg.seed), on_episode)
    except (ConfigError, StoreError, ValueError) as e:
        raise UserError(str(e)) from None
    print(f"recorded {rec.kept} episodes ({rec.discarded} discarded), labels {labels}, into {out}")
    if ours.get("dataset"):
        eps, frames = tools.export(
            out,
            Path(ours["dataset"]),
            ours.get("table", "demos"),
            targs.name,
            int(float(ours.get("fps", targs.options.get("hz", 30)))),
        )
        print(f"wrote a LeRobotDataset v3 with {eps} episodes, {frames} frames to {ours['dataset']}")
    return 0


def _resources(args: dict[str, str]) -> int:
    from hal.leases import LeaseManager
    from hal.resources import InventoryError, discover

    unknown = set(args) - {"inventory", "sims", "ray", "fleet", "address"}
    if unknown:
        raise UserError(
            f"unknown option(s) {sorted(unknown)}; use inventory= sims=task:count,... ray=true "
            f"fleet=true [address=<ray head>]"
        )
    if args.get("fleet", "false") == "true":
        import datetime as dt

        import ray

        from robo_async.launch.fleet import fleet_table, join_cluster

        address = args.get("address", "auto")
        try:
            join_cluster(address, logging_level="ERROR")
        except ConnectionError as e:
            raise UserError(str(e)) from None
        table = fleet_table()
        print(f"fleet leases (the lease authority of the Ray cluster at {address}):")
        if not table:
            print("  no leases held, nobody waiting")
        for rid, row in table.items():
            since = dt.datetime.fromtimestamp(row["since"]).isoformat(timespec="seconds") if row["since"] else "-"
            print(
                f"  {rid:<36}held by {row['holder'] or '-'} since {since}; waiting: "
                f"{', '.join(row['waiting']) or 'nobody'}"
            )
        ray.shutdown()
    sims = {}
    for part in filter(None, args.get("sims", "reach:1").split(",")):
        task, _, n = part.partition(":")
        sims[task] = int(n or 1)
    try:
        found = discover(args.get("inventory"), sims)
    except InventoryError as e:
        raise UserError(str(e)) from None
    leases = LeaseManager()
    print(f"{'kind':<8}{'id':<36}{'where':<24}{'health':<28}holder")
    for r in found:
        h = leases.holder(r.id)
        holder = f"{h.get('job')} (pid {h.get('pid')}, since {h.get('since')})" if h else "-"
        print(f"{r.kind:<8}{r.id:<36}{r.where:<24}{r.health:<28}{holder}")
    print(f"leases in {leases.directory}")
    if args.get("ray", "false") == "true":
        import json

        robots = {r.id: 1 for r in found if r.kind in ("robot", "teleop", "camera") and r.health == "ok"}
        print(f"ray start --address=<head>:6379 --resources='{json.dumps(robots)}'")
    return 0


def _eval(args: dict[str, str]) -> int:
    from robo_async.evaluate import CheckpointMismatch, evaluate
    from robo_async.launch.builders import ConfigError
    from robo_async.learner.checkpoint import CheckpointError

    allowed = {"checkpoint", "episodes", "video", "video_size", "task", "seed", "inference", "delay_ms"}
    unknown = set(args) - allowed
    if unknown:
        raise UserError(f"unknown eval option(s) {sorted(unknown)}; use {', '.join(f'{a}=' for a in sorted(allowed))}")
    if "checkpoint" not in args:
        raise UserError("eval needs checkpoint=<checkpoint file, run directory or policy directory>")
    ckpt = Path(args["checkpoint"])
    if not ckpt.exists():
        raise UserError(f"checkpoint {ckpt} does not exist")
    try:
        res = evaluate(
            ckpt,
            int(args.get("episodes", 20)),
            video=Path(args["video"]) if "video" in args else None,
            task=args.get("task"),
            seed=int(args.get("seed", 10_000)),
            mode=args.get("inference"),
            video_size=int(args.get("video_size", 384)),
            inference_delay_ms=float(args["delay_ms"]) if "delay_ms" in args else None,
        )
    except (CheckpointError, CheckpointMismatch, ConfigError) as e:
        raise UserError(str(e)) from None
    except ValueError as e:
        raise UserError(f"eval: {e}") from None
    print(
        f"success rate {res.success_rate:.0%} over {res.episodes} episodes "
        f"(mean return {res.mean_return:.1f}, mean length {res.mean_length:.1f} ticks; inference {res.mode}"
        + (
            f", {res.missed_ticks} missed ticks, lateness p99 {res.lateness_p99_ms:.2f} ms"
            if res.mode != "inline"
            else ""
        )
        + ")"
    )
    if res.video:
        print(f"video: {res.video}")
    return 0


def _without_cfg_flag(args: list[str]) -> list[str]:
    """The overrides of `train --cfg [job|hydra|all] [overrides]` (or `--cfg=job`)."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            if a in ("job", "hydra", "all"):
                continue
        if a == "--cfg":
            skip = True
            continue
        if a.startswith("--cfg="):
            continue
        out.append(a)
    return out


if __name__ == "__main__":
    sys.exit(main())

"""`robo-async train`: compose the config, make the run directory, launch, evaluate, report.
`resume=<run dir>` continues a run from its last checkpoint (counters, weights, optimisers,
targets, temperature, actor seq numbers); a new run into a run_dir that holds one is refused.
`--cfg [job|all]` prints the resolved, typed config and starts nothing. Ctrl-C stops all
processes and writes a final checkpoint."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from robo_async.commands.args import hydra_help, wants_help
from robo_async.config import UserError, compose_config
from robo_async.launch.builders import ConfigError, build_plan, new_run_dir
from robo_async.launch.local import RunFailed, RunResult, launch_local
from robo_async.launch.mirrors import as_dict
from robo_async.launch.progress import ProgressDisplay
from robo_async.launch.schema import TrainConfig, typed_config
from robo_async.launch.tasks import import_target
from robo_async.learner import checkpoint
from robo_async.learner.metrics import plot_learning_curve

USAGE = """usage: robo-async train [overrides]
       robo-async train resume=<run dir> [overrides]
       robo-async train --cfg [job|all] [overrides]"""


def usage_lines() -> str:
    """This command's usage, for `robo-async --help`."""
    return USAGE.removeprefix("usage: ").replace("\n       ", "\n")


def main(argv: list[str]) -> int:
    """`robo-async train [overrides]`, `--cfg [job|all]` (the resolved config) or `--help`."""
    if wants_help(argv):
        print(hydra_help(USAGE, __doc__))
        return 0
    if any(a == "--cfg" or a.startswith("--cfg=") for a in argv):
        # the resolved, typed config (overrides applied), nothing started; Hydra's own spelling
        # (`--cfg job`, `--cfg=all`) is taken too
        cfg = compose_config(without_cfg_flag(argv))
        typed(cfg)
        print(OmegaConf.to_yaml(cfg, resolve=True))
        return 0
    return train(argv)


def without_cfg_flag(args: list[str]) -> list[str]:
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


def _resume_dir(overrides: list[str]) -> Path | None:
    for o in overrides:
        if o.startswith("resume=") and o.split("=", 1)[1] not in ("", "null"):
            path = Path(o.split("=", 1)[1])
            if not (path / "config.yaml").exists():
                raise UserError(f"resume={path}: not a run directory (no config.yaml)")
            return path
    return None


def prepare(overrides: list[str]):
    """Config, run directory and plan, with every config problem as a UserError."""
    resume = _resume_dir(overrides)
    cfg = compose_config(overrides, base=resume)
    run = typed(cfg)
    meta = None
    if resume is not None:
        has_ckpt = (
            bool(checkpoint.list_checkpoints(resume / "checkpoints")) if (resume / "checkpoints").is_dir() else False
        )
        if has_ckpt:
            try:
                _, metadata = checkpoint.read(checkpoint.resolve(resume))
            except checkpoint.CheckpointError as e:
                raise UserError(str(e)) from None
            meta = checkpoint.meta_of(metadata)
            if meta["task"] != run.task.name:
                raise UserError(f"{resume} holds a checkpoint for task '{meta['task']}', not '{run.task.name}'")
        elif (resume / "replay" / "data.mdb").exists():  # died before its first checkpoint: keep the data
            print(f"{resume} has no checkpoint yet; the learner starts afresh on its stored data", flush=True)
            meta = {"fresh_learner": True}
        else:
            raise UserError(f"{resume} has neither a checkpoint nor replay data to resume from")
        run_dir = resume
    else:
        run_dir = Path(run.run_dir) if run.run_dir else new_run_dir(run.runs_root, run.task.name)
        held = [
            p
            for p in ("checkpoints", "replay/data.mdb")
            if (run_dir / p).exists() and (p != "checkpoints" or checkpoint.list_checkpoints(run_dir / p))
        ]
        if held:  # a new run would mix its data and checkpoints with the old run's
            raise UserError(
                f"{run_dir} already holds a run ({', '.join(held)}); continue it with "
                f"resume={run_dir}, or give another run_dir"
            )
    try:
        plan = build_plan(cfg, run_dir, meta)
    except (ConfigError, KeyError, TypeError, ValueError) as e:
        raise UserError(f"bad config: {e}") from None
    return cfg, plan


def train(overrides: list[str]) -> int:
    cfg, plan = prepare(overrides)
    run_dir = plan.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    print(f"run directory: {run_dir}", flush=True)
    import_history(cfg, run_dir, plan)
    run = typed(cfg)
    title = f"robo_async · {run.task.name} · {run.algo.name} · {run.actors} actor(s) · {run.launcher.name}"
    try:
        with ProgressDisplay(title) as display:
            result = launch(plan, display)
    except RunFailed as e:
        print(f"error: {e}", file=sys.stderr)
        print(f"run directory: {run_dir}", file=sys.stderr)
        return 1
    return report(run, run_dir, result)


def typed(cfg: DictConfig) -> TrainConfig:
    """The composed config checked and typed; a wrong type or unknown key is one `bad config:` line."""
    try:
        return typed_config(cfg)
    except ConfigError as e:
        raise UserError(f"bad config: {e}") from None


def launch(plan, display: ProgressDisplay) -> RunResult:
    """The runner named by `launcher.name`: serial, local or ray (the same wiring in each)."""
    name = plan.launcher.name
    if name == "ray":
        from robo_async.launch.ray_launcher import launch_ray

        return launch_ray(plan, display)
    if name == "serial":
        from robo_async.launch.serial import launch_serial

        return launch_serial(plan, display)
    if name != "local":
        raise UserError(f"launcher '{name}' unknown; launchers: serial, local, ray")
    return launch_local(plan, display)


def run_encoder(plan):  # type: ignore[no-untyped-def]
    """The frozen camera encoder of the run's algorithm (DSRL on a pixel prior), or None."""
    from robo_async.learner.algorithms import build_algorithm

    lc = plan.learner
    if not lc.policy.options.get("cameras"):
        return None
    try:
        return build_algorithm(lc.algo, lc.algo_config, lc.policy).frozen_encoder()
    except ValueError as e:
        raise UserError(str(e)) from None


def import_history(cfg, run_dir: Path, plan=None) -> None:  # type: ignore[no-untyped-def]
    """`buffer.imports`: earlier stores / LeRobot datasets into this run's store, before training.
    Re-running (e.g. on resume) adds nothing: imported transitions keep stable ids. With
    `reward_classifier=` their rewards and successes are the classifier's. With a frozen
    camera encoder (DSRL on a pixel prior) the rows are stored with its embeddings, and a store
    another encoder embedded is refused here, in one line naming both versions."""
    from robo_async.buffer.lmdb_store import TABLES, PersistentReplayStore, StoreError
    from robo_async.buffer.store import ReplayError
    from robo_async.buffer.tools import import_source, is_lerobot

    entries = [dict(e) for e in typed(cfg).buffer.imports]
    for e in entries:
        if not (isinstance(e, dict) and "path" in e and set(e) <= {"path", "table"}):
            raise UserError(f"buffer.imports entries look like {{path: DIR, table: demos}}, got {e!r}")
        if e.get("table", "demos") not in TABLES:
            raise UserError(f"buffer.imports: unknown table '{e['table']}'; tables: {list(TABLES)}")
        if not Path(e["path"]).exists():
            raise UserError(f"buffer.imports: {e['path']} does not exist")
    if not entries:
        return
    from robo_async.buffer.embeddings import check_store_versions

    encoder = run_encoder(plan) if plan is not None else None
    classifier = None
    if typed(cfg).reward_classifier:  # the run's reward is the classifier's: imported rows are relabelled with it
        from policies.reward import RewardError, SuccessClassifier

        try:
            classifier = SuccessClassifier.load(typed(cfg).reward_classifier)
        except RewardError as err:
            raise UserError(str(err)) from None
    store = PersistentReplayStore(run_dir / "replay").open()
    try:
        problem = check_store_versions(
            store.embedding_versions(),
            encoder,
            f"replay store {store.path}",
            skip=plan is not None and plan.learner.options.stale_embeddings == "skip",
        )
        if problem:
            raise UserError(problem)
        target = (
            import_target(plan.task) if plan is not None and any(is_lerobot(Path(e["path"])) for e in entries) else None
        )
        for e in entries:
            table = e.get("table", "demos")
            try:
                n = import_source(
                    store,
                    Path(e["path"]),
                    table,
                    embed=plan is not None,
                    encoder=encoder,
                    classifier=classifier,
                    target=target,
                )
            except (StoreError, ReplayError, ValueError, FileNotFoundError) as err:
                raise UserError(f"buffer.imports {e['path']}: {err}") from None
            print(
                f"imported {n:,} transitions from {e['path']} into '{table}' (table now {store.counts[table]:,})",
                flush=True,
            )
    finally:
        store.close()


def report(run: TrainConfig, run_dir: Path, result: RunResult) -> int:
    p = result.progress
    sr = p.get("charts/success_rate")
    print(
        f"training ended: {result.reason} after {p.get('time/elapsed_s', 0):.0f} s, "
        f"{int(p.get('time/env_steps', 0)):,} env steps, {int(p.get('time/updates', 0)):,} updates"
        + (f", success {sr:.0%}" if sr is not None else "")
    )
    curve = plot_learning_curve(run_dir)
    if result.checkpoint and run.eval_episodes > 0 and not result.interrupted:
        from robo_async.launch.builders import resolve_inference, task_args
        from robo_async.launch.evaluation import evaluate

        # as the run acted: its inference mode and injected latency (a 200 ms run is not judged at 0 ms)
        delay = run.policy.inference_delay_ms
        delay = list(delay) if isinstance(delay, tuple) else delay
        from robo_async.launch.policy_args import PolicyArgs

        task = task_args(as_dict(run.task), run.robot, as_dict(run.safety))
        mode = resolve_inference(run.actor.inference, task, horizon=PolicyArgs.from_config(as_dict(run.policy)).horizon)
        res = evaluate(
            Path(result.checkpoint),
            run.eval_episodes,
            mode=mode,
            inference_delay_ms=delay or None,
            video=run_dir / "eval.mp4" if run.video else None,
        )
        print(
            f"evaluation: success rate {res.success_rate:.0%} over {res.episodes} episodes ({res.mode})"
            + (f"; video {res.video}" if res.video else "")
        )
        (run_dir / "eval.json").write_text(
            json.dumps(
                {
                    "episodes": res.episodes,
                    "success_rate": res.success_rate,
                    "mean_ticks": res.mean_length,
                    "mean_return": res.mean_return,
                    "mode": res.mode,
                    "missed_ticks": res.missed_ticks,
                    "inference_delay_ms": delay or 0,
                    "infer_p50_ms": res.infer_p50_ms,
                }
            )
        )
    print(
        f"results in {run_dir}/: config.yaml, metrics.jsonl, tb/, checkpoints/, replay/"
        + (f", {curve.name}" if curve else "")
    )
    print(f"replay data: robo-async buffer inspect {run_dir}")
    if result.checkpoint:
        print(f"resume with: robo-async train resume={run_dir}")
    return 130 if result.interrupted else 0

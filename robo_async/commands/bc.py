"""`robo-async bc`: train a chunk policy by delay-consistent behaviour cloning (`algo=bc`, the
learner's algorithm, on windows of the demonstrations: `learner/algorithms/bc/offline.py`), then
evaluate it on the simulator with asynchronous inference (the mode and injected latency the actor
would use).

    robo-async bc policy=flow                                   # reach, scripted-expert demos
    robo-async bc policy=flow policy.bc.from_store=runs/x/replay  # the demos table of a store
    robo-async bc policy=flow actor.inference=async_forward_rtc policy.inference_delay_ms=200

Writes <run dir>/policy.safetensors (+ policy.yaml), bc_loss.png and eval.json.
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import numpy as np
import torch
import yaml
from omegaconf import OmegaConf
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from robo_async.commands.args import hydra_help, wants_help
from robo_async.config import UserError, compose_config
from robo_async.launch.builders import ConfigError, PolicyArgs, make_actor_policy, make_robot, new_run_dir, task_args
from robo_async.launch.schema import typed_config
from robo_async.learner.algorithms.bc.config import BCOptions, offline_config
from robo_async.learner.algorithms.bc.demos import check_demos
from robo_async.learner.algorithms.bc.offline import clone, spec_of

USAGE = """usage: robo-async bc policy=flow [overrides]
       robo-async bc policy=smolvla task.cameras=[front] task.image_size=64
       robo-async bc policy=tiny_vla
       robo-async bc policy=flow policy.bc.from_store=<store dir>   (options: policy.bc.*)"""


def usage_lines() -> str:
    """This command's usage, for `robo-async --help`."""
    return USAGE.removeprefix("usage: ").replace("\n       ", "\n")


def main(argv: list[str]) -> int:
    """`robo-async bc [overrides]`, or `--help`."""
    if wants_help(argv):
        print(hydra_help(USAGE, __doc__))
        return 0
    return bc(argv)


def episodes_from_store(store_dir: Path, table: str = "demos") -> list[dict[str, np.ndarray]]:
    """A store's table as episodes (consecutive transitions of one actor up to a terminal or
    truncated one), in the layout `record_expert` returns."""
    from robo_async.buffer.lmdb_store import PersistentReplayStore, StoreError

    if not (store_dir / "data.mdb").exists():
        raise UserError(f"policy.bc.from_store={store_dir}: not a replay store (no data.mdb)")
    try:
        store = PersistentReplayStore(store_dir).open(readonly=True)
    except StoreError as e:
        raise UserError(str(e)) from None
    episodes: list[dict[str, np.ndarray]] = []
    current: dict[int, dict[str, list]] = {}
    try:
        for _, actor, _, row in store.records(table):
            ep = current.setdefault(actor, {})
            for k, v in row.items():
                if k.startswith("obs/") or k == "action":
                    ep.setdefault(k, []).append(np.asarray(v))
            if bool(row["terminated"]) or bool(row["truncated"]):
                episodes.append({k: np.stack(v) for k, v in current.pop(actor).items()})
    finally:
        store.close()
    if not episodes:
        raise UserError(f"{store_dir}: table '{table}' holds no complete episode to learn from")
    return episodes


def _record(targs, episodes: int, max_step: float, progress: Progress) -> list[dict[str, np.ndarray]]:
    from robo_async.launch.experts import NoExpert, record_expert

    job = progress.add_task("recording expert demos", total=episodes, info="")
    try:
        return record_expert(
            targs, episodes, seed=0, max_step=max_step, progress=lambda n: progress.update(job, completed=n)
        )
    except NoExpert as e:
        raise UserError(f"{e}; give policy.bc.from_store=<store with demos>") from None


def bc_options(section: dict) -> BCOptions:
    """`policy.bc` as its dataclass (keys it does not describe are the schema's to refuse)."""
    return BCOptions(**{k: v for k, v in section.items() if k in {f.name for f in fields(BCOptions)}})


def _clone(policy, name: str, demos: list, b: BCOptions, seed: int, progress: Progress, what: str) -> list[float]:
    """`b.steps` updates of `algo=bc` built for `policy`, on windows of `demos`, with a progress bar."""
    job = progress.add_task(what, total=b.steps, info="")
    return clone(
        policy,
        demos,
        b.steps,
        offline_config(b, seed),
        spec=spec_of(policy, name),
        on_step=lambda step, loss: progress.update(job, completed=step, info=f"loss {loss:.4f}"),
    )


def eval_mode(cfg, horizon: int) -> str:
    """The inference mode the cloned policy is evaluated in: `actor.inference`, `auto` deciding as
    for an evaluation in wall-clock real time (`choose_inference`: async_forward_rtc)."""
    from robo_async.actor.inference_modes import InferenceModeError, choose_inference

    try:
        return choose_inference(str(cfg.actor.inference), purpose="evaluate", horizon=horizon, realtime=True)
    except InferenceModeError as e:
        raise UserError(str(e)) from None


def evaluate_chunk_policy(
    path: Path, mode: str, episodes: int, seed: int = 10_000, delay_ms: float | list | None = None
) -> dict:
    """The saved policy on its task in wall-clock real time, through the one control loop
    (`robo-async eval`), in inference mode `mode`, with an injected inference latency."""
    from robo_async.launch.evaluation import evaluate

    res = evaluate(path, episodes, seed=seed, mode=mode, inference_delay_ms=delay_ms)
    return {
        "episodes": res.episodes,
        "mode": mode,
        "success_rate": res.success_rate,
        "mean_ticks": res.mean_length,
        "holds": res.held_ticks,
        "latency_p50_ms": res.infer_p50_ms,
        "latency_p95_ms": res.infer_p95_ms,
        "missed_ticks": res.missed_ticks,
        "late_p99_ms": res.lateness_p99_ms,
    }


def plot_losses(losses: list[float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2))
    k = max(len(losses) // 100, 1)
    smooth = np.convolve(losses, np.ones(k) / k, mode="valid")
    ax.plot(losses, lw=0.5, alpha=0.4, label="per step")
    ax.plot(np.arange(len(smooth)) + k - 1, smooth, lw=1.5, label=f"mean of {k}")
    ax.set_yscale("log")
    ax.set_xlabel("BC step")
    ax.set_ylabel("flow-matching loss")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def bc(overrides: list[str]) -> int:
    cfg = compose_config(overrides)
    try:  # types and unknown keys, one line, before anything is recorded
        typed_config(cfg)
    except ConfigError as e:
        raise UserError(f"bad config: {e}") from None
    pol_cfg = OmegaConf.to_container(cfg.policy, resolve=True)
    if pol_cfg["name"] == "tiny_vla":
        return bc_multitask(cfg, pol_cfg)
    if pol_cfg["name"] not in ("flow", "lerobot"):
        raise UserError(
            f"bc trains the flow chunk policy (policy=flow), the tiny VLA (policy=tiny_vla) or a LeRobot "
            f"policy (policy=smolvla, policy=act), not policy={pol_cfg['name']}"
        )
    if "bc" not in pol_cfg:
        raise UserError(f"policy={pol_cfg.get('type', pol_cfg['name'])} has no bc: section (demos, steps, batch, lr)")
    b = bc_options(pol_cfg["bc"])
    robot_cfg = OmegaConf.to_container(cfg.robot, resolve=True) if cfg.get("robot") else None
    safety_cfg = OmegaConf.to_container(cfg.safety, resolve=True) if cfg.get("safety") else None
    # with robot=<device> the policy is shaped for that robot and evaluated on it (e.g. a twin)
    targs = task_args(cfg.task, robot_cfg, safety_cfg)
    run_dir = Path(cfg.run_dir) if cfg.run_dir else new_run_dir(cfg.runs_root, f"{targs.name}-bc")
    try:
        pargs = PolicyArgs.from_config({**pol_cfg, "inference_delay_ms": 0})
        spec = make_robot(targs).spec
        torch.manual_seed(int(cfg.seed))  # the initial weights too are a function of the seed
        policy = make_actor_policy(pargs, spec)
    except (ConfigError, TypeError, ValueError, KeyError) as e:
        raise UserError(f"bad config: {e}") from None
    mode = eval_mode(cfg, policy.horizon)
    torch.set_num_threads(max(1, int(cfg.learner.threads)))
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TextColumn("{task.fields[info]}"),
        TimeRemainingColumn(),
    )
    steps = b.steps
    losses: list[float] = []
    demos: list = []
    if steps == 0 and not pol_cfg.get("path"):
        raise UserError("policy.bc.steps=0 evaluates existing weights: give policy.path=<bc run dir>")
    with Progress(*columns) as progress:
        if steps == 0:
            pass
        elif b.from_store:
            demos = episodes_from_store(Path(b.from_store), b.table)
            progress.console.print(f"{len(demos)} episodes from {b.from_store} (table {b.table})")
        else:
            demos = _record(targs, b.demos, b.expert_max_step, progress)
        try:  # keys and shapes against the task's, one line, before any training
            check_demos(demos, spec, (*pargs.obs_keys, *policy.cameras))
        except ValueError as e:
            raise UserError(f"{e}{' in ' + b.from_store if b.from_store else ''}") from None
        if steps:
            losses = _clone(policy, pargs.name, demos, b, int(cfg.seed), progress, "behaviour cloning")
    run_dir.mkdir(parents=True, exist_ok=True)  # only now: a command refused above leaves no empty run
    if pol_cfg["name"] == "lerobot":  # LeRobot's own files (config, weights, processors, backbone/)
        policy.save(run_dir)
    else:
        from safetensors.numpy import save_file

        save_file(
            {k: np.ascontiguousarray(v) for k, v in policy.weights().items()}, str(run_dir / "policy.safetensors")
        )
    (run_dir / "policy.yaml").write_text(
        yaml.safe_dump(
            {
                "policy": pol_cfg,
                "task": OmegaConf.to_container(cfg.task, resolve=True),
                **({"robot": robot_cfg, "safety": safety_cfg} if targs.robot is not None else {}),
                "architecture": policy.architecture,
                "spec": spec.signature(),
                "demos": len(demos),
            },
            sort_keys=False,
        )
    )
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    if losses:
        plot_losses(losses, run_dir / "bc_loss.png")
        print(
            f"trained {len(losses)} steps on {len(demos)} episodes: final loss {np.mean(losses[-50:]):.4f}", flush=True
        )
    result: dict = {}
    if int(cfg.eval_episodes) > 0:
        print(
            f"evaluating {cfg.eval_episodes} episodes in real time: {mode}, injected latency "
            f"{pol_cfg.get('inference_delay_ms') or 0} ms ...",
            flush=True,
        )
        result = evaluate_chunk_policy(
            run_dir, mode, int(cfg.eval_episodes), delay_ms=pol_cfg.get("inference_delay_ms")
        )
        print(
            f"success rate {result['success_rate']:.0%} over {result['episodes']} episodes, "
            f"mean {result['mean_ticks']:.0f} ticks, {result['holds']} held ticks, "
            f"inference p50 {result['latency_p50_ms'] or 0:.1f} ms",
            flush=True,
        )
    (run_dir / "eval.json").write_text(json.dumps(result, indent=2))
    written = [
        f
        for f in ("policy.safetensors", "model.safetensors", "policy.yaml", "bc_loss.png", "eval.json")
        if (run_dir / f).exists()
    ]
    print(f"results in {run_dir}: {', '.join(written)}", flush=True)
    print(
        f"evaluate again (other modes/latencies): robo-async bc policy={pol_cfg.get('type') or pol_cfg['name']} "
        f"policy.path={run_dir} "
        f"policy.bc.steps=0 actor.inference=<mode> policy.inference_delay_ms=<ms>",
        flush=True,
    )
    return 0


def bc_multitask(cfg, pol_cfg: dict) -> int:
    """`robo-async bc policy=tiny_vla`: scripted-expert demos of every task in `policy.tasks`,
    each labelled with its task's instruction, one language-conditioned policy trained on all of
    them, then evaluated per instruction (`eval_episodes` each, in `actor.inference` mode, real
    time unless inline)."""
    from robo_async.launch.evaluation import evaluate_per_instruction
    from sim import INSTRUCTIONS

    b = bc_options(pol_cfg["bc"])
    tasks = [str(t) for t in pol_cfg.get("tasks") or ()]
    cams = list(pol_cfg.get("cameras") or ())
    run_dir = Path(cfg.run_dir) if cfg.run_dir else new_run_dir(cfg.runs_root, "tiny-vla-bc")
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        # each task as `task=<name>` configures it (its episode length, ...), plus the policy's camera
        camera = {"cameras": cams, "image_size": int(pol_cfg["image_size"])} if cams else {}
        targs = {
            t: task_args({**OmegaConf.to_container(compose_config([f"task={t}"]).task, resolve=True), **camera})
            for t in tasks
        }
        pargs = PolicyArgs.from_config({**pol_cfg, "inference_delay_ms": 0})
        spec = make_robot(targs[tasks[0]]).spec
        policy = make_actor_policy(pargs, spec)
    except (ConfigError, TypeError, ValueError, KeyError, IndexError) as e:
        raise UserError(f"bad config: {e}") from None
    mode = eval_mode(cfg, policy.horizon)
    torch.set_num_threads(max(1, int(cfg.learner.threads)))
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TextColumn("{task.fields[info]}"),
        TimeRemainingColumn(),
    )
    demos: list = []
    losses: list[float] = []
    steps = b.steps
    with Progress(*columns) as progress:
        if steps:
            for t in tasks:
                eps = _record(targs[t], b.demos, b.expert_max_step, progress)
                tokens = policy.tokens(INSTRUCTIONS[t])
                for ep in eps:
                    ep["obs/instruction"] = np.tile(tokens, (len(ep["action"]), 1))
                demos += eps
            losses = _clone(
                policy, pargs.name, demos, b, int(cfg.seed), progress, f"behaviour cloning on {len(tasks)} tasks"
            )
    from safetensors.numpy import save_file

    save_file({k: np.ascontiguousarray(v) for k, v in policy.weights().items()}, str(run_dir / "policy.safetensors"))
    (run_dir / "policy.yaml").write_text(
        yaml.safe_dump(
            {
                "policy": pol_cfg,
                "task": {**OmegaConf.to_container(compose_config([f"task={tasks[0]}"]).task, resolve=True), **camera},
                "tasks": tasks,
                "architecture": policy.architecture,
                "spec": spec.signature(),
                "demos": len(demos),
            },
            sort_keys=False,
        )
    )
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    if losses:
        plot_losses(losses, run_dir / "bc_loss.png")
        print(
            f"trained {len(losses)} steps on {len(demos)} episodes of {len(tasks)} tasks: final loss "
            f"{np.mean(losses[-50:]):.4f}",
            flush=True,
        )
    policy.version = 0  # trained weights: evaluation episodes run the deterministic policy
    result = {
        "mode": mode,
        "episodes": int(cfg.eval_episodes),
        "success": evaluate_per_instruction(policy, {t: targs[t] for t in tasks}, int(cfg.eval_episodes), mode)
        if int(cfg.eval_episodes) > 0
        else {},
    }
    (run_dir / "eval.json").write_text(json.dumps(result, indent=2))
    for instruction, rate in result["success"].items():
        print(f"  '{instruction}': success {rate:.0%} over {cfg.eval_episodes} episodes ({mode})", flush=True)
    written = [f for f in ("policy.safetensors", "policy.yaml", "bc_loss.png", "eval.json") if (run_dir / f).exists()]
    print(f"results in {run_dir}: {', '.join(written)}", flush=True)
    print(
        f'serve it: robo-async serve policy=tiny_vla policy.path={run_dir} "policy.instruction=lift the cube" '
        f"task=pick_lift task.cameras=[front]",
        flush=True,
    )
    return 0


__all__ = ["bc", "bc_multitask", "episodes_from_store", "evaluate_chunk_policy"]

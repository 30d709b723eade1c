"""Plan-time checks and resolutions that span the run config's sections: what `auto` resolves to
for the actors (`resolve_inference`, `resolve_replan`), the transport's keys and advertised
addresses, W&B, envs against each actor's task, replicas against the launcher and GPUs, streams
against the keys' lanes, hindsight relabelling against the task's goals. Each refusal is one
`ConfigError` line naming the key; a component's own `ValueError` becomes one through `one_line`.
`builders.build_plan` calls them."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from hal.robot import RobotError
from hal.spec import RobotSpec
from robo_async.actor.inference_modes import InferenceModeError, choose_inference
from robo_async.actor.options import InferenceMode, Replan, ReplanChoice
from robo_async.launch.mirrors import ConfigError, checked
from robo_async.launch.tasks import TaskArgs, make_robot
from robo_async.learner import config as learner_config
from robo_async.learner.algorithms import PolicySpec
from robo_async.learner.metrics import WandbOptions
from robo_async.learner.options import Precision
from robo_async.transport.options import TransportOptions


@contextlib.contextmanager
def one_line() -> Iterator[None]:
    """A component's ValueError (its message names the key) as the plan's one ConfigError line."""
    try:
        yield
    except ValueError as e:
        raise ConfigError(str(e)) from None


def resolve_inference(
    mode: str, task: TaskArgs, server: str | None = None, horizon: int | None = None
) -> InferenceMode:
    """`actor.inference` for training actors of a policy with `horizon` actions per chunk
    (`PolicyArgs.horizon`): `choose_inference` (actor/inference_modes.py) decides."""
    try:
        return choose_inference(
            mode,
            purpose="train",
            horizon=horizon,
            robot=task.robot["type"] if task.robot is not None else None,
            realtime=task.realtime,
            server=server,
        )
    except InferenceModeError as e:
        raise ConfigError(str(e)) from None


def resolve_replan(choice: ReplanChoice, algo_name: str) -> Replan:
    """`actor.replan`: auto is `end` for chunked critics (they learn Q of chunks that ran whole: no
    action of a chunk is replaced), else `due`."""
    if choice != ReplanChoice.auto:
        return Replan(choice)
    from robo_async.learner.algorithms.base import whole_chunks

    return Replan.end if whole_chunks(algo_name) else Replan.due


def resolve_precision(name: str, device: str) -> Precision:
    """`learner.precision` resolved (`learner.config.resolve_precision`), refused in one ConfigError line."""
    with one_line():
        return learner_config.resolve_precision(name, device)


def transport_keys(t: TransportOptions | DictConfig, actors: int) -> str | None:
    """The CURVE keys directory, or None for clear links (loopback, or an explicit opt-out)."""
    from robo_async.transport.curve import is_loopback

    if isinstance(t, DictConfig):
        t = checked(OmegaConf.to_container(t, resolve=True), TransportOptions, "transport")  # type: ignore[arg-type]
    mode, keys = t.curve, t.keys
    if mode == "off":
        return None
    if not keys:
        if mode == "on":
            raise ConfigError(
                "transport.curve=on needs transport.keys=<dir>: create one with `robo-async keys dir=keys actors=N`"
            )
        if not is_loopback(str(t.host)):
            raise ConfigError(
                f"transport.host={t.host} binds beyond loopback without keys: anyone who reaches "
                f"the ports could read the weights and insert data. Create keys with "
                f"`robo-async keys dir=keys actors={actors}` and set transport.keys=keys, or "
                f"opt out with transport.curve=off"
            )
        return None
    d = Path(str(keys)).expanduser().resolve()
    missing = [str(p) for p in (d / "learner.key_secret", d / "learner.key", d / "authorized") if not p.exists()]
    if missing:
        raise ConfigError(
            f"transport.keys={keys}: {', '.join(missing)} missing; create them with "
            f"`robo-async keys dir={keys} actors={actors}`"
        )
    return str(d)


def check_advertise(advertise: tuple[str, ...] | list[str] | None) -> tuple[str, str] | None:
    """`transport.advertise` as (data, weights), each `tcp://host:port` with a port 1..65535, or None
    (actors dial the bound addresses); anything else is a one-line ConfigError naming the key."""
    if advertise is None:
        return None
    key = "transport.advertise"
    if isinstance(advertise, str) or len(advertise) != 2:
        raise ConfigError(
            f"{key} is two addresses [data, weights], e.g. [tcp://gateway:7001,tcp://gateway:7002], not {advertise!r}"
        )
    for what, address in zip(("data", "weights"), advertise, strict=True):
        if not isinstance(address, str) or not address.startswith("tcp://"):
            raise ConfigError(f"{key}: the {what} address must be tcp://host:port, not {address!r}")
        host, sep, port = address.removeprefix("tcp://").rpartition(":")
        if not sep or not host or host in ("*", "0.0.0.0"):
            raise ConfigError(
                f"{key}: the {what} address {address!r} needs a host actors can dial and a port (tcp://host:port)"
            )
        if not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ConfigError(f"{key}: the {what} address {address!r} has port {port!r}; ports are 1 to 65535")
    return advertise[0], advertise[1]


def check_wandb(w: WandbOptions) -> None:
    """`learner.wandb`: wandb installed when a project turns it on (else the learner would fail at
    its start, again at each restart). The mode is checked where it is defined (WandbMode)."""
    import importlib.util

    if w.project and w.mode != "disabled" and importlib.util.find_spec("wandb") is None:
        raise ConfigError(
            "learner.wandb.project is set but wandb is not installed: "
            "pip install 'robo_async[wandb]' (or pip install wandb)"
        )


def check_key_lanes(keys_dir: str | None, actors: int, envs: int) -> None:
    """With CURVE, each actor's key must be issued for its robots' streams (`robo-async keys
    lanes=`): a key owns exactly the lanes it was issued for."""
    if keys_dir is None:
        return
    from robo_async.transport.curve import KeysError, authorized

    try:
        issued = {actor: lanes for actor, lanes in authorized(Path(keys_dir)).values()}
    except KeysError as e:
        raise ConfigError(str(e)) from None
    short = [i for i in range(actors) if issued.get(i, 0) < envs]
    if short:
        raise ConfigError(
            f"the keys in {keys_dir} do not cover actors {short[:8]} with {envs} env(s) each "
            f"(issued: {[issued.get(i, 0) for i in short[:8]]}); run `robo-async keys dir={keys_dir} "
            f"actors={actors} lanes={envs}`"
        )


def check_envs(a, c, plan_task, server: str | None) -> int:
    """`actor.envs`: how many simulators each actor steps in one loop; more than one only where the
    loop steps as fast as it can with inline inference (simulators, no teleop, guide or server)."""
    from robo_async.transport.curve import LANE_STRIDE

    envs = int(a.envs)  # 1 to MAX_ENVS (ActorOptions checks it)
    if envs == 1:
        return 1
    for i in range(c.actors):
        t = plan_task(i)
        why = (
            "a real robot"
            if t.robot is not None
            else "task.realtime=true"
            if t.realtime
            else "a teleop"
            if t.teleop
            else "actor.guide"
            if a.guide
            else "actor.inference_server"
            if server
            else None
            if resolve_inference(a.inference, t, server) == "inline"
            else f"actor.inference={a.inference}"
        )
        if why is not None:
            raise ConfigError(
                f"actor.envs={envs} steps several simulators with one batched policy call per tick, "
                f"as fast as they go (inline inference); actor {i} has {why}"
            )
    if c.actors > LANE_STRIDE:
        raise ConfigError(f"actor.envs > 1 takes at most {LANE_STRIDE} actors, not {c.actors}")
    return envs


def check_start_range(a, c, plan_task) -> None:
    """`actor.start_range`: every actor's robot must place its own scene (a simulator with a random
    start: `Robot.set_start_range`); a real arm's scene is reset by a person, as it is."""
    if a.start_range is None:
        return
    for i in range(c.actors):
        t = plan_task(i)
        if t.robot is not None:
            raise ConfigError(
                f"actor.start_range narrows where a simulator starts its scene; actor {i} drives a real robot, "
                "whose scene is reset as it is: leave actor.start_range unset"
            )
        robot = make_robot(t)
        try:
            robot.set_start_range(float(a.start_range))
        except RobotError as e:
            raise ConfigError(str(e)) from None
        finally:
            robot.close()


def check_replicas(c, algo_name: str, algo_config, policy: PolicySpec, device: str) -> int:
    """`learner.replicas`: 1 to 64 learner ranks; more than one only where a runner places them
    (launcher=local: processes on this machine; launcher=ray: Ray actors on the cluster) and, on
    GPUs, one GPU per rank."""
    from robo_async.learner.replicas import MAX_REPLICAS

    n = int(c.learner.replicas)
    if not 1 <= n <= MAX_REPLICAS:
        raise ConfigError(f"learner.replicas must be 1 to {MAX_REPLICAS}, not {c.learner.replicas}")
    if n > 1 and c.launcher.name not in ("local", "ray"):
        raise ConfigError(
            f"learner.replicas={n} runs its ranks as processes of launcher=local or as Ray actors "
            f"(launcher=ray), not launcher={c.launcher.name}"
        )
    if n > 1 and device.startswith("cuda") and c.launcher.name == "local":  # (Ray gives each rank a GPU)
        import torch

        from robo_async.learner.algorithms import build_algorithm

        first = torch.device(device).index or 0
        if build_algorithm(algo_name, algo_config, policy).supports_device and first + n > torch.cuda.device_count():
            raise ConfigError(
                f"learner.replicas={n} on {device} needs a GPU per rank, this machine has "
                f"{torch.cuda.device_count()}; use fewer replicas or learner.device=cpu"
            )
    return n


def check_her(algo_name: str, algo_config, window: int, spec: RobotSpec, obs_keys: tuple[str, ...], task) -> object:
    """`algo.her`: the algorithm learns from single transitions, the task is goal-conditioned
    (features `achieved_goal` and `desired_goal`), the policy reads the desired goal, and the
    threshold is resolved from the task's env (`GymRobot.goal_reward`) unless given. Returns the
    algorithm's config with `her_threshold` set; one ConfigError line otherwise."""
    from robo_async.buffer.her import HerStrategy, Relabel

    if algo_config.her == HerStrategy.none:
        return algo_config
    if window > 1:
        raise ConfigError(f"algo.her relabels single transitions; algo={algo_name} learns from windows of {window}")
    feats = spec.feature_dims()
    if "achieved_goal" not in feats or feats.get("desired_goal") != feats["achieved_goal"]:
        raise ConfigError(
            f"algo.her needs a goal-conditioned task (features achieved_goal and desired_goal of one size, "
            f"e.g. task=fetch); {spec.name} has {sorted(feats) or 'none'}"
        )
    if "desired_goal" not in obs_keys:
        raise ConfigError(f"algo.her relabels desired_goal, which policy.obs_keys {list(obs_keys)} leaves out; add it")
    threshold = algo_config.her_threshold
    if threshold is None:
        robot = make_robot(task)
        try:
            if not hasattr(robot, "goal_reward"):
                raise ConfigError(f"algo.her: {spec.name} does not say its goal threshold; set algo.her_threshold")
            threshold = robot.goal_reward()
        except RobotError as e:
            raise ConfigError(str(e)) from None
        finally:
            robot.close()
    with one_line():
        Relabel(HerStrategy(algo_config.her), threshold, algo_config.her_ratio)
    return dataclasses.replace(algo_config, her_threshold=threshold)

"""Policies from the config: `PolicyArgs` (the `policy:` section as plain values) and the policy an
actor, the policy server or eval runs (weights from `path`, an injected inference delay)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from hal.spec import RobotSpec
from policies.base import Policy, make_policy
from robo_async.launch.mirrors import ConfigError
from robo_async.launch.tasks import obs_dims, task_args, task_spec

_POLICY_KEYS = ("name", "obs_keys", "hidden", "action_mode", "delta_scale", "obs_scale")


@dataclass(frozen=True)
class PolicyArgs:
    """The `policy:` section as hashable plain values (what processes and the learner get)."""

    name: str
    obs_keys: tuple[str, ...]
    hidden: tuple[int, ...]
    action_mode: str = "delta"
    delta_scale: float = 0.15
    obs_scale: tuple[tuple[str, float], ...] = ()
    options: tuple[tuple[str, object], ...] = ()  # the policy's other keys (horizon, cameras, path, ...)

    @staticmethod
    def from_config(policy: dict) -> PolicyArgs:
        p = dict(policy)
        delay = p.get("inference_delay_ms")
        if delay is not None:
            lo_hi = delay if isinstance(delay, list | tuple) else [delay, delay]
            if len(lo_hi) != 2 or not all(isinstance(x, int | float) for x in lo_hi) or not 0 <= lo_hi[0] <= lo_hi[1]:
                raise ConfigError(f"policy.inference_delay_ms must be a number >= 0 or [low, high], not {delay!r}")
        scale = tuple((str(k), float(v)) for k, v in (p.get("obs_scale") or {}).items())
        options = tuple((k, _hashable(v)) for k, v in sorted(p.items()) if k not in _POLICY_KEYS and k != "bc")
        return PolicyArgs(
            p["name"],
            tuple(p["obs_keys"]),
            tuple(p.get("hidden") or ()),
            p.get("action_mode", "delta"),
            float(p.get("delta_scale", 0.15)),
            scale,
            options,
        )

    def option(self, key: str, default: object = None) -> object:
        return dict(self.options).get(key, default)

    @property
    def horizon(self) -> int | None:
        """Actions per chunk as the config says (`policy=mlp`: 1); None: the policy's own (a chunk policy)."""
        h = 1 if self.name == "mlp" else self.option("horizon")
        return h if isinstance(h, int) else None


def _hashable(v: object) -> object:
    if isinstance(v, list | tuple):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple((k, _hashable(x)) for k, x in v.items())
    return v


def vla_inputs(keys: tuple[str, ...], tasks: object) -> tuple[tuple[int, ...], list[str]]:
    """The tiny VLA's feature sizes (from whichever of `tasks` has each feature) and the
    instructions of those tasks."""
    from sim import INSTRUCTIONS

    names = [str(t) for t in (tasks or ())]  # type: ignore[union-attr]
    unknown = [t for t in names if t not in INSTRUCTIONS]
    if not names or unknown:
        raise ConfigError(f"policy.tasks must list sim tasks with instructions ({sorted(INSTRUCTIONS)}), got {names}")
    dims: dict[str, int] = {}
    for t in names:
        spec = task_spec(task_args({"name": t}))
        dims.update({"state": spec.state_dim, **spec.feature_dims()})
    missing = [k for k in keys if k not in dims]
    if missing:
        raise ConfigError(f"policy.obs_keys {missing} are not observations of any of {names}")
    return tuple(dims[k] for k in keys), [INSTRUCTIONS[t] for t in names]


def make_actor_policy(args: PolicyArgs, spec: RobotSpec, deterministic: bool = False) -> Policy:
    """The policy an actor runs: built from the config, weights from `path` when given, wrapped
    in an injected inference delay when `inference_delay_ms` is set (sim and tests)."""
    opts = {k: (dict(v) if k == "overrides" else v) for k, v in args.options}
    if args.name == "lerobot":
        policy = _make_lerobot_policy(args, spec, opts)
    elif args.name == "lerobot_dsrl":  # algo=dsrl steering a frozen LeRobot policy (policy.path)
        from policies.lerobot_dsrl import SteeredLeRobotPolicy

        if not opts.get("path"):
            raise ConfigError("algo=dsrl steers a frozen policy: give policy.path=<a saved LeRobot policy directory>")
        try:
            policy = SteeredLeRobotPolicy(
                _make_lerobot_policy(args, spec, opts),
                float(opts.get("noise_bound", 1.5)),
                tuple(opts.get("noise_hidden") or (128, 128)),
                residual_scale=float(opts.get("residual_scale", 0.1)),
            )
        except ValueError as e:
            raise ConfigError(str(e)) from None
        policy.deterministic = deterministic
    else:
        extra: dict = {}
        if opts.get("gripper") == "binary" and "gripper" not in spec.joint_names[-1].lower():
            opts["gripper"] = "continuous"  # only a gripper (the last joint, named so) is snapped to two levels
        if args.name == "tiny_vla":  # several tasks: features one task lacks are zero, words from all
            dims, extra["instructions"] = vla_inputs(args.obs_keys, opts.get("tasks") or ())
        else:
            dims = obs_dims(spec, args.obs_keys)
        policy = make_policy(
            args.name,
            obs_keys=args.obs_keys,
            obs_dims=dims,
            action_low=spec.joint_low,
            action_high=spec.joint_high,
            hidden=args.hidden,
            dt=spec.dt,
            deterministic=deterministic,
            action_mode=args.action_mode,
            delta_scale=args.delta_scale,
            obs_scale=dict(args.obs_scale),
            **extra,
            **{k: v for k, v in opts.items() if k not in ("path", "inference_delay_ms", "type", "tasks", "bc")},
        )
        policy.deterministic = deterministic
        if opts.get("path"):
            load_policy_file(policy, Path(str(opts["path"])))
    delay = opts.get("inference_delay_ms")
    if delay:
        from policies.delayed import DelayedPolicy

        lo, hi = (float(delay[0]), float(delay[1])) if isinstance(delay, tuple) else (float(delay), float(delay))
        policy = DelayedPolicy(policy, lo, hi - lo)
    return policy


def acting_args(pol: PolicyArgs, algo_name: str, algo_config: object) -> PolicyArgs:
    """The policy the actors run: `pol` itself, or what the algorithm publishes instead (e.g.
    `algo=qc` trains `policy=flow` on the learner and publishes its one-step actor)."""
    from robo_async.learner.algorithms.base import acting_policy

    acting = acting_policy(algo_name, algo_config, pol.name)  # type: ignore[arg-type]
    if acting is None:
        return pol
    name, extra = acting
    opts = dict(pol.options)
    opts.update({k: _hashable(v) for k, v in extra.items()})  # an extra of None removes the key
    return dataclasses.replace(pol, name=name, options=tuple(sorted((k, v) for k, v in opts.items() if v is not None)))


def load_policy_file(policy: Policy, path: Path) -> None:
    """Weights saved by `robo-async bc` (policy.safetensors, or the run directory holding it)."""
    from safetensors.numpy import load_file

    file = path / "policy.safetensors" if path.is_dir() else path
    if not file.is_file():
        raise ConfigError(f"policy.path={path}: no policy.safetensors there (train one with `robo-async bc`)")
    try:
        load_prior = getattr(policy, "load_prior", None)  # a steered policy: the file is its frozen prior
        load_prior(load_file(str(file))) if load_prior is not None else policy.load_weights(0, load_file(str(file)))
    except ValueError as e:
        raise ConfigError(f"policy.path={file}: {e}") from None


def _make_lerobot_policy(args: PolicyArgs, spec: RobotSpec, opts: dict) -> Policy:
    from policies.lerobot_build import (
        LeRobotPolicyUnavailable,
        build_lerobot_policy,
        load_lerobot_policy,
    )

    env_keys = tuple(k for k in args.obs_keys if k != "state")
    cams = tuple(opts.get("cameras") or ())
    units = str(opts.get("units", "rad"))
    try:
        if opts.get("path"):
            return load_lerobot_policy(
                str(opts["path"]),
                action_low=spec.joint_low,
                action_high=spec.joint_high,
                env_keys=env_keys,
                cameras=cams,
                dt=spec.dt,
                units=units,
                task=str(opts.get("instruction", "")),
                state_dim=spec.state_dim,
                env_dim=int(sum(obs_dims(spec, env_keys))) if env_keys else 0,
                joint_names=spec.joint_names,
            )
        sizes = {c.name: (c.height, c.width) for c in spec.cameras}
        missing = [c for c in cams if c not in sizes]
        if missing:
            raise ConfigError(f"policy.cameras {missing} are not cameras of {spec.name} (it has {sorted(sizes)})")
        dims = obs_dims(spec, env_keys) if env_keys else ()
        overrides = dict(opts.get("overrides") or {})
        if str(opts.get("type", "act")) == "smolvla":
            overrides["vlm_model_name"] = str(vla_backbone(opts.get("backbone")))
        return build_lerobot_policy(
            str(opts.get("type", "act")),
            state_dim=spec.state_dim,
            action_low=spec.joint_low,
            action_high=spec.joint_high,
            env_keys=env_keys,
            env_dim=int(sum(dims)),
            env_scale=float(opts.get("env_scale", 1.0)),
            cameras=tuple((c, *sizes[c]) for c in cams),
            chunk_size=int(opts.get("chunk_size", 10)),
            dt=spec.dt,
            units=units,
            task=str(opts.get("instruction", "")),
            joint_names=spec.joint_names,
            **overrides,
        )
    except LeRobotPolicyUnavailable as e:
        raise ConfigError(str(e)) from None


def vla_backbone(source: object) -> Path:
    """`policy.backbone`: `tiny` (a small random SmolVLM generated here, its tokenizer trained on
    the sim tasks' instructions) or a local SmolVLM directory (downloaded on a connected machine)."""
    from policies.tiny_backbone import (
        BackboneFilesMissing,
        check_backbone_dir,
        tiny_smolvlm_for,
    )
    from sim import INSTRUCTIONS

    if not source:
        raise ConfigError(
            "policy=smolvla needs policy.backbone: tiny (generated here, random weights) or a local "
            "SmolVLM directory (config.json, processor and tokenizer files); the hub is unreachable"
        )
    if str(source) == "tiny":
        return tiny_smolvlm_for(list(INSTRUCTIONS.values()))
    try:
        return check_backbone_dir(Path(str(source)).expanduser())
    except BackboneFilesMissing as e:
        raise ConfigError(f"policy.backbone: {e}") from None

"""Checkpoints as single safetensors files, written atomically (temp file, fsync, rename).

Tensors: `<module>/<param>` for every module of the algorithm (`actor/...` is the published
policy), `<opt>/state/<i>/<key>` for optimiser
state. Metadata (strings): `meta` JSON with counters, config, spec signature and architecture;
`<opt>/param_groups` JSON. Nothing is unpickled on load.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from robo_async.learner.algorithms.base import Algorithm

NAME = re.compile(r"ckpt_(\d{9})\.safetensors$")

log = logging.getLogger(__name__)


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used: none at the path, unreadable, not ours, or of another
    algorithm or architecture than the run builds. The message names the file and what to do."""


def atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def save(directory: Path, algo: Algorithm, meta: dict[str, object], keep: int = 3) -> Path:
    """Every module and optimiser of the algorithm, with `meta` (counters, config), atomically."""
    directory.mkdir(parents=True, exist_ok=True)
    tensors, metadata = state(algo)
    metadata["meta"] = json.dumps(meta)
    path = directory / f"ckpt_{int(meta['updates']):09d}.safetensors"
    atomic_write(path, st_save(tensors, metadata))
    for old in sorted(list_checkpoints(directory))[:-keep]:
        old.unlink(missing_ok=True)
    return path


def state(algo: Algorithm) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Every module's tensors and every optimiser's state (CPU copies) and param groups (JSON), as
    a checkpoint holds them; `restore` loads them back (a checkpoint, or learner replicas' start)."""
    tensors: dict[str, torch.Tensor] = {}
    metadata: dict[str, str] = {}
    for name, module in algo.modules().items():
        for k, v in module.state_dict().items():
            tensors[f"{name}/{k}"] = v.detach().cpu().clone().contiguous()
    for name, opt in algo.optimizers().items():
        sd = opt.state_dict()
        metadata[f"{name}/param_groups"] = json.dumps(sd["param_groups"])
        for idx, st in sd["state"].items():
            for k, v in st.items():
                tensors[f"{name}/state/{idx}/{k}"] = torch.as_tensor(v).detach().cpu().clone().contiguous()
    return tensors, metadata


def list_checkpoints(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("ckpt_*.safetensors") if NAME.search(p.name))


def resolve(path: Path) -> Path:
    """A checkpoint file, or the newest one in a run directory or its `checkpoints/`."""
    if path.is_file():
        return path
    for d in (path / "checkpoints", path):
        found = list_checkpoints(d) if d.is_dir() else []
        if found:
            return found[-1]
    raise CheckpointError(f"no checkpoint found at {path} (expected a .safetensors file or a run directory)")


def read(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Tensors and metadata of a checkpoint file, validated as safetensors."""
    try:
        data = path.read_bytes()
        tensors = st_load(data)
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
    except Exception as e:  # noqa: BLE001 - safetensors raises several types for a corrupt file
        raise CheckpointError(f"checkpoint {path} is unreadable ({e}); pick an older one") from None
    if "meta" not in metadata:
        raise CheckpointError(f"{path} is not a robo_async checkpoint (no 'meta')")
    return tensors, metadata


def meta_of(metadata: dict[str, str]) -> dict[str, object]:
    return json.loads(metadata["meta"])


def module_state(tensors: dict[str, torch.Tensor], name: str) -> dict[str, torch.Tensor]:
    prefix = f"{name}/"
    return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix) and "/state/" not in k}


def restore(algo: Algorithm, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    if "log_alpha" in tensors:  # SAC checkpoints from before the algorithm seam
        tensors = {**tensors, "temperature/log_alpha": tensors["log_alpha"]}
    for name, module in algo.modules().items():
        module.load_state_dict(module_state(tensors, name))
    for name, opt in algo.optimizers().items():
        state: dict[int, dict[str, torch.Tensor]] = {}
        prefix = f"{name}/state/"
        for k, v in tensors.items():
            if k.startswith(prefix):
                idx, key = k[len(prefix) :].split("/", 1)
                state.setdefault(int(idx), {})[key] = v
        groups = json.loads(metadata[f"{name}/param_groups"])
        if [len(g["params"]) for g in groups] != [len(g["params"]) for g in opt.param_groups]:
            # e.g. SAC's twin critics (12 tensors) saved before the critic ensemble (6): the weights
            # were converted (policies.critics.load_twin_heads), Adam's moments cannot be
            log.warning("checkpoint: %s was saved for another layout of its parameters; it starts afresh", name)
            continue
        opt.load_state_dict({"state": state, "param_groups": groups})

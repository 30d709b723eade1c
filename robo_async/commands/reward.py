"""A learned reward for robots with no reward of their own: a success classifier on camera frames.

    robo-async reward train from=<run dir | store dir> cameras=[front] [...]   # the keys: --help
    robo-async train ... reward_classifier=<dir>     # actors score each tick's frames with it

Labels come from the store: a row's `success` (the task's judgement in sim; an operator's success
label on a real arm, which marks the frame that ends the episode) labels the frame after its
action (`next_obs/<camera>`); every other frame is a negative. Episodes are split into training and
held-out ones (never frames of one episode on both sides). The threshold is the lowest one (and
at least 0.5) whose precision on the training episodes reaches `precision` (a false success ends an
episode early and pays a reward that was not earned: worse than a missed one); precision, recall and the Brier score
on the held-out episodes are reported and saved beside the weights (`reward_classifier.json`).

On an actor, `ClassifierReward` (policies/reward.py, with the network) wraps the robot: each tick's outcome is the
classifier's (reward 1
and success when p >= threshold, which ends the episode), computed on the control thread from the
frames the robot just returned (a small CNN at 64 px: about a millisecond here).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from policies.augment import random_shift
from policies.reward import ClassifierMeta, RewardError, SuccessClassifier, SuccessNet
from robo_async.commands.args import HELP, arg, help_text, parse, usage, wants_help
from robo_async.config import UserError

log = logging.getLogger(__name__)


# --- data --------------------------------------------------------------------------------------
def labelled_frames(
    store, cameras: tuple[str, ...], tables: tuple[str, ...] = ("online", "demos", "interventions")
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(frames [N, n_cams, H, W, 3], labels [N], episode ids [N]) of every stored transition:
    the frame after each action and its `success`."""
    have = {c.name for c in store.schema.images} if store.schema is not None else set()
    missing = [c for c in cameras if f"next_obs/{c}" not in have]
    if missing:
        raise RewardError(
            f"the store at {store.path} has no frames of cameras {missing} "
            f"(it has {sorted(n.removeprefix('next_obs/') for n in have if n.startswith('next_obs/'))})"
        )
    frames, labels, episodes = [], [], []
    episode, current = -1, {}
    for table in tables:
        if table == "interventions":
            continue  # its rows are also in online (same frames): counted once
        for _, actor, _, row in store.records(table):
            key = (table, actor)
            if key not in current:
                episode += 1
                current[key] = episode
            frames.append(np.stack([row[f"next_obs/{c}"] for c in cameras]))
            labels.append(bool(row["success"]))
            episodes.append(current[key])
            if row["terminated"] or row["truncated"]:
                del current[key]
    if not frames:
        raise RewardError(f"the store at {store.path} holds no transitions")
    return np.stack(frames), np.asarray(labels), np.asarray(episodes)


def _threshold(p: np.ndarray, y: np.ndarray, precision: float) -> float:
    """The lowest threshold whose precision on (p, y) reaches `precision` (1.0 if none does)."""
    for t in np.unique(np.concatenate([p, [1.0]])):
        pred = p >= t
        if pred.any() and (y[pred].mean() >= precision):
            return float(t)
    return 1.0


def _scores(p: np.ndarray, y: np.ndarray, t: float) -> tuple[float, float, float]:
    pred = p >= t
    tp = float((pred & y).sum())
    precision = tp / pred.sum() if pred.any() else (1.0 if not y.any() else 0.0)
    recall = tp / y.sum() if y.any() else 1.0
    return float(precision), float(recall), float(np.mean((p - y) ** 2))


def train_classifier(
    frames: np.ndarray,
    labels: np.ndarray,
    episodes: np.ndarray,
    cameras: tuple[str, ...],
    image_size: int = 64,
    updates: int = 600,
    holdout: float = 0.25,
    precision: float = 0.95,
    seed: int = 0,
    init: SuccessClassifier | None = None,
    progress: Callable[[int, float], None] | None = None,
) -> SuccessClassifier:
    if not labels.any() or labels.all():
        raise RewardError(
            f"the reward classifier needs success and failure frames; these {len(labels)} frames "
            f"are all {'successes' if labels.all() else 'failures'}"
        )
    rng = np.random.default_rng(seed)
    ids = rng.permutation(np.unique(episodes))
    n_hold = max(1, int(round(len(ids) * holdout))) if holdout > 0 and len(ids) > 1 else 0
    held = np.isin(episodes, ids[:n_hold])
    tr, ho = ~held, held
    if not labels[tr].any():
        raise RewardError("no success frame in the training episodes; record more successful episodes")
    torch.manual_seed(seed)
    net = SuccessNet(len(cameras), image_size)
    if init is not None:
        if tuple(init.meta.cameras) != tuple(cameras) or init.meta.image_size != image_size:
            raise RewardError(
                f"init classifier is for cameras {list(init.meta.cameras)} at {init.meta.image_size} px, "
                f"not {list(cameras)} at {image_size} px"
            )
        net.load_state_dict(init.net.state_dict())
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    x_tr, y_tr = frames[tr], labels[tr].astype(np.float32)
    pos_weight = torch.tensor((1 - y_tr.mean()) / max(y_tr.mean(), 1e-6))  # both classes weigh the same
    gen = torch.Generator().manual_seed(seed)
    batch, losses = 64, []
    for step in range(1, updates + 1):
        j = rng.integers(0, len(x_tr), min(batch, len(x_tr)))
        x = random_shift(torch.as_tensor(x_tr[j]), 4, gen)  # DrQ shift: a camera that moved a little
        loss = nn.functional.binary_cross_entropy_with_logits(net(x), torch.as_tensor(y_tr[j]), pos_weight=pos_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if progress is not None and (step % 100 == 0 or step == updates):
            progress(step, float(np.mean(losses[-100:])))
    clf = SuccessClassifier(net, ClassifierMeta(tuple(cameras), image_size, 0.5, 0, 0, 0, 0, 0, 0, 0))

    def prob(x: np.ndarray) -> np.ndarray:
        return (
            np.concatenate(
                [
                    clf.probability(dict(zip(cameras, np.moveaxis(x[i : i + 256], 1, 0), strict=False)))
                    for i in range(0, len(x), 256)
                ]
            )
            if len(x)
            else np.zeros(0)
        )

    # at least 0.5 (the classes weigh the same): a net that fits its training frames too well
    # would otherwise get a threshold near 0 there
    t = max(0.5, _threshold(prob(x_tr), labels[tr], precision))
    p_ho = prob(frames[ho])
    prec, rec, brier = _scores(p_ho, labels[ho], t) if ho.any() else (math.nan, math.nan, math.nan)
    clf.meta = ClassifierMeta(
        tuple(cameras),
        image_size,
        t,
        prec,
        rec,
        brier,
        int(ho.sum()),
        int(labels[ho].sum()),
        int(tr.sum()),
        int(labels[tr].sum()),
    )
    return clf


# --- the command -------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class RewardTrainArgs:
    """`robo-async reward train`: a success classifier on camera frames (a learned reward)."""

    source: Path = arg(
        metavar="run dir | store dir", help="a run directory or a store directory with labelled episodes", key="from"
    )
    cameras: tuple[str, ...] = arg(metavar="front,...", help="the cameras it looks at, e.g. [front]")
    out: Path | None = arg(None, metavar="dir", help="where it is saved (default: <run dir>/reward_classifier)")
    updates: int = arg(600, help="gradient steps")
    image_size: int = arg(64, help="frame size in pixels (>= 16)")
    holdout: float = arg(0.25, help="share of episodes held out for the reported scores (0 <= holdout < 1)")
    precision: float = arg(0.95, help="precision the threshold must reach on the training episodes")
    init: Path | None = arg(None, metavar="classifier dir", help="a classifier directory to start from")
    seed: int = arg(0, help="the seed of the split, the weights and the batches")


def usage_lines() -> str:
    """This command's usage, for `robo-async --help`."""
    return usage(RewardTrainArgs, "reward train")


def main(argv: list[str]) -> int:
    """`robo-async reward train from=<run dir | store dir> cameras=[front] ...`"""
    from robo_async.buffer import tools
    from robo_async.buffer.lmdb_store import PersistentReplayStore, StoreError

    if not argv or argv[0] in HELP:
        print(help_text(RewardTrainArgs, "reward train", __doc__))
        return 0
    if argv[0] != "train":
        raise UserError(f"unknown reward command '{argv[0]}'; commands: train (robo-async reward --help)")
    if wants_help(argv[1:]):
        print(help_text(RewardTrainArgs, "reward train", __doc__))
        return 0
    opts = parse(RewardTrainArgs, argv[1:], "reward train")
    src, cams = opts.source, opts.cameras
    updates, size, holdout, precision = opts.updates, opts.image_size, opts.holdout, opts.precision
    if not cams or updates < 1 or size < 16 or not 0 <= holdout < 1 or not 0 < precision <= 1:
        raise UserError(
            "reward train: cameras must name at least one camera, updates >= 1, image_size >= 16, "
            "0 <= holdout < 1, 0 < precision <= 1"
        )
    out = opts.out or (src / "reward_classifier" if (src / "replay").exists() else src.parent / "reward_classifier")
    try:
        init = SuccessClassifier.load(opts.init) if opts.init else None
        store = PersistentReplayStore(tools.store_path(src)).open(readonly=True)
        try:
            frames, labels, episodes = labelled_frames(store, cams)
        finally:
            store.close()
        print(
            f"{len(labels):,} frames from {len(np.unique(episodes))} episodes, {int(labels.sum()):,} of them successes"
        )
        clf = train_classifier(
            frames,
            labels,
            episodes,
            cams,
            size,
            updates,
            holdout,
            precision,
            opts.seed,
            init,
            progress=lambda u, loss: print(f"  update {u}/{updates}: loss {loss:.4f}", flush=True),
        )
    except (RewardError, StoreError) as e:
        raise UserError(str(e)) from None
    clf.save(out)
    m = clf.meta
    print(
        f"threshold {m.threshold:.3f} (precision >= {precision:.0%} on the training episodes); held out "
        f"({m.heldout_frames:,} frames, {m.heldout_positives} successes): precision {m.precision:.1%}, "
        f"recall {m.recall:.1%}, Brier {m.brier:.4f}"
    )
    print(f"saved to {out} (use it: robo-async train ... reward_classifier={out})")
    return 0

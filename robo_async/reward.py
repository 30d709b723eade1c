"""A learned reward for robots with no reward of their own: a success classifier on camera frames.

    robo-async reward train from=<run dir | store dir> cameras=[front] [out=<dir>] [updates=600]
                            [image_size=64] [holdout=0.25] [precision=0.95] [init=<classifier dir>]
    robo-async train ... reward_classifier=<dir>     # actors score each tick's frames with it

Labels come from the store: a row's `success` (the task's judgement in sim; an operator's success
label on a real arm, which marks the frame that ends the episode) labels the frame after its
action (`next_obs/<camera>`); every other frame is a negative. Episodes are split into training and
held-out ones (never frames of one episode on both sides). The threshold is the lowest one (and
at least 0.5) whose precision on the training episodes reaches `precision` (a false success ends an
episode early and pays a reward that was not earned: worse than a missed one); precision, recall and the Brier score
on the held-out episodes are reported and saved beside the weights (`reward_classifier.json`).

On an actor, `ClassifierReward` wraps the robot: each tick's outcome is the classifier's (reward 1
and success when p >= threshold, which ends the episode), computed on the control thread from the
frames the robot just returned (a small CNN at 64 px: about a millisecond here).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from hal.robot import Robot
from hal.spec import Observation, Outcome, RobotSpec
from policies.augment import random_shift
from policies.flow import ImageEncoder

log = logging.getLogger(__name__)
WEIGHTS, META = "reward_classifier.safetensors", "reward_classifier.json"


class RewardError(ValueError):
    """The data or the classifier does not fit (one line for the user)."""


class SuccessNet(nn.Module):
    def __init__(self, cameras: int, image_size: int) -> None:
        super().__init__()
        self.encoder = ImageEncoder(cameras, image_size)
        self.head = nn.Sequential(nn.Linear(self.encoder.out * cameras, 64), nn.SiLU(), nn.Linear(64, 1))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images [B, n_cams, H, W, 3] (uint8 values) -> success logits [B]."""
        return self.head(self.encoder(images)).squeeze(-1)


@dataclass(frozen=True)
class ClassifierMeta:
    cameras: tuple[str, ...]
    image_size: int
    threshold: float
    precision: float  # on held-out episodes, at the threshold
    recall: float
    brier: float
    heldout_frames: int
    heldout_positives: int
    train_frames: int
    train_positives: int


class SuccessClassifier:
    def __init__(self, net: SuccessNet, meta: ClassifierMeta) -> None:
        self.net, self.meta = net.eval(), meta

    def probability(self, frames: dict[str, np.ndarray]) -> np.ndarray:
        """frames: camera -> [B, H, W, 3] uint8 -> p(success) [B]."""
        missing = [c for c in self.meta.cameras if c not in frames]
        if missing:
            raise RewardError(f"the reward classifier needs cameras {list(self.meta.cameras)}; missing {missing}")
        x = torch.as_tensor(np.stack([frames[c] for c in self.meta.cameras], axis=1))
        with torch.no_grad():
            return torch.sigmoid(self.net(x)).numpy()

    def save(self, out: Path) -> Path:
        out.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in self.net.state_dict().items()}, str(out / WEIGHTS))
        (out / META).write_text(json.dumps(asdict(self.meta), indent=1))
        return out

    @staticmethod
    def load(path: str | Path) -> "SuccessClassifier":
        path = Path(path)
        if not (path / WEIGHTS).exists() or not (path / META).exists():
            raise RewardError(f"{path} holds no reward classifier ({WEIGHTS} and {META}); "
                              f"train one with `robo-async reward train`")
        d = json.loads((path / META).read_text())
        meta = ClassifierMeta(**{**d, "cameras": tuple(d["cameras"])})
        net = SuccessNet(len(meta.cameras), meta.image_size)
        try:
            net.load_state_dict(load_file(str(path / WEIGHTS)))
        except RuntimeError as e:
            raise RewardError(f"{path / WEIGHTS} does not fit a classifier for cameras {list(meta.cameras)} at "
                              f"{meta.image_size} px: {str(e).splitlines()[-1].strip()}") from None
        return SuccessClassifier(net, meta)


# --- data --------------------------------------------------------------------------------------
def labelled_frames(store, cameras: tuple[str, ...], tables: tuple[str, ...] = ("online", "demos", "interventions")
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(frames [N, n_cams, H, W, 3], labels [N], episode ids [N]) of every stored transition:
    the frame after each action and its `success`."""
    have = {c.name for c in store.schema.images} if store.schema is not None else set()
    missing = [c for c in cameras if f"next_obs/{c}" not in have]
    if missing:
        raise RewardError(f"the store at {store.path} has no frames of cameras {missing} "
                          f"(it has {sorted(n.removeprefix('next_obs/') for n in have if n.startswith('next_obs/'))})")
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


def train_classifier(frames: np.ndarray, labels: np.ndarray, episodes: np.ndarray, cameras: tuple[str, ...],
                     image_size: int = 64, updates: int = 600, holdout: float = 0.25, precision: float = 0.95,
                     seed: int = 0, init: SuccessClassifier | None = None,
                     progress: Callable[[int, float], None] | None = None) -> SuccessClassifier:
    if not labels.any() or labels.all():
        raise RewardError(f"the reward classifier needs success and failure frames; these {len(labels)} frames "
                          f"are all {'successes' if labels.all() else 'failures'}")
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
            raise RewardError(f"init classifier is for cameras {list(init.meta.cameras)} at {init.meta.image_size} px, "
                              f"not {list(cameras)} at {image_size} px")
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
        return np.concatenate([clf.probability(dict(zip(cameras, np.moveaxis(x[i:i + 256], 1, 0))))
                               for i in range(0, len(x), 256)]) if len(x) else np.zeros(0)

    # at least 0.5 (the classes weigh the same): a net that fits its training frames too well
    # would otherwise get a threshold near 0 there
    t = max(0.5, _threshold(prob(x_tr), labels[tr], precision))
    p_ho = prob(frames[ho])
    prec, rec, brier = _scores(p_ho, labels[ho], t) if ho.any() else (math.nan, math.nan, math.nan)
    clf.meta = ClassifierMeta(tuple(cameras), image_size, t, prec, rec, brier, int(ho.sum()), int(labels[ho].sum()),
                              int(tr.sum()), int(labels[tr].sum()))
    return clf


# --- on the actor --------------------------------------------------------------------------
class ClassifierReward(Robot):
    """A robot whose outcome is the success classifier's on the frames it just returned: reward
    1.0 and success (ending the episode) when p >= threshold, else 0. Everything else passes through."""

    def __init__(self, robot: Robot, classifier: SuccessClassifier) -> None:
        cams = {c.name for c in robot.spec.cameras}
        missing = [c for c in classifier.meta.cameras if c not in cams]
        if missing:
            raise RewardError(f"reward_classifier needs cameras {list(classifier.meta.cameras)}; {robot.spec.name} "
                              f"has {sorted(cams)} (add them with task.cameras=[...])")
        self.robot, self.classifier = robot, classifier
        self._last: Observation | None = None
        self.last_p = 0.0

    @property
    def spec(self) -> RobotSpec:
        return self.robot.spec

    @property
    def inner(self) -> Robot:
        return self.robot

    def __getattr__(self, name: str):  # noqa: ANN204 - the wrapped robot's extras (task, ee_position)
        if name.startswith("_") or name in ("robot", "classifier"):
            raise AttributeError(name)
        return getattr(self.robot, name)

    def connect(self) -> None:
        self.robot.connect()

    def close(self) -> None:
        self.robot.close()

    def reset(self, *, seed: int | None = None) -> Observation:
        self._last = None
        return self.robot.reset(seed=seed)

    def send_action(self, action: np.ndarray) -> np.ndarray:
        self._last = None
        return self.robot.send_action(action)

    def send_checked_action(self, action: np.ndarray) -> np.ndarray:
        self._last = None
        return self.robot.send_checked_action(action)

    def get_observation(self) -> Observation:
        """One reading per tick: the one `outcome()` scored, if it came first."""
        if self._last is None:
            self._last = self.robot.get_observation()
        return self._last

    def outcome(self) -> Outcome:
        if self._last is None:  # the loop reads the outcome before the observation: read it now
            self._last = self.robot.get_observation()
        frames = {c: self._last.images[c][None] for c in self.classifier.meta.cameras}
        self.last_p = float(self.classifier.probability(frames)[0])
        success = self.last_p >= self.classifier.meta.threshold
        return Outcome(reward=1.0 if success else 0.0, terminated=success, success=success)


# --- the command -------------------------------------------------------------------------------
def _cameras(value: str) -> tuple[str, ...]:
    return tuple(c for c in value.strip("[]").replace(" ", "").split(",") if c)


def main(args: list[str]) -> int:
    """`robo-async reward train from=<run dir | store dir> cameras=[front] ...`"""
    from robo_async.buffer import tools
    from robo_async.buffer.lmdb_store import PersistentReplayStore, StoreError
    from robo_async.config import UserError

    if not args or args[0] != "train":
        raise UserError("usage: robo-async reward train from=<run dir | store dir> cameras=[front] [out=<dir>] "
                        "[updates=600] [image_size=64] [holdout=0.25] [precision=0.95] [init=<classifier dir>] [seed=0]")
    kv = dict(a.split("=", 1) for a in args[1:] if "=" in a)
    bad = [a for a in args[1:] if "=" not in a] + sorted(set(kv) - {"from", "cameras", "out", "updates", "image_size",
                                                                     "holdout", "precision", "init", "seed"})
    if bad:
        raise UserError(f"reward train: unknown arguments {bad}")
    if "from" not in kv or "cameras" not in kv:
        raise UserError("reward train needs from=<run dir | store dir> and cameras=[...]")
    src = Path(kv["from"])
    try:
        cams = _cameras(kv["cameras"])
        updates, size, seed = int(kv.get("updates", 600)), int(kv.get("image_size", 64)), int(kv.get("seed", 0))
        holdout, precision = float(kv.get("holdout", 0.25)), float(kv.get("precision", 0.95))
    except ValueError as e:
        raise UserError(f"reward train: {e}") from None
    if not cams or updates < 1 or size < 16 or not 0 <= holdout < 1 or not 0 < precision <= 1:
        raise UserError("reward train: cameras must name at least one camera, updates >= 1, image_size >= 16, "
                        "0 <= holdout < 1, 0 < precision <= 1")
    out = Path(kv.get("out", src / "reward_classifier" if (src / "replay").exists() else src.parent / "reward_classifier"))
    try:
        init = SuccessClassifier.load(kv["init"]) if kv.get("init") else None
        store = PersistentReplayStore(tools.store_path(src)).open(readonly=True)
        try:
            frames, labels, episodes = labelled_frames(store, cams)
        finally:
            store.close()
        print(f"{len(labels):,} frames from {len(np.unique(episodes))} episodes, {int(labels.sum()):,} of them successes")
        clf = train_classifier(frames, labels, episodes, cams, size, updates, holdout, precision, seed, init,
                               progress=lambda u, loss: print(f"  update {u}/{updates}: loss {loss:.4f}", flush=True))
    except (RewardError, StoreError) as e:
        raise UserError(str(e)) from None
    clf.save(out)
    m = clf.meta
    print(f"threshold {m.threshold:.3f} (precision >= {precision:.0%} on the training episodes); held out "
          f"({m.heldout_frames:,} frames, {m.heldout_positives} successes): precision {m.precision:.1%}, "
          f"recall {m.recall:.1%}, Brier {m.brier:.4f}")
    print(f"saved to {out} (use it: robo-async train ... reward_classifier={out})")
    return 0

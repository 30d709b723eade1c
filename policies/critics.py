"""Q-function ensembles: `n` critics evaluated as one batched network (one `baddbmm` per layer for
all members), as RLPD (Ball et al. 2023) and REDQ (Chen et al. 2021) use them:

    critic = CriticEnsemble(obs_dim + act_dim, hidden=(256, 256), n=10, layer_norm=True)
    qs = critic(torch.cat([obs, act], -1))              # [n, B]: every member's Q
    target = subset_min(critic_target(x_next), 2, gen)   # [B]: the min over 2 members drawn at random

With `n=2` and every member in the target it is SAC's clipped double Q. LayerNorm after each hidden
layer (per member, its own scale and shift) keeps Q bounded where the data is thin, which is what
lets RLPD update 10-20 times per environment step without the critics diverging.

Checkpoints of the twin critics these replace (`q1.*`, `q2.*`: `nn.Sequential` heads with the
same layer order) load into a two-member ensemble (`load_twin_heads`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn
from torch.nn import functional as F

ACTIVATIONS = {"relu": nn.ReLU, "silu": nn.SiLU}


class EnsembleLinear(nn.Module):
    """`n` independent linear layers applied at once: [n, B, d_in] (or [B, d_in], shared by every
    member) -> [n, B, d_out]. Initialised per member as `nn.Linear` is."""

    def __init__(self, n: int, d_in: int, d_out: int) -> None:
        super().__init__()
        self.n = n
        bound = 1.0 / math.sqrt(d_in)
        w = torch.empty(n, d_in, d_out)
        for i in range(n):  # kaiming_uniform(a=sqrt(5)) as nn.Linear, member by member
            nn.init.kaiming_uniform_(w[i].T, a=math.sqrt(5))
        self.weight = nn.Parameter(w)
        self.bias = nn.Parameter(torch.empty(n, 1, d_out).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[n, B, d_in] (or [B, d_in], the same input for every member) -> [n, B, d_out]."""
        if x.dim() == 2:
            x = x.unsqueeze(0).expand(self.n, *x.shape)
        return torch.baddbmm(self.bias, x, self.weight)


class EnsembleLayerNorm(nn.Module):
    """LayerNorm over the last dimension with a scale and shift per member: [n, B, d]."""

    def __init__(self, n: int, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n, 1, d))
        self.bias = nn.Parameter(torch.zeros(n, 1, d))
        # an identity affine for F.layer_norm: on CPU its kernel without one runs a scalar loop,
        # with one a vectorised loop (twice as fast, forward and backward; the same values)
        self.register_buffer("_one", torch.ones(d), persistent=False)
        self.register_buffer("_zero", torch.zeros(d), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[n, B, d] normalised over d, then each member's scale and shift."""
        return F.layer_norm(x, x.shape[-1:], self._one, self._zero) * self.weight + self.bias


class CriticEnsemble(nn.Module):
    """`n` Q heads over the same input (features and action, concatenated by the caller): [B, D]
    -> [n, B]. Hidden layers are Linear, then LayerNorm when `layer_norm`, then the activation."""

    def __init__(
        self, in_dim: int, hidden: Sequence[int], n: int = 2, layer_norm: bool = False, activation: str = "relu"
    ) -> None:
        super().__init__()
        if n < 1:
            raise ValueError(f"a critic ensemble needs at least one member, not {n}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"critic activation must be one of {sorted(ACTIVATIONS)}, not {activation!r}")
        self.n = n
        layers: list[nn.Module] = []
        dims = [in_dim, *hidden]
        for a, b in zip(dims[:-1], dims[1:], strict=False):
            layers += [EnsembleLinear(n, a, b), *([EnsembleLayerNorm(n, b)] if layer_norm else [])]
            layers.append(ACTIVATIONS[activation]())
        layers.append(EnsembleLinear(n, dims[-1], 1))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[B, D] -> every member's Q, [n, B]."""
        return self.net(x).squeeze(-1)


@contextmanager
def frozen(module: nn.Module) -> Iterator[None]:
    """Inside: `module`'s trainable parameters get no gradient (the actor's loss backpropagates
    through the critics to the action only: their weights' gradients would be computed, then
    thrown away by the critic optimiser's next `zero_grad`). Restored on leaving."""
    params = [p for p in module.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)


def subset_min(qs: torch.Tensor, subset: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """The min over `subset` members of an ensemble's Q values [n, B], drawn at random without
    replacement (one draw per call, as RLPD and REDQ): [B]. `subset >= n`: the min over all."""
    n = qs.shape[0]
    if subset >= n:
        return qs.min(0).values
    idx = torch.randperm(n, generator=generator)[:subset]
    return qs[idx.to(qs.device)].min(0).values


def policy_value(qs: torch.Tensor, subset: int) -> torch.Tensor:
    """What the actor maximises, from an ensemble's Q values [n, B]: the min over all members
    (SAC's clipped double Q) when every member is in the target, else their mean (REDQ, RLPD)."""
    return qs.min(0).values if subset >= qs.shape[0] else qs.mean(0)


def load_twin_heads(
    state: dict[str, torch.Tensor], prefix: str, heads: tuple[str, str] = ("q1", "q2"), into: str = ""
) -> None:
    """Rewrite, in place, a state dict of twin `nn.Sequential` heads (`<prefix>q1.<i>.weight` [out,
    in], ...) into a two-member `CriticEnsemble`'s at `<prefix><into>` (`net.<i>.weight` [2, in,
    out], ...), so checkpoints written before the ensemble still load. A state dict without them
    is left alone."""
    first = f"{prefix}{heads[0]}."
    if not any(k.startswith(first) for k in state):
        return
    for key in [k for k in state if k.startswith(first)]:
        rest = key[len(first) :]  # e.g. "0.weight"
        a, b = state.pop(key), state.pop(f"{prefix}{heads[1]}.{rest}")
        layer, name = rest.rsplit(".", 1)
        if a.dim() == 2:  # a Linear's weight: [out, in] -> [in, out]
            state[f"{prefix}{into}net.{rest}"] = torch.stack([a.T, b.T])
        else:  # a Linear's or a LayerNorm's bias or scale: [out] -> [1, out]
            state[f"{prefix}{into}net.{layer}.{name}"] = torch.stack([a, b]).unsqueeze(1)

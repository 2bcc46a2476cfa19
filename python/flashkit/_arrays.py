"""What the Python layer must know about its arrays before calling the extension: which kind
they are (numpy or torch), that they have the rank the layout needs, and the shapes of the outputs
it allocates. Everything else (dtypes, devices, strides, sizes) the C++ layer checks and reports
as FlashkitError naming the argument.
"""

from __future__ import annotations

import numpy as np

try:
    import torch
except ImportError:  # the numpy half of the package works without torch
    torch = None


def is_torch(x) -> bool:
    return torch is not None and isinstance(x, torch.Tensor)


def array_kind(**arrays) -> str:
    """'torch' or 'numpy' for the given non-None arrays, which must all be of one kind."""
    kinds = {}
    for name, x in arrays.items():
        if x is None:
            continue
        if is_torch(x):
            kinds[name] = "torch"
        elif isinstance(x, np.ndarray):
            kinds[name] = "numpy"
        else:
            raise TypeError(
                f"{name}: expected a numpy array or a torch tensor, got {type(x).__name__}"
            )
    if len(set(kinds.values())) > 1:
        first = next(iter(kinds))
        other = next(n for n in kinds if kinds[n] != kinds[first])
        raise TypeError(
            f"{other}: expected a {kinds[first]} array like {first}, got a {kinds[other]} one"
        )
    return next(iter(kinds.values()), "numpy")


def expect_ndim(name: str, x, ndim: int, layout: str) -> None:
    if x.ndim != ndim:
        raise ValueError(
            f"{name}: expected a rank-{ndim} {layout} array, got shape {tuple(x.shape)}"
        )


def token_layout(varlen: bool) -> tuple[int, str]:
    """Rank and description of q/k/v: FlashAttention's BSHD, or packed THD with varlen."""
    if varlen:
        return 3, "[total_tokens, heads, head_dim] (varlen)"
    return 4, "[batch, seqlen, heads, head_dim]"


def check_qkv(q, k, v, varlen: bool) -> None:
    ndim, layout = token_layout(varlen)
    for name, x in (("q", q), ("k", k), ("v", v)):
        expect_ndim(name, x, ndim, layout)


def out_shape(q, v) -> tuple[int, ...]:
    """out is q's shape with v's head dim."""
    return (*q.shape[:-1], v.shape[-1])


def lse_shape(q, varlen: bool) -> tuple[int, ...]:
    """lse is [batch, heads, seqlen_q], or [heads, total_q] with varlen."""
    if varlen:
        return (q.shape[1], q.shape[0])
    return (q.shape[0], q.shape[2], q.shape[1])

"""Reference attention for the torch tests: torch SDPA's math backend with the mask built as an
additive bias (flashkit's mask rules written from their definition), the same written out op by
op in the inputs' dtype (the plain same-precision baseline of the gradient tests), and an eager
softcap path SDPA cannot express. Layout BSHD like flashkit."""

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def mask_bias(
    nq,
    nk,
    *,
    causal=False,
    bottom_right=True,
    window=(-1, -1),
    alibi=None,
    dtype=torch.float64,
    device="cpu",
):
    """Additive bias [.., nq, nk]: 0 or -inf from causal/window, minus ALiBi distances."""
    i = torch.arange(nq, device=device)[:, None]
    j = torch.arange(nk, device=device)[None, :]
    diag = i + (nk - nq if bottom_right else 0)
    ok = torch.ones(nq, nk, dtype=torch.bool, device=device)
    if causal:
        ok &= j <= diag
    if window[0] >= 0:
        ok &= j >= diag - window[0]
    if window[1] >= 0:
        ok &= j <= diag + window[1]
    bias = torch.zeros(nq, nk, dtype=dtype, device=device).masked_fill(~ok, float("-inf"))
    if alibi is not None:  # [H] or [B, H] -> [.., H, nq, nk]
        bias = bias - alibi.to(dtype)[..., None, None] * (diag - j).abs().to(dtype)
        if alibi.ndim == 1:
            bias = bias[None]
    return bias


def sdpa(q, k, v, *, scale=None, **mask):
    """SDPA (math backend) on BSHD tensors with flashkit's mask semantics; GQA via enable_gqa."""
    bias = mask_bias(q.shape[1], k.shape[1], **mask, dtype=q.dtype, device=q.device)
    with sdpa_kernel([SDPBackend.MATH]):
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            attn_mask=bias,
            scale=scale,
            enable_gqa=q.shape[2] != k.shape[2],
        )
    return out.transpose(1, 2)


def plain(q, k, v, *, scale=None, **mask):
    """Attention op by op in the inputs' dtype: S = QK^T, the softmax and PV each rounded to it,
    and so are their gradients under autograd (FlashAttention's tests call this attention_ref with
    upcast=False). The baseline for 16-bit gradients: SDPA's math backend computes 16-bit inputs
    in fp32 and rounds once, which no 16-bit kernel's dQ can match, since dS is rounded to 16 bits
    before dQ = dS K (docs/kernels/sm80_bwd.md, v6). Every query must see a key, as for sdpa."""
    group = q.shape[2] // k.shape[2]
    k, v = (x.repeat_interleave(group, dim=2) for x in (k, v))
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = torch.einsum("bihd,bjhd->bhij", q, k) * scale
    bias = mask_bias(q.shape[1], k.shape[1], **mask, dtype=s.dtype, device=s.device)
    return torch.einsum("bhij,bjhd->bihd", (s + bias).softmax(-1), v)


def eager_softcap(q, k, v, *, softcap, causal=False):
    """Softcapped attention, written out (SDPA has no softcap)."""
    group = q.shape[2] // k.shape[2]
    k, v = (x.repeat_interleave(group, dim=2) for x in (k, v))
    s = torch.einsum("bihd,bjhd->bhij", q, k) / q.shape[-1] ** 0.5
    s = softcap * torch.tanh(s / softcap)
    s = s + mask_bias(q.shape[1], k.shape[1], causal=causal, dtype=s.dtype, device=s.device)
    return torch.einsum("bhij,bjhd->bihd", s.softmax(-1), v)

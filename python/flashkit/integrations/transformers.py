"""Hugging Face transformers integration: `attn_implementation="flashkit"`.

    import flashkit.integrations.transformers  # registers "flashkit" on import
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="flashkit")

What is handled: causal and bidirectional layers (module.is_causal), GQA/MQA natively (no
repeat_kv: KV heads are shared inside the kernel), sliding windows, softcap, KV caches
(bottom-right causal alignment), and padding. Padding is converted to varlen: the mask function
registered with "flashkit" is transformers' FlashAttention one, which hands the attention a 2D
[batch, kv_len] padding mask (None when nothing is padded); the padded tokens are dropped,
attention runs on packed sequences and the outputs are scattered back (padded query rows get 0).
Packed batches given as cu_seq_lens_q/k keyword arguments (transformers' padding-free
training path) run as varlen directly. The padding path reads sequence lengths on the host, which
synchronizes the device and breaks a torch.compile graph; unpadded batches do neither.
Not supported (NotImplementedError): attention dropout, output_attentions, and 4D custom masks.
Packing given only through position_ids (no cu_seq_lens kwargs) is not detected.

Because its name contains "flash", transformers treats "flashkit" as a FlashAttention build in a few
places; see _skip_flash_preload for the one that needs a patch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

from ..api import attention

NAME = "flashkit"


def _unsupported(dropout, attention_mask, kwargs) -> None:
    if dropout != 0.0:
        raise NotImplementedError(
            f"dropout: flashkit has no attention dropout, got {dropout} "
            "(set the model's attention_dropout to 0 or call model.eval())"
        )
    if kwargs.get("output_attentions", False):
        raise NotImplementedError("output_attentions: flashkit never materializes the weights")
    if attention_mask is not None and attention_mask.ndim != 2:
        raise NotImplementedError(
            f"attention_mask: flashkit takes a 2D padding mask, got shape "
            f"{tuple(attention_mask.shape)} (custom 4D masks are not supported)"
        )


def _cu_seqlens(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Row indices of the kept tokens in the flattened [batch * len] axis, cu_seqlens and the
    longest sequence, from a [batch, len] bool mask."""
    lengths = mask.sum(dim=1, dtype=torch.int32)
    cu = F.pad(torch.cumsum(lengths, dim=0, dtype=torch.int32), (1, 0))
    index = mask.flatten().nonzero().flatten()
    return index, cu, int(lengths.max()) if lengths.numel() else 0


def _pack(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """[B, N, H, d] -> the [tokens, H, d] rows that `index` keeps."""
    return x.reshape(-1, *x.shape[2:])[index]


def _padded(q, k, v, mask, **kw):
    """Attention of a padded batch [B, N, H, d] as varlen over the tokens the mask keeps."""
    mask = mask.bool()
    if mask.shape[1] < k.shape[1]:
        # A static cache is longer than what has been written: the mask covers the valid prefix.
        k, v = k[:, : mask.shape[1]], v[:, : mask.shape[1]]
    b, nq, hq, _ = q.shape
    # Queries are the last nq positions of each row's timeline.
    index_q, cu_q, max_q = _cu_seqlens(mask[:, -nq:])
    index_k, cu_k, max_k = _cu_seqlens(mask)
    out = attention(
        _pack(q, index_q),
        _pack(k, index_k),
        _pack(v, index_k),
        cu_seqlens_q=cu_q,
        cu_seqlens_k=cu_k,
        max_seqlen_q=max_q,
        max_seqlen_k=max_k,
        **kw,
    )
    full = out.new_zeros(b * nq, hq, out.shape[-1])
    full[index_q] = out
    return full.view(b, nq, hq, -1)


def flashkit_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    sliding_window: int | None = None,
    softcap: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: query [B, H, N, d], key/value [B, H_kv, N, d];
    returns (attn_output [B, N, H, d], None)."""
    _unsupported(dropout, attention_mask, kwargs)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    # transformers' window counts the diagonal: sliding_window=w sees w keys up to and including
    # its own position (and w - 1 after it when bidirectional).
    window = (-1, -1) if sliding_window is None else (sliding_window - 1, sliding_window - 1)
    kw = dict(
        softmax_scale=scaling,
        causal=causal,
        window_size=window,
        softcap=softcap or 0.0,
        causal_align="bottom_right",
    )
    # BSHD views of the BHSD inputs: strided, last dim contiguous, no copy.
    q, k, v = (x.transpose(1, 2) for x in (query, key, value))

    if attention_mask is not None:
        return _padded(q, k, v, attention_mask, **kw), None
    if kwargs.get("cu_seq_lens_q") is not None:  # padding-free packed batch (batch of 1)
        out = attention(
            q.flatten(0, 1),
            k.flatten(0, 1),
            v.flatten(0, 1),
            cu_seqlens_q=kwargs["cu_seq_lens_q"].to(torch.int32),
            cu_seqlens_k=kwargs["cu_seq_lens_k"].to(torch.int32),
            max_seqlen_q=int(kwargs["max_length_q"]),
            max_seqlen_k=int(kwargs["max_length_k"]),
            **kw,
        )
        return out.view(q.shape[0], q.shape[1], *out.shape[1:]), None
    return attention(q, k, v, **kw), None


def _skip_flash_preload() -> None:
    """transformers takes every implementation whose name contains "flash" for a FlashAttention
    build: a model's __init__ calls lazy_import_flash_attention(name) to import FlashAttention's
    functions (or a Hub kernel) under that name, which for "flashkit" finds nothing and raises, so
    model creation would fail. flashkit needs none of them (its attention function is registered
    directly), so that one call is skipped for "flashkit" and passed through for every other name.
    Seen in transformers 5.17 and 5.24."""
    import transformers.modeling_utils as modeling_utils

    preload = modeling_utils.lazy_import_flash_attention
    if getattr(preload, "_flashkit_skip", False):
        return

    def lazy_import_flash_attention(implementation, *args, **kwargs):
        if implementation == NAME:
            return None
        return preload(implementation, *args, **kwargs)

    lazy_import_flash_attention._flashkit_skip = True
    modeling_utils.lazy_import_flash_attention = lazy_import_flash_attention


def register() -> None:
    """Registers "flashkit" for attention and for mask creation (idempotent). Without the mask
    registration transformers would build no mask at all for an unknown implementation and padding
    would be silently ignored."""
    AttentionInterface.register(NAME, flashkit_attention_forward)
    AttentionMaskInterface.register(NAME, flash_attention_mask)
    _skip_flash_preload()


register()

"""flashkit: exact attention (forward, backward, masks, GQA, varlen) on CPU and NVIDIA GPUs.

    import flashkit
    out = flashkit.attention(q, k, v, causal=True)        # numpy arrays or torch tensors
    out = flashkit.flash_attn_func(q, k, v, causal=True)  # FlashAttention-2's signature
    out = flashkit.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lens,
                                           block_table=table, causal=True)  # paged decode

With torch installed, the custom ops torch.ops.flashkit.fwd / bwd / merge / paged_fwd /
cascade_fwd / append_kv are registered on import (autograd, torch.compile and CUDA graphs work through them).
Without torch the numpy functions work on the CPU backend.
"""

from . import _flashkit
from ._flashkit import FlashkitError
from .api import attention, attention_backward, merge_states
from .flash_attn_interface import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache
from .kvcache import (
    KVCacheManager,
    append_kv,
    cascade_attention,
    paged_attention,
    plan_paged_split,
)

__version__ = _flashkit.version()


def info() -> dict:
    """Version, build options (CUDA archs, CPU ISA, compiler) and the devices flashkit sees."""
    return {
        "version": _flashkit.version(),
        "build": _flashkit.build_info(),
        "devices": _flashkit.devices(),
    }


__all__ = [
    "FlashkitError",
    "KVCacheManager",
    "append_kv",
    "attention",
    "attention_backward",
    "cascade_attention",
    "flash_attn_func",
    "flash_attn_varlen_func",
    "flash_attn_with_kvcache",
    "info",
    "merge_states",
    "paged_attention",
    "plan_paged_split",
]

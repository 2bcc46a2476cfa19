"""flashkit: exact attention (forward, backward, masks, GQA, varlen) on CPU and NVIDIA GPUs.

    import flashkit
    out = flashkit.attention(q, k, v, causal=True)        # numpy arrays or torch tensors
    out = flashkit.flash_attn_func(q, k, v, causal=True)  # FlashAttention-2's signature
    out = flashkit.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lens,
                                           block_table=table, causal=True)  # paged decode
    out = flashkit.ring_attention(q, k, v, flashkit.nccl_ring(), causal=True)  # a rank's shard

With torch installed, the custom ops torch.ops.flashkit.fwd / bwd / merge / paged_fwd /
cascade_fwd / append_kv / mla_fwd / mla_append / rotary / rotary_ are registered on import (autograd, torch.compile and CUDA graphs work through them).
Without torch the numpy functions work on the CPU backend.
"""

from . import _flashkit
from ._flashkit import FlashkitError
from .api import attention, attention_backward, merge_states
from .flash_attn_interface import (
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
)
from .kvcache import (
    KVCacheManager,
    append_kv,
    cascade_attention,
    paged_attention,
    plan_paged_split,
)
from .fp8 import attention_fp8, hadamard_transform, quantize_fp8
from .ring import (
    RingComm,
    in_process_ring,
    nccl_ring,
    ring_attention,
    ring_attention_backward,
    ring_positions,
)
from .mla import MlaCacheManager, flash_mla_with_kvcache, mla_append, mla_decode
from .rotary import apply_rotary, apply_rotary_emb

__version__ = _flashkit.version()


def info() -> dict:
    """Version, build options (CUDA archs, CPU ISA, compiler) and the devices flashkit sees."""
    return {
        "version": _flashkit.version(),
        "build": _flashkit.build_info(),
        "devices": _flashkit.devices(),
    }


def scratch_memory() -> dict:
    """The device memory flashkit's scratch pools hold ({"reserved_bytes", "keep_bytes"}): each
    CUDA device keeps up to keep_bytes of freed scratch (S and P of the lineage kernels, split
    states, the backward's dQ accumulator) across synchronisations, outside torch's allocator."""
    return _flashkit.scratch_memory()


def release_scratch_memory() -> None:
    """Hands the kept scratch memory back to the driver (synchronise flashkit's streams first);
    the next call that needs scratch allocates it again."""
    _flashkit.release_scratch_memory()


__all__ = [
    "FlashkitError",
    "KVCacheManager",
    "MlaCacheManager",
    "append_kv",
    "apply_rotary",
    "apply_rotary_emb",
    "attention",
    "attention_backward",
    "attention_fp8",
    "cascade_attention",
    "flash_attn_func",
    "flash_attn_kvpacked_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_varlen_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_with_kvcache",
    "flash_mla_with_kvcache",
    "hadamard_transform",
    "info",
    "merge_states",
    "mla_append",
    "mla_decode",
    "paged_attention",
    "plan_paged_split",
    "quantize_fp8",
    "release_scratch_memory",
    "scratch_memory",
]

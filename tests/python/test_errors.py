"""Invalid calls raise ValueError (FlashkitError from the C++ layer) or TypeError naming the
argument, and unsupported FlashAttention options raise NotImplementedError."""

import re

import numpy as np
import pytest

import flashkit
from conftest import randn


@pytest.fixture
def qkv(rng):
    return randn(rng, 2, 8, 4, 16), randn(rng, 2, 8, 2, 16), randn(rng, 2, 8, 2, 16)


def test_flashkit_error_is_a_value_error():
    assert issubclass(flashkit.FlashkitError, ValueError)
    assert flashkit.FlashkitError.__module__ == "flashkit"


@pytest.mark.parametrize(
    "change, argument",
    [
        (lambda q, k, v: (q, k.astype(np.float32), v), "k.dtype"),
        (lambda q, k, v: (q.astype(np.int32), k, v), "q.dtype"),
        (lambda q, k, v: (np.repeat(q, 2, axis=3)[..., ::2], k, v), "q.stride[3]"),
        (lambda q, k, v: (q[:, :, :3], k, v), "k.shape[2]"),  # 3 query heads over 2 KV heads
        (lambda q, k, v: (q, k, v[:1]), "v.shape[0]"),
        (lambda q, k, v: (q, k[..., :8], v), "k.shape[3]"),
    ],
)
def test_bad_arrays_name_the_argument(qkv, change, argument):
    with pytest.raises(flashkit.FlashkitError) as e:
        flashkit.attention(*change(*qkv))
    assert e.value.argument == argument
    assert str(e.value).startswith(argument + ": expected")


def test_wrong_rank_names_the_argument(qkv):
    q, k, v = qkv
    with pytest.raises(ValueError, match=r"^v: expected a rank-4"):
        flashkit.attention(q, k, v[0])


def test_non_arrays_are_type_errors(qkv):
    q, k, v = qkv
    with pytest.raises(TypeError, match=r"^k: expected a numpy array or a torch tensor"):
        flashkit.attention(q, k.tolist(), v)


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"causal_align": "diagonal"}, r"^causal_align:"),
        ({"window_size": (3,)}, r"^window_size:"),
        ({"window_size": (-2, 0)}, r"^window_size\[0\]:"),
        ({"softcap": -1.0}, r"^mask.softcap:"),
        ({"algo": "fa9"}, r"^algo:"),
        ({"alibi_slopes": np.ones(3, dtype=np.float32)}, r"^mask.alibi_slopes.shape\[0\]:"),
        ({"alibi_slopes": np.ones(4)}, r"^mask.alibi_slopes.dtype:"),
        ({"cu_seqlens_q": np.array([0, 8], dtype=np.int32)}, r"^cu_seqlens_k:"),
    ],
)
def test_bad_settings_name_the_argument(qkv, kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        flashkit.attention(*qkv, **kwargs)


def test_bad_cu_seqlens(rng):
    q, k, v = randn(rng, 10, 2, 8), randn(rng, 10, 2, 8), randn(rng, 10, 2, 8)
    good = np.array([0, 4, 10], dtype=np.int32)
    with pytest.raises(flashkit.FlashkitError, match=r"^cu_seqlens_q.dtype:"):
        flashkit.attention(q, k, v, cu_seqlens_q=good.astype(np.int64), cu_seqlens_k=good)
    with pytest.raises(flashkit.FlashkitError, match=r"^varlen.cu_seqlens_k\[2\]:"):
        flashkit.attention(q, k, v, cu_seqlens_q=good, cu_seqlens_k=np.array([0, 6, 5], np.int32))
    with pytest.raises(flashkit.FlashkitError, match=r"^varlen.cu_seqlens_q:"):
        flashkit.attention(q, k, v, cu_seqlens_q=good, cu_seqlens_k=good, max_seqlen_q=3)


def test_backward_checks_its_outputs(qkv):
    q, k, v = qkv
    out, lse = flashkit.attention(q, k, v, return_lse=True)
    with pytest.raises(flashkit.FlashkitError, match=r"^lse.shape\[2\]:"):
        flashkit.attention_backward(out, q, k, v, out, lse[:, :, :4].copy())
    with pytest.raises(flashkit.FlashkitError, match=r"^dout.shape\[1\]:"):
        flashkit.attention_backward(out[:, :4], q, k, v, out, lse)


def test_merge_checks_shapes(rng):
    with pytest.raises(flashkit.FlashkitError, match=r"^states_lse.shape\[2\]:"):
        flashkit.merge_states(randn(rng, 2, 3, 4, 8), np.zeros((2, 3, 5), dtype=np.float32))
    with pytest.raises(ValueError, match=r"^states_o: expected a rank-4"):
        flashkit.merge_states(randn(rng, 3, 4, 8), np.zeros((2, 3, 4), dtype=np.float32))


def test_dropout_is_not_implemented(qkv):
    with pytest.raises(NotImplementedError, match=r"^dropout_p:"):
        flashkit.flash_attn_func(*qkv, dropout_p=0.1)
    q, k, v = (x[0] for x in qkv)
    cu = np.array([0, 8], dtype=np.int32)
    with pytest.raises(NotImplementedError, match=r"^dropout_p:"):
        flashkit.flash_attn_varlen_func(q, k, v, cu, cu, 8, 8, dropout_p=0.5)


def test_attention_probs_are_not_implemented(qkv):
    with pytest.raises(NotImplementedError, match=r"^return_attn_probs:"):
        flashkit.flash_attn_func(*qkv, return_attn_probs=True)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda x: flashkit.flash_attn_qkvpacked_func(x[:, :, :2]), "qkv: expected shape"),
        (lambda x: flashkit.flash_attn_qkvpacked_func(x[0]), "qkv: expected shape"),
        (lambda x: flashkit.flash_attn_kvpacked_func(x[:, :, 0], x), "kv: expected shape"),
        (
            lambda x: flashkit.flash_attn_varlen_qkvpacked_func(x, np.array([0, 8], np.int32), 8),
            "qkv: expected shape [total_tokens, 3",
        ),
        (
            lambda x: flashkit.flash_attn_varlen_kvpacked_func(
                x[0, :, 0], x[0], np.array([0, 8], np.int32), np.array([0, 8], np.int32), 8, 8
            ),
            "kv: expected shape [total_tokens, 2",
        ),
        (lambda x: flashkit.flash_attn_kvpacked_func(x[:, :, 0], None), "kv: expected shape"),
    ],
)
def test_packed_inputs_of_the_wrong_shape_name_the_argument(rng, call, message):
    qkv = randn(rng, 2, 8, 3, 4, 16)
    with pytest.raises(ValueError, match=re.escape(message)):
        call(qkv)

"""FP8 from Python: hadamard_transform (numpy and torch), quantize_fp8 and attention_fp8 (torch
float8_e4m3fn), against float64 computations written here. Torch tests skip themselves without
torch."""

import numpy as np
import pytest

import flashkit
import np_reference
from conftest import randn


def sylvester(d):
    h = np.ones((1, 1))
    while h.shape[0] < d:
        h = np.block([[h, h], [h, -h]])
    return h / np.sqrt(d)


def test_hadamard_is_the_orthonormal_sylvester_matrix(rng):
    x = randn(rng, 2, 3, 2, 16, dtype=np.float32)
    y = flashkit.hadamard_transform(x)
    np.testing.assert_allclose(y, x.astype(np.float64) @ sylvester(16), atol=1e-6, rtol=0)
    flashkit.hadamard_transform(y, inplace=True)
    np.testing.assert_allclose(y, x, atol=1e-6, rtol=0)
    with pytest.raises(flashkit.FlashkitError, match=r"x\.shape\[3\]: expected a power of two"):
        flashkit.hadamard_transform(x[..., :12])


def test_quantize_needs_torch_for_e4m3(rng):
    with pytest.raises(TypeError, match="x: expected a torch tensor"):
        flashkit.quantize_fp8(randn(rng, 1, 4, 1, 8, dtype=np.float32))


def _torch():
    return pytest.importorskip("torch")


def dequantize(torch, x8, scale, block):
    values = x8.to(torch.float64)
    per_token = scale.to(torch.float64).repeat_interleave(block, dim=2)[:, :, : x8.shape[1]]
    return values * per_token.permute(0, 2, 1)[..., None]


@pytest.mark.parametrize("hadamard", [False, True])
def test_torch_quantize_blocks_and_rounding(rng, hadamard):
    torch = _torch()
    x = torch.from_numpy(randn(rng, 2, 70, 3, 32, dtype=np.float32))
    x8, scale = flashkit.quantize_fp8(x, block_size=32, hadamard=hadamard)
    assert x8.dtype == torch.float8_e4m3fn and scale.shape == (2, 3, 3)
    want = x.double().numpy() @ (sylvester(32) if hadamard else np.eye(32))
    got = dequantize(torch, x8, scale, 32).numpy()
    per_token = scale.double().repeat_interleave(32, dim=2)[:, :, :70].permute(0, 2, 1)[..., None]
    bound = np.abs(want) / 16 + per_token.numpy() / 1024  # 3 mantissa bits; the subnormal step
    assert (np.abs(got - want) <= bound).all()
    blocks = np.abs(np.pad(want, ((0, 0), (0, 26), (0, 0), (0, 0)))).reshape(2, 3, 32, 3, 32)
    np.testing.assert_allclose(
        scale.numpy(), blocks.max(axis=(2, 4)).transpose(0, 2, 1) / 448, rtol=1e-6
    )


@pytest.mark.parametrize("rotated", [False, True])
def test_torch_attention_fp8_matches_the_dequantized_oracle(rng, rotated):
    torch = _torch()
    q, k, v = (torch.from_numpy(randn(rng, 1, 40, h, 32, dtype=np.float32)) for h in (4, 2, 2))
    quantized = [flashkit.quantize_fp8(t, block_size=16, hadamard=rotated) for t in (q, k, v)]
    out, lse = flashkit.attention_fp8(
        *(x8 for x8, _ in quantized),
        *(s for _, s in quantized),
        block_size=16,
        rotated=rotated,
        causal=True,
        out_dtype=torch.float32,
        return_lse=True,
    )
    qd, kd, vd = (dequantize(torch, x8, s, 16).numpy() for x8, s in quantized)
    want, want_lse = np_reference.attention(qd, kd, vd, causal=True)
    if rotated:
        want = want @ sylvester(32)
    np.testing.assert_allclose(out.numpy(), want, atol=2e-6, rtol=0)
    np.testing.assert_allclose(lse.numpy(), want_lse, atol=2e-6, rtol=0)
    assert (
        flashkit.attention_fp8(
            *(x for x, _ in quantized), *(s for _, s in quantized), block_size=16
        ).dtype
        == torch.bfloat16
    )

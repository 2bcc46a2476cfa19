"""flashkit.merge_states: attention over a split key set, merged, equals attention over all keys."""

import numpy as np

import flashkit
from conftest import randn


def split_states(rng, q, k, v, bounds):
    """Attention of q against each key chunk, as merge_states' [S, tokens, heads, d] inputs."""
    outs, lses = [], []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        o, lse = flashkit.attention(q, k[:, lo:hi], v[:, lo:hi], return_lse=True)
        outs.append(o[0])  # batch 1: tokens are the query positions
        lses.append(lse[0].T)  # [heads, tokens] -> [tokens, heads]
    return np.stack(outs), np.ascontiguousarray(np.stack(lses))


def test_merge_equals_full_attention(rng):
    q, k, v = (randn(rng, 1, n, 4, 16) for n in (12, 50, 50))
    states_o, states_lse = split_states(rng, q, k, v, [0, 7, 30, 50])
    out, lse = flashkit.merge_states(states_o, states_lse, return_lse=True)
    want, want_lse = flashkit.attention(q, k, v, return_lse=True)
    np.testing.assert_allclose(out, want[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(lse, want_lse[0].T, rtol=1e-5, atol=1e-5)


def test_empty_states_contribute_nothing(rng):
    q, k, v = (randn(rng, 1, n, 2, 8, dtype=np.float32) for n in (6, 20, 20))
    states_o, states_lse = split_states(rng, q, k, v, [0, 20])
    empty_o = np.zeros_like(states_o)
    empty_lse = np.full_like(states_lse, -np.inf)
    out = flashkit.merge_states(
        np.concatenate([empty_o, states_o]), np.concatenate([empty_lse, states_lse])
    )
    np.testing.assert_allclose(out, states_o[0], rtol=1e-6, atol=1e-6)

    all_empty, lse = flashkit.merge_states(empty_o, empty_lse, return_lse=True)
    assert np.all(all_empty == 0) and np.all(np.isneginf(lse))

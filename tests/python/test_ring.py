"""flashkit.ring_attention: every rank's rows and gradients against attention over the whole
sequence, with the ranks as threads of an in-process ring (numpy on the CPU backend, torch on the
CPU and on CUDA); bad calls fail on every rank; and the NCCL ring across processes where a
machine has two GPUs."""

import threading

import numpy as np
import pytest

import flashkit
from conftest import randn


def shards(x, ranks, layout):
    """Each rank's rows of a [batch, n, heads, d] array."""
    local = x.shape[1] // ranks
    return [x[:, flashkit.ring_positions(ranks, r, local, layout)] for r in range(ranks)]


def unshard(parts, ranks, layout, axis=1):
    """The whole sequence from each rank's rows (axis: the token axis)."""
    local = parts[0].shape[axis]
    out = np.empty_like(np.concatenate(parts, axis=axis))
    for r, part in enumerate(parts):
        index = [slice(None)] * out.ndim
        index[axis] = flashkit.ring_positions(ranks, r, local, layout)
        out[tuple(index)] = part
    return out


def on_every_rank(ranks, body):
    """body(rank) on a thread per rank; each rank's result or exception."""
    results = [None] * ranks

    def run(r):
        try:
            results[r] = body(r)
        except Exception as e:  # noqa: BLE001 - returned for the test to check
            results[r] = e

    threads = [threading.Thread(target=run, args=(r,)) for r in range(ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


MASKS = [
    dict(causal=True),
    dict(),
    dict(causal=True, window_size=(5, -1)),
    dict(window_size=(3, 4)),
    dict(causal=True, prefix_len=9),
    dict(softcap=1.5),
]


@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
@pytest.mark.parametrize("mask", MASKS, ids=lambda m: ",".join(m) or "none")
def test_numpy_ranks_match_the_whole_sequence(rng, layout, mask):
    ranks, batch, local, hq, hkv, d = 3, 2, 8, 4, 2, 16
    n = ranks * local
    q, k, v, dout = (randn(rng, batch, n, h, d, dtype=np.float32) for h in (hq, hkv, hkv, hq))
    want, want_lse = flashkit.attention(q, k, v, return_lse=True, algo="reference", **mask)
    want_grads = flashkit.attention_backward(dout, q, k, v, want, want_lse, algo="reference", **mask)
    comms = flashkit.in_process_ring(ranks)
    qs, ks, vs, douts = (shards(x, ranks, layout) for x in (q, k, v, dout))

    def rank(r):
        out, lse = flashkit.ring_attention(
            qs[r], ks[r], vs[r], comms[r], layout=layout, return_lse=True, **mask
        )
        grads = flashkit.ring_attention_backward(
            douts[r], qs[r], ks[r], vs[r], out, lse, comms[r], layout=layout, **mask
        )
        return out, lse, grads

    results = on_every_rank(ranks, rank)
    for res in results:
        assert not isinstance(res, Exception), res
    np.testing.assert_allclose(unshard([r[0] for r in results], ranks, layout), want, atol=2e-6)
    lse = unshard([r[1] for r in results], ranks, layout, axis=2)
    np.testing.assert_allclose(lse, want_lse, atol=2e-6)
    for i, name in enumerate(("dq", "dk", "dv")):
        got = unshard([r[2][i] for r in results], ranks, layout)
        np.testing.assert_allclose(got, want_grads[i], atol=5e-6, err_msg=name)


def test_positions_cover_the_sequence_once():
    for layout in ("zigzag", "contiguous"):
        seen = np.concatenate([flashkit.ring_positions(4, r, 6, layout) for r in range(4)])
        assert sorted(seen.tolist()) == list(range(24))
    assert flashkit.ring_positions(2, 0, 4, "zigzag").tolist() == [0, 1, 6, 7]


def test_a_bad_rank_fails_every_rank(rng):
    comms = flashkit.in_process_ring(2)
    q = randn(rng, 1, 4, 2, 8, dtype=np.float32)

    def rank(r):
        kv = q if r == 0 else q[:, :3]  # rank 1's keys are one token short
        return flashkit.ring_attention(q, kv, kv, comms[r])

    bad_rank, other = on_every_rank(2, rank)[::-1]
    assert isinstance(bad_rank, flashkit.FlashkitError) and "k.shape[1]" in str(bad_rank)
    assert isinstance(other, flashkit.FlashkitError) and "rank 1" in str(other)


def test_argument_errors(rng):
    comm = flashkit.in_process_ring(1)[0]
    assert (comm.rank, comm.size) == (0, 1)
    q = randn(rng, 1, 4, 2, 8, dtype=np.float32)
    with pytest.raises(TypeError, match="comm: expected a flashkit.RingComm"):
        flashkit.ring_attention(q, q, q, "ring")
    with pytest.raises(ValueError, match="layout: expected one of"):
        flashkit.ring_attention(q, q, q, comm, layout="spiral")
    with pytest.raises(ValueError, match="q: expected"):
        flashkit.ring_attention(q[0], q, q, comm)
    with pytest.raises(flashkit.FlashkitError, match="q.shape\\[1\\]: expected an even local"):
        flashkit.ring_attention(q[:, :3], q[:, :3], q[:, :3], comm)
    if not flashkit.info()["build"]["nccl"]:
        with pytest.raises(flashkit.FlashkitError, match="id: expected a build with NCCL"):
            flashkit._flashkit.nccl_ring_id()
    with pytest.raises(RuntimeError, match="torch.distributed"):
        flashkit.nccl_ring()


def torch_or_skip():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_torch_ranks_match_the_whole_sequence(rng, device):
    """On the CPU through autograd. On CUDA through ring_attention_backward: autograd runs every
    CUDA backward of a process on that device's one worker thread, so ranks that are threads
    sharing a GPU would wait there for each other (processes, as with NCCL, each have their own)."""
    torch = torch_or_skip()
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    ranks, layout = 2, "zigzag"
    dtype = torch.float32 if device == "cpu" else torch.bfloat16

    def tensor(*shape):
        return torch.tensor(randn(rng, *shape), dtype=dtype, device=device)

    q, k, v, dout = tensor(2, 16, 4, 64), tensor(2, 16, 2, 64), tensor(2, 16, 2, 64), tensor(2, 16, 4, 64)
    whole = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    want = flashkit.attention(*whole, causal=True)
    want.backward(dout)
    comms = flashkit.in_process_ring(ranks)
    positions = [torch.as_tensor(flashkit.ring_positions(ranks, r, 8, layout)) for r in range(ranks)]

    def rank(r):
        idx = positions[r].to(device)
        if device == "cuda":
            mine = [x[:, idx].contiguous() for x in (q, k, v)]
            out, lse = flashkit.ring_attention(
                *mine, comms[r], causal=True, layout=layout, return_lse=True
            )
            grads = flashkit.ring_attention_backward(
                dout[:, idx].contiguous(), *mine, out, lse, comms[r], causal=True, layout=layout
            )
            torch.cuda.synchronize()
            return out, grads
        mine = [x[:, idx].detach().clone().requires_grad_() for x in (q, k, v)]
        out = flashkit.ring_attention(*mine, comms[r], causal=True, layout=layout)
        out.backward(dout[:, idx])
        return out.detach(), [x.grad for x in mine]

    results = on_every_rank(ranks, rank)
    for res in results:
        assert not isinstance(res, Exception), res
    tol = 2e-5 if device == "cpu" else 2e-2
    for r, (out, grads) in enumerate(results):
        idx = positions[r].to(device)
        torch.testing.assert_close(out, want.detach()[:, idx], atol=tol, rtol=0)
        for got, x in zip(grads, whole):
            torch.testing.assert_close(got, x.grad[:, idx], atol=tol, rtol=0)


def test_torch_compile_traces_the_ring_ops(rng):
    """ring_attention under torch.compile(fullgraph=True): the custom ops flashkit::ring_fwd and
    ring_bwd, with autograd, on a one-rank ring (aot_eager: the test is about tracing)."""
    torch = torch_or_skip()
    torch._dynamo.reset()
    comm = flashkit.in_process_ring(1)[0]
    q, k, v = (
        torch.tensor(randn(rng, 2, 12, h, 32), dtype=torch.float32, requires_grad=True)
        for h in (4, 2, 2)
    )

    def step(q, k, v):
        out = flashkit.ring_attention(q, k, v, comm, causal=True, window_size=(5, -1))
        return (out**2).sum()

    loss = torch.compile(step, fullgraph=True, backend="aot_eager")(q, k, v)
    got = torch.autograd.grad(loss, (q, k, v))
    whole = flashkit.attention(q, k, v, causal=True, window_size=(5, -1))
    want = torch.autograd.grad((whole**2).sum(), (q, k, v))
    torch.testing.assert_close(loss, (whole**2).sum(), atol=1e-4, rtol=1e-5)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=2e-5, rtol=0)


def test_torch_ring_ops_pass_opcheck(rng):
    """The ops' schemas, fake implementations and autograd registration (torch.library.opcheck)."""
    torch = torch_or_skip()
    comm = flashkit.in_process_ring(1)[0]
    q, k, v, dout = (
        torch.tensor(randn(rng, 1, 8, h, 16), dtype=torch.float32, requires_grad=g)
        for h, g in ((2, True), (1, True), (1, True), (2, False))
    )
    settings = (id(comm), None, True, -1, -1, 0.0, 0, "zigzag", False)
    torch.library.opcheck(torch.ops.flashkit.ring_fwd.default, (q, k, v, None, *settings))
    out, lse = torch.ops.flashkit.ring_fwd(q, k, v, None, *settings)
    args = (dout, q.detach(), k.detach(), v.detach(), out.detach(), lse, None, *settings)
    torch.library.opcheck(torch.ops.flashkit.ring_bwd.default, args)
    with pytest.raises(ValueError, match="comm: expected a communicator made by"):
        torch.ops.flashkit.ring_fwd(q, k, v, None, id(q), *settings[1:])


def _nccl_rank(rank, world, port):
    """One process of the NCCL test: its shard of a seeded sequence through ring_attention with
    autograd, against attention over the whole sequence on its own GPU."""
    import os

    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.cuda.set_device(rank)
        gen = torch.Generator().manual_seed(7)
        q, k, v, dout = (
            torch.randn(1, 64 * world, h, 128, generator=gen).to("cuda", torch.bfloat16)
            for h in (8, 2, 2, 8)
        )
        whole = [x.clone().requires_grad_() for x in (q, k, v)]
        want = flashkit.attention(*whole, causal=True)
        want.backward(dout)
        idx = torch.as_tensor(flashkit.ring_positions(world, rank, 64)).cuda()
        mine = [x[:, idx].clone().requires_grad_() for x in (q, k, v)]
        out = flashkit.ring_attention(*mine, flashkit.nccl_ring(), causal=True)
        out.backward(dout[:, idx])
        torch.testing.assert_close(out, want.detach()[:, idx], atol=2e-2, rtol=0)
        for got, x in zip(mine, whole):
            torch.testing.assert_close(got.grad, x.grad[:, idx], atol=2e-2, rtol=0)
    finally:
        dist.destroy_process_group()


def test_nccl_ring_across_processes():
    torch = torch_or_skip()
    if not flashkit.info()["build"]["nccl"]:
        pytest.skip("built without NCCL")
    if torch.cuda.device_count() < 2:
        pytest.skip("an NCCL ring needs a GPU per rank")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    world = min(torch.cuda.device_count(), 4)
    torch.multiprocessing.spawn(_nccl_rank, args=(world, port), nprocs=world)  # raises on failure

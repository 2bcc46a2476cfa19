"""flashkit with torch tensors: every function against torch SDPA (math backend), autograd
against SDPA's gradients, gradcheck in fp64, the custom ops under opcheck and
torch.compile(fullgraph=True), CUDA-graph capture, and the errors. Skipped without torch; the CUDA
cases run when a GPU is present and flashkit was built with its CUDA backend."""

import functools
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import flashkit  # noqa: E402
import torch_reference as ref  # noqa: E402
from flashkit._settings import make_settings  # noqa: E402

HAS_CUDA = torch.cuda.is_available() and flashkit.info()["build"]["cuda"]
DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a GPU and flashkit's CUDA backend")

# (batch, seqlen_q, seqlen_k, heads_q, heads_kv, d); no case leaves a query without keys, which
# SDPA's math backend would turn into NaN.
SHAPES = {"square": (2, 40, 40, 4, 4, 32), "gqa": (2, 24, 56, 8, 2, 64)}
MASKS = {
    "none": {},
    "causal": {"causal": True},
    "causal_top_left": {"causal": True, "causal_align": "top_left"},
    "window": {"window_size": (6, 2)},
    "causal_window": {"causal": True, "window_size": (9, 0)},
}


def ref_kwargs(kw):
    return {
        "causal": kw.get("causal", False),
        "bottom_right": kw.get("causal_align", "bottom_right") == "bottom_right",
        "window": kw.get("window_size", (-1, -1)),
    }


def inputs(shape, dtype, device, requires_grad=False, seed=0):
    """Fresh random q, k, v (drawn in fp64 on the CPU, so every device and dtype sees the same
    values up to rounding)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    b, nq, nk, hq, hk, d = shape
    sizes = ((b, nq, hq, d), (b, nk, hk, d), (b, nk, hk, d))
    return [
        torch.randn(*s, generator=g, dtype=torch.float64)
        .to(device, dtype)
        .requires_grad_(requires_grad)
        for s in sizes
    ]


def max_err(a, b):
    return (a.double() - b.double()).abs().max().item()


def assert_like_reference(got, want64, baseline, dtype):
    """FlashAttention's rule: no worse than 2x a plain same-precision reference (+ small atol);
    fp64 must match the fp64 reference closely."""
    if dtype == torch.float64:
        assert max_err(got, want64) < 1e-9
    else:
        atol = 1e-5 if dtype == torch.float32 else 1e-3
        assert max_err(got, want64) <= 2 * max_err(baseline, want64) + atol


DTYPES = {"cpu": [torch.float64, torch.float32], "cuda": [torch.float16, torch.bfloat16]}
CASES = [(dev, dt) for dev in DEVICES for dt in DTYPES[dev]]


@pytest.mark.parametrize("device, dtype", CASES)
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("shape", SHAPES)
def test_forward_matches_sdpa(device, dtype, mask, shape):
    q, k, v = inputs(SHAPES[shape], dtype, device)
    kw = MASKS[mask]
    if "causal_align" in kw:  # flash_attn_func is always bottom-right
        out = flashkit.attention(q, k, v, **kw)
    else:
        out = flashkit.flash_attn_func(q, k, v, **kw)
    want64 = ref.sdpa(q.double(), k.double(), v.double(), **ref_kwargs(kw))
    assert out.dtype == dtype and out.shape == q.shape and out.device == q.device
    assert_like_reference(out, want64, ref.sdpa(q, k, v, **ref_kwargs(kw)), dtype)


@pytest.mark.parametrize("device, dtype", CASES)
@pytest.mark.parametrize("per_batch", [False, True])
def test_alibi_matches_sdpa(device, dtype, per_batch):
    q, k, v = inputs(SHAPES["gqa"], dtype, device)
    slopes = torch.rand((2, 8) if per_batch else (8,), device=device) * 0.5
    out = flashkit.flash_attn_func(q, k, v, causal=True, alibi_slopes=slopes)
    want64 = ref.sdpa(q.double(), k.double(), v.double(), causal=True, alibi=slopes)
    assert_like_reference(out, want64, ref.sdpa(q, k, v, causal=True, alibi=slopes), dtype)


@pytest.mark.parametrize("device, dtype", CASES)
def test_softcap(device, dtype):
    q, k, v = inputs(SHAPES["gqa"], dtype, device)
    out = flashkit.flash_attn_func(q, k, v, causal=True, softcap=3.0)
    want64 = ref.eager_softcap(q.double(), k.double(), v.double(), softcap=3.0, causal=True)
    baseline = ref.eager_softcap(q.float(), k.float(), v.float(), softcap=3.0, causal=True)
    assert_like_reference(out, want64, baseline.to(dtype), dtype)


@pytest.mark.parametrize("device, dtype", CASES)
@pytest.mark.parametrize("mask", ["none", "causal", "causal_window"])
def test_autograd_matches_sdpa(device, dtype, mask):
    kw = MASKS[mask]
    q, k, v = inputs(SHAPES["gqa"], dtype, device, requires_grad=True)
    out = flashkit.attention(q, k, v, **kw)
    gen = torch.Generator(device="cpu").manual_seed(2)
    dout = torch.randn(out.shape, generator=gen, dtype=torch.float64).to(device, dtype)
    got = torch.autograd.grad(out, (q, k, v), dout)
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    want = torch.autograd.grad(
        ref.sdpa(q64, k64, v64, **ref_kwargs(kw)), (q64, k64, v64), dout.double()
    )
    # fp32 and fp64 against SDPA in that dtype; 16-bit dtypes against the op-by-op reference.
    baseline = ref.sdpa if dtype in (torch.float32, torch.float64) else ref.plain
    base = torch.autograd.grad(baseline(q, k, v, **ref_kwargs(kw)), (q, k, v), dout)
    for g, w, b in zip(got, want, base):
        assert g.dtype == dtype
        assert_like_reference(g, w, b, dtype)


def packed(lens_q, lens_k, hq, hk, d, dtype, device, requires_grad=False):
    cu_q, cu_k = (
        torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=device)
        for lens in (lens_q, lens_k)
    )
    q, k, v = inputs((1, sum(lens_q), sum(lens_k), hq, hk, d), dtype, device, requires_grad)
    return [x[0].detach().requires_grad_(requires_grad) for x in (q, k, v)], cu_q, cu_k


@pytest.mark.parametrize("device, dtype", CASES)
def test_varlen_forward_and_backward_match_sdpa(device, dtype):
    lens_q, lens_k = [7, 0, 19, 5], [12, 3, 19, 30]  # sequence 1 has no queries
    (q, k, v), cu_q, cu_k = packed(lens_q, lens_k, 4, 2, 32, dtype, device, requires_grad=True)
    out = flashkit.flash_attn_varlen_func(
        q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=True
    )
    dout = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), dout)
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    pieces = []
    for b in range(len(lens_q)):
        sq, sk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        pieces.append(ref.sdpa(q64[None, sq], k64[None, sk], v64[None, sk], causal=True)[0])
    want_out = torch.cat(pieces)
    want = torch.autograd.grad(want_out, (q64, k64, v64), dout.double())
    tol = 1e-9 if dtype == torch.float64 else (1e-4 if dtype == torch.float32 else 3e-2)
    assert max_err(out, want_out) < tol
    for g, w in zip(got, want):
        assert max_err(g, w) < tol * max(1.0, w.abs().max().item())


def test_gradcheck_fp64():
    q, k, v = inputs((1, 5, 7, 4, 2, 8), torch.float64, "cpu", requires_grad=True)
    slopes = torch.tensor([0.3, 0.1, 0.2, 0.4])

    def f(q_, k_, v_):
        return flashkit.attention(
            q_, k_, v_, causal=True, window_size=(4, 1), softcap=2.0, alibi_slopes=slopes
        )

    assert torch.autograd.gradcheck(f, (q, k, v))
    (q, k, v), cu_q, cu_k = packed([3, 0, 4], [5, 2, 4], 2, 1, 8, torch.float64, "cpu", True)
    assert torch.autograd.gradcheck(
        lambda *x: flashkit.flash_attn_varlen_func(*x, cu_q, cu_k, 4, 5, causal=True), (q, k, v)
    )


@pytest.mark.parametrize("varlen", [False, True])
def test_opcheck(varlen):
    """torch's own checks of the custom ops: schema, fake tensors, autograd registration and
    AOT dispatch with dynamic shapes."""
    if varlen:
        (q, k, v), cu_q, cu_k = packed([5, 9], [6, 9], 4, 2, 16, torch.float32, "cpu", True)
        s = make_settings(causal=True, max_seqlen_q=9, max_seqlen_k=9)
    else:
        q, k, v = inputs((2, 9, 11, 4, 2, 16), torch.float32, "cpu", requires_grad=True)
        cu_q = cu_k = None
        s = make_settings(causal=True, window_size=(3, 0))
    torch.library.opcheck(torch.ops.flashkit.fwd.default, (q, k, v, cu_q, cu_k, None, *s))
    out, lse = torch.ops.flashkit.fwd(q, k, v, cu_q, cu_k, None, *s)
    args = (
        torch.randn_like(out),
        q.detach(),
        k.detach(),
        v.detach(),
        out.detach(),
        lse,
        cu_q,
        cu_k,
        None,
        *s,
    )
    torch.library.opcheck(torch.ops.flashkit.bwd.default, args)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph(device):
    torch._dynamo.reset()
    dtype = torch.float32 if device == "cpu" else torch.bfloat16

    def step(q, k, v):
        out = flashkit.flash_attn_func(q, k, v, causal=True, window_size=(16, 0))
        return (out.float() ** 2).sum()

    # aot_eager on the CPU: the test is about tracing (no graph break), not Inductor's codegen.
    compiled = torch.compile(
        step, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor"
    )
    q, k, v = inputs(SHAPES["gqa"], dtype, device, requires_grad=True)
    loss = compiled(q, k, v)
    got = torch.autograd.grad(loss, (q, k, v))
    want = torch.autograd.grad(step(q, k, v), (q, k, v))
    assert max_err(loss, step(q, k, v)) <= 1e-3 * abs(loss.item())
    for g, w in zip(got, want):
        assert max_err(g, w) <= 1e-6 + 1e-3 * w.abs().max().item()


def test_compile_varlen_and_lse():
    torch._dynamo.reset()
    (q, k, v), cu_q, cu_k = packed([5, 0, 9], [6, 4, 9], 4, 2, 16, torch.float32, "cpu")

    def f(q, k, v, cu_q, cu_k):
        return flashkit.attention(
            q,
            k,
            v,
            cu_seqlens_q=cu_q,
            cu_seqlens_k=cu_k,
            max_seqlen_q=9,
            max_seqlen_k=9,
            causal=True,
            return_lse=True,
        )

    out, lse = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v, cu_q, cu_k)
    want_out, want_lse = f(q, k, v, cu_q, cu_k)
    assert lse.shape == (4, 14)
    torch.testing.assert_close(out, want_out)
    torch.testing.assert_close(lse, want_lse)


@needs_cuda
def test_cuda_graph_capture():
    q, k, v = inputs(SHAPES["gqa"], torch.bfloat16, "cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up off the default stream, as capture requires
        flashkit.flash_attn_func(q, k, v, causal=True)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = flashkit.attention(q, k, v, causal=True, return_lse=True)
        dq, dk, dv = flashkit.attention_backward(out, q, k, v, out, lse, causal=True)
    fresh = inputs(SHAPES["gqa"], torch.bfloat16, "cuda", seed=1)
    for static, new in zip((q, k, v), fresh):
        static.copy_(new)
    graph.replay()
    want_out, want_lse = flashkit.attention(*fresh, causal=True, return_lse=True)
    want = flashkit.attention_backward(want_out, *fresh, want_out, want_lse, causal=True)
    torch.cuda.synchronize()
    assert max_err(out, want_out) == 0
    for g, w in zip((dq, dk, dv), want):
        assert max_err(g, w) <= 1e-2 * w.abs().max().item()  # atomics may reorder sums


@pytest.mark.parametrize("device, dtype", CASES)
def test_eager_path_is_the_custom_op(device, dtype):
    """Plain eager calls skip the custom op's dispatch; they must compute exactly what the op
    does, forward and backward (the same bodies, the same autograd)."""
    from flashkit import _torch_ops

    q, k, v = inputs(SHAPES["gqa"], dtype, device, requires_grad=True)
    assert _torch_ops.eager(q, k, v, None)
    s = make_settings(causal=True, window_size=(9, 0))
    dout = torch.randn(q.shape, dtype=dtype, device=device)
    eager_out, eager_lse = flashkit.attention(
        q, k, v, causal=True, window_size=(9, 0), return_lse=True
    )
    op_out, op_lse = torch.ops.flashkit.fwd(q, k, v, None, None, None, *s)
    assert torch.equal(eager_out, op_out) and torch.equal(eager_lse, op_lse)
    assert eager_out.grad_fn is not None and not eager_lse.requires_grad
    eager_grads = torch.autograd.grad(eager_out, (q, k, v), dout)
    op_grads = torch.autograd.grad(op_out, (q, k, v), dout)
    if device == "cuda":  # dQ is summed by atomics there: the order of the adds may differ
        for e, o in zip(eager_grads, op_grads):
            assert max_err(e, o) <= 1e-2 * o.abs().max().item()
    else:
        assert all(torch.equal(e, o) for e, o in zip(eager_grads, op_grads))
    with torch.no_grad():  # no autograd node at all
        assert flashkit.attention(q, k, v).grad_fn is None


def test_eager_path_steps_aside():
    """The custom op runs wherever torch needs to see it: fake tensors (tracing), dispatch and
    function modes, functorch transforms and the profiler."""
    from conftest import op_recorder
    from torch._subclasses.fake_tensor import FakeTensorMode

    from flashkit import _torch_ops

    q, k, v = inputs(SHAPES["square"], torch.float32, "cpu")
    with FakeTensorMode() as mode:
        fq, fk, fv = (mode.from_tensor(x) for x in (q, k, v))
        assert not _torch_ops.eager(fq, fk, fv)
        out = flashkit.flash_attn_func(fq, fk, fv)  # the fake kernel gives the shape
        assert out.shape == q.shape and type(out) is not torch.Tensor

    with op_recorder() as seen:
        assert not _torch_ops.eager(q, k, v)
        flashkit.flash_attn_func(q, k, v)
    assert any(op.startswith("flashkit.fwd") for op in seen.ops)
    with torch.device("cpu"):  # a function mode
        assert not _torch_ops.eager(q, k, v)
    with torch.profiler.profile() as prof:
        assert not _torch_ops.eager(q, k, v)
        flashkit.flash_attn_func(q, k, v)
    assert any(e.key == "flashkit::fwd" for e in prof.key_averages())
    inside_vmap = []

    def batched(x):
        inside_vmap.append(_torch_ops.eager(x))
        return x

    torch.func.vmap(batched)(q)
    assert inside_vmap == [False] and _torch_ops.eager(q, k, v, None)


def test_double_backward_raises():
    """Neither path is twice differentiable; asking must fail loudly, not give zeros."""
    q, k, v = inputs(SHAPES["square"], torch.float64, "cpu", requires_grad=True)
    s = make_settings()
    for out in (
        flashkit.attention(q, k, v),
        torch.ops.flashkit.fwd(q, k, v, None, None, None, *s)[0],
    ):
        (dq,) = torch.autograd.grad(out.sum(), q, create_graph=True)
        with pytest.raises(RuntimeError):
            torch.autograd.grad(dq.sum(), q)


def paged_cache(lens, page, heads_kv, d, seed):
    """fp64 pages [num_pages, page, heads_kv, d] (two spare), a shuffled block table (-1 unused)
    and each sequence's keys and values [1, n, heads_kv, d] gathered from them."""
    g = torch.Generator().manual_seed(seed)
    counts = [-(-n // page) for n in lens]
    num_pages = sum(counts) + 2
    k_pages, v_pages = (
        torch.randn(num_pages, page, heads_kv, d, generator=g, dtype=torch.float64)
        for _ in range(2)
    )
    pool = torch.randperm(num_pages, generator=g)
    table = torch.full((len(lens), max(counts)), -1, dtype=torch.int32)
    start = 0
    for b, c in enumerate(counts):
        table[b, :c] = pool[start : start + c]
        start += c
    tokens = [[(int(table[b, t // page]), t % page) for t in range(n)] for b, n in enumerate(lens)]
    gathered = [
        tuple(torch.stack([p[i, s] for i, s in toks])[None] for p in (k_pages, v_pages))
        for toks in tokens
    ]
    return k_pages, v_pages, table, gathered


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cuda_paged_decode_matches_reference(dtype):
    """flash_attn_with_kvcache on CUDA pages in plain eager mode, one process through settings
    that change between calls (the host side memoises split plans and options per shape and
    setting): the plan's splits, one piece, 3 splits, a window, a softcap, a scale. Each output
    against fp64 SDPA on the gathered keys by the 2x-plain rule; with and without lse (which the
    call then does not allocate) bit-identical; a side stream's result the same."""
    lens, page, heads_kv, heads_q, d = [1, 37, 300, 1029], 16, 2, 8, 64
    k64, v64, table64, gathered = paged_cache(lens, page, heads_kv, d, seed=4)
    q64 = torch.randn(
        len(lens), 1, heads_q, d, generator=torch.Generator().manual_seed(5), dtype=torch.float64
    )
    q, k_pages, v_pages = (x.to("cuda", dtype) for x in (q64, k64, v64))
    table = table64.cuda()
    seq_lens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    settings = [
        {},
        {"num_splits": 1},
        {"num_splits": 3},
        {"window_size": (40, 0)},
        {"softcap": 4.0},
        {"softmax_scale": 0.05},
    ]
    for kw in settings:
        call = functools.partial(
            flashkit.flash_attn_with_kvcache,
            q,
            k_pages,
            v_pages,
            cache_seqlens=seq_lens,
            block_table=table,
            causal=True,
            **kw,
        )
        out = call()
        with_lse, lse = call(return_softmax_lse=True)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            on_side = call()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        assert max_err(out, with_lse) == 0 and max_err(out, on_side) == 0, kw
        assert lse.shape == (len(lens), heads_q, 1) and torch.isfinite(lse).all(), kw
        for b, (k_b, v_b) in enumerate(gathered):
            qb = q64[b : b + 1]
            low = [x.to("cuda", dtype) for x in (qb, k_b, v_b)]
            if "softcap" in kw:
                want = ref.eager_softcap(qb, k_b, v_b, softcap=kw["softcap"], causal=True)
                base = ref.eager_softcap(*low, softcap=kw["softcap"], causal=True)
            else:
                mask = {"causal": True, "window": kw.get("window_size", (-1, -1))}
                scale = kw.get("softmax_scale")
                want = ref.sdpa(qb, k_b, v_b, scale=scale, **mask)
                base = ref.plain(*low, scale=scale, **mask)
            assert_like_reference(out[b : b + 1].cpu(), want, base.cpu(), dtype)


def test_no_extension_object_is_alive_at_exit():
    """The eager paths memoise extension objects (options); nanobind reports any still alive when
    the interpreter tears the extension down, and none may be."""
    code = "\n".join(
        [
            "import torch, flashkit",
            "q = torch.randn(1, 4, 2, 32)",
            "flashkit.flash_attn_func(q, q, q)",
            "pages = torch.randn(2, 16, 2, 32)",
            "table = torch.tensor([[0, 1]], dtype=torch.int32)",
            "lens = torch.tensor([20], dtype=torch.int32)",
            "flashkit.flash_attn_with_kvcache(q[:, :1], pages, pages, cache_seqlens=lens,"
            " block_table=table)",
        ]
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "leaked" not in run.stderr, run.stderr


@pytest.mark.parametrize("device, dtype", CASES)
def test_merge_states(device, dtype):
    q, k, v = inputs((1, 12, 50, 4, 4, 32), dtype, device)
    states = [
        flashkit.attention(q, k[:, a:b], v[:, a:b], return_lse=True) for a, b in ((0, 20), (20, 50))
    ]
    states_o = torch.stack([o[0] for o, _ in states])
    states_lse = torch.stack([lse[0].transpose(0, 1) for _, lse in states]).contiguous()
    out, lse = flashkit.merge_states(states_o, states_lse, return_lse=True)
    want, want_lse = flashkit.attention(q, k, v, return_lse=True)
    # lse is f32 whatever the inputs, so the merge weights carry f32 rounding even for f64.
    tol = {torch.float64: 1e-6, torch.float32: 1e-5}.get(dtype, 2e-2)
    assert max_err(out, want[0]) < tol
    assert max_err(lse, want_lse[0].transpose(0, 1)) < 1e-4


def test_lse_is_not_differentiable():
    q, k, v = inputs(SHAPES["square"], torch.float64, "cpu", requires_grad=True)
    out, lse = flashkit.attention(q, k, v, return_lse=True)
    assert out.requires_grad and not lse.requires_grad


@pytest.mark.parametrize("device", DEVICES)
def test_strided_gradient(device):
    """A loss over a transposed output hands backward a gradient whose last dim is strided."""
    dtype = torch.float64 if device == "cpu" else torch.bfloat16
    q, k, v = inputs(SHAPES["square"], dtype, device, requires_grad=True)
    w = torch.randn(2, 32, 4, 40, dtype=dtype, device=device)
    loss = (flashkit.attention(q, k, v, causal=True).transpose(1, 3) * w).sum()
    got = torch.autograd.grad(loss, (q, k, v))
    loss_ref = (ref.sdpa(q, k, v, causal=True).transpose(1, 3) * w).sum()
    want = torch.autograd.grad(loss_ref, (q, k, v))
    for g, x in zip(got, want):
        assert max_err(g, x) <= (1e-9 if dtype == torch.float64 else 5e-2) * max(
            1.0, x.abs().max().item()
        )


class TestErrors:
    def test_last_dim_must_be_contiguous(self):
        q, k, v = inputs(SHAPES["square"], torch.float32, "cpu")
        q = torch.randn(2, 40, 4, 64)[..., ::2]
        with pytest.raises(flashkit.FlashkitError) as e:
            flashkit.flash_attn_func(q, k, v)
        assert e.value.argument == "q.stride[3]"

    def test_dtype_mismatch(self):
        q, k, v = inputs(SHAPES["square"], torch.float32, "cpu")
        with pytest.raises(ValueError, match=r"^v.dtype:"):
            flashkit.flash_attn_func(q, k, v.double())
        with pytest.raises(ValueError, match=r"^q.dtype:"):
            flashkit.flash_attn_func(*(x.to(torch.int32) for x in (q, k, v)))

    def test_shape_mismatch(self):
        q, k, v = inputs(SHAPES["gqa"], torch.float32, "cpu")
        with pytest.raises(ValueError, match=r"^v.shape\[1\]:"):
            flashkit.flash_attn_func(q, k, v[:, :5])
        with pytest.raises(ValueError, match=r"^q: expected a rank-4"):
            flashkit.flash_attn_func(q[0], k, v)

    def test_mixed_kinds(self):
        q, k, v = inputs(SHAPES["square"], torch.float32, "cpu")
        with pytest.raises(TypeError, match=r"^k: expected a torch array like q"):
            flashkit.flash_attn_func(q, k.numpy(), v)

    def test_varlen_needs_max_seqlen(self):
        (q, k, v), cu_q, cu_k = packed([4, 4], [4, 4], 2, 2, 8, torch.float32, "cpu")
        with pytest.raises(ValueError, match=r"^max_seqlen_q:"):
            flashkit.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)

    def test_unsupported_options(self):
        q, k, v = inputs(SHAPES["square"], torch.float32, "cpu")
        with pytest.raises(NotImplementedError, match=r"^dropout_p:"):
            flashkit.flash_attn_func(q, k, v, dropout_p=0.1)
        with pytest.raises(NotImplementedError, match=r"^return_attn_probs:"):
            flashkit.flash_attn_func(q, k, v, return_attn_probs=True)

    @pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
    def test_float8_reaches_flashkit_as_float8(self, dtype):
        """DLPack's float8 codes map to flashkit's e4m3/e5m2: either the call runs or flashkit
        rejects the dtype by that name."""
        q, k, v = (x.to(dtype) for x in inputs(SHAPES["square"], torch.float32, "cpu"))
        try:
            out = flashkit.flash_attn_func(q, k, v)
        except flashkit.FlashkitError as e:
            assert str(e).startswith("q.dtype:")
            assert ("e4m3" if dtype == torch.float8_e4m3fn else "e5m2") in str(e)
        else:
            assert out.dtype == torch.bfloat16

    @pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
    def test_device_mismatch(self):
        q, k, v = inputs(SHAPES["square"], torch.float32, "cpu")
        device = "cuda:0"
        if HAS_CUDA:
            q = q.to(device)
        else:  # a CPU-only build rejects CUDA memory, naming the argument and the device
            k = k.to(device)
        with pytest.raises(flashkit.FlashkitError, match="cuda:0|cpu") as e:
            flashkit.flash_attn_func(q, k, v)
        assert e.value.argument in ("k.device", "q.device")


def packed_rand(device, dtype):
    g = torch.Generator(device="cpu").manual_seed(5)
    return lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64).to(device, dtype)


def assert_same_call(out, want_out, grads, want_grads, dtype):
    """A packed call against its unpacked twin: the same kernels on the same values, so equal up
    to the order of dQ's atomic additions (a few ulps)."""
    tol = {torch.float64: 1e-12, torch.float32: 1e-5}.get(dtype, 2e-2)
    assert max_err(out, want_out) <= tol * max(1.0, want_out.abs().max().item())
    for got, want in zip(grads, want_grads):
        assert got.shape == want.shape
        assert max_err(got, want) <= tol * max(1.0, want.abs().max().item())


@pytest.mark.parametrize("device, dtype", CASES)
def test_qkvpacked_matches_the_unpacked_call(device, dtype):
    rand = packed_rand(device, dtype)
    qkv = rand(2, 24, 3, 4, 64).requires_grad_()  # d 64: the sm90 kernel on an H200
    out = flashkit.flash_attn_qkvpacked_func(qkv, causal=True)
    dout = rand(*out.shape)
    (dqkv,) = torch.autograd.grad(out, qkv, dout)
    q, k, v = (x.clone().requires_grad_() for x in qkv.detach().unbind(2))
    want_out = flashkit.flash_attn_func(q, k, v, causal=True)
    want = torch.stack(torch.autograd.grad(want_out, (q, k, v), dout), 2)
    assert_same_call(out, want_out, [dqkv], [want], dtype)


@pytest.mark.parametrize("device, dtype", CASES)
def test_varlen_kvpacked_matches_the_unpacked_call(device, dtype):
    rand = packed_rand(device, dtype)
    lens_q, lens_k = [7, 0, 19], [12, 3, 30]
    cu_q, cu_k = (
        torch.tensor([0, *torch.tensor(n).cumsum(0).tolist()], dtype=torch.int32).to(device)
        for n in (lens_q, lens_k)
    )
    varlen = (cu_q, cu_k, max(lens_q), max(lens_k))
    q, kv = rand(sum(lens_q), 8, 64).requires_grad_(), rand(sum(lens_k), 2, 2, 64).requires_grad_()
    out = flashkit.flash_attn_varlen_kvpacked_func(q, kv, *varlen, window_size=(9, 3))
    dout = rand(*out.shape)
    dq, dkv = torch.autograd.grad(out, (q, kv), dout)
    q2, k, v = (x.clone().requires_grad_() for x in (q.detach(), *kv.detach().unbind(1)))
    want_out = flashkit.flash_attn_varlen_func(q2, k, v, *varlen, window_size=(9, 3))
    want_dq, want_dk, want_dv = torch.autograd.grad(want_out, (q2, k, v), dout)
    assert_same_call(out, want_out, [dq, dkv], [want_dq, torch.stack([want_dk, want_dv], 1)], dtype)

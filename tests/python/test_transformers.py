"""attn_implementation="flashkit" in Hugging Face transformers: a small randomly initialised
Llama (GQA + RoPE) and Mistral (sliding window) give the logits of attn_implementation="sdpa"
and the same greedy generations, with and without padding. No weights are downloaded."""

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import flashkit  # noqa: E402
import flashkit.integrations.transformers  # noqa: E402, F401  (registers "flashkit")

HAS_CUDA = torch.cuda.is_available() and flashkit.info()["build"]["cuda"]
# fp32 on the CPU: both implementations are exact up to summation order.
SETUPS = [("cpu", torch.float32, 1e-4)] + ([("cuda", torch.bfloat16, 3e-2)] if HAS_CUDA else [])


def tiny_config(kind: str):
    common = dict(
        vocab_size=97,
        # head dim 32: one the CUDA kernels compile (128 / 4 heads)
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    if kind == "llama":
        return transformers.LlamaConfig(**common)
    return transformers.MistralConfig(sliding_window=8, **common)


def model_pair(kind, device, dtype):
    """The same random weights under sdpa and flashkit."""
    torch.manual_seed(0)
    config = tiny_config(kind)
    models = []
    for impl in ("sdpa", "flashkit"):
        m = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=impl)
        models.append(m)
    models[1].load_state_dict(models[0].state_dict())
    return [m.to(device, dtype).eval() for m in models]


def batch(device, padded: bool):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 97, (2, 20), generator=g)
    mask = torch.ones_like(ids)
    if padded:  # left padding, as generation uses
        mask[1, :6] = 0
        ids[1, :6] = 0
    return ids.to(device), mask.to(device)


@pytest.mark.parametrize("device, dtype, tol", SETUPS)
@pytest.mark.parametrize("kind", ["llama", "mistral"])
@pytest.mark.parametrize("padded", [False, True])
def test_logits_match_sdpa(device, dtype, tol, kind, padded):
    sdpa, fk = model_pair(kind, device, dtype)
    ids, mask = batch(device, padded)
    with torch.no_grad():
        want = sdpa(input_ids=ids, attention_mask=mask).logits.float()
        got = fk(input_ids=ids, attention_mask=mask).logits.float()
    keep = mask.bool()  # padded positions' outputs are meaningless in both
    err = (got - want)[keep].abs().max().item()
    assert err <= tol * want[keep].abs().max().item()


@pytest.mark.parametrize("device, dtype, tol", SETUPS)
@pytest.mark.parametrize("kind", ["llama", "mistral"])
@pytest.mark.parametrize("padded", [False, True])
def test_greedy_generation_matches_sdpa(device, dtype, tol, kind, padded):
    sdpa, fk = model_pair(kind, device, dtype)
    ids, mask = batch(device, padded)
    kw = dict(attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=0)
    want = sdpa.generate(ids, **kw)
    got = fk.generate(ids, **kw)
    assert torch.equal(got, want)


def test_training_step_gradients_match_sdpa():
    sdpa, fk = model_pair("llama", "cpu", torch.float64)
    ids, mask = batch("cpu", padded=False)
    grads = []
    for m in (sdpa, fk):
        m.train()
        m(input_ids=ids, labels=ids).loss.backward()
        grads.append(m.model.layers[0].self_attn.q_proj.weight.grad)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-8, atol=1e-10)


def test_dropout_is_refused():
    torch.manual_seed(0)
    config = tiny_config("llama")
    config.attention_dropout = 0.1
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="flashkit")
    model.train()
    ids, _ = batch("cpu", padded=False)
    with pytest.raises(NotImplementedError, match="dropout"):
        model(input_ids=ids)


def test_packed_sequences_match_separate_runs():
    """Padding-free batches (transformers' cu_seq_lens_* keyword arguments) run as varlen."""
    sdpa, fk = model_pair("llama", "cpu", torch.float32)
    ids, _ = batch("cpu", padded=False)
    packed = torch.cat([ids[0], ids[1, :13]])[None]
    position_ids = torch.cat([torch.arange(20), torch.arange(13)])[None]
    cu = torch.tensor([0, 20, 33], dtype=torch.int32)
    with torch.no_grad():
        got = fk(
            input_ids=packed,
            position_ids=position_ids,
            cu_seq_lens_q=cu,
            cu_seq_lens_k=cu,
            max_length_q=20,
            max_length_k=20,
        ).logits[0]
        want = torch.cat(
            [sdpa(input_ids=ids[:1]).logits[0], sdpa(input_ids=ids[1:, :13]).logits[0]]
        )
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)

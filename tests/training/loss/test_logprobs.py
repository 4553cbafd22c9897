"""verifiers/training/loss/logprobs.py: sequence_logprobs runs rows sharing a prompt packed, with the
plain forward's log-probs and gradients; the chunked log-softmax and entropy; the scoring window."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def _group_batch(vocab: int, prompt_len: int = 7, lengths=(5, 2, 6, 3)):
    """One prompt and completions of different lengths, right-padded: ids, attention mask, start."""
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, vocab, (prompt_len,), generator=g)
    width = prompt_len + max(lengths)
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        ids[i, :prompt_len] = prompt
        ids[i, prompt_len : prompt_len + n] = torch.randint(3, vocab, (n,), generator=g)
        attn[i, : prompt_len + n] = 1
    return ids, attn, prompt_len


def _logprobs_and_grads(model, ids, attn, start, monkeypatch, pack: bool):
    from verifiers.training.loss import logprobs

    monkeypatch.setattr(logprobs, "can_pack", logprobs.can_pack if pack else lambda *a: False)
    model.zero_grad()
    lp, ent = logprobs.sequence_logprobs(model, ids, attn, start, temperature=0.7, with_entropy=True)
    (lp * attn[:, start:]).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return lp.detach(), ent, grads


@pytest.mark.parametrize(
    "lora,attn_impl,segmented,checkpointing",
    [
        (False, "sdpa", False, False),
        (True, "sdpa", False, False),
        (True, "eager", False, False),
        (True, "sdpa", True, False),
        (True, "eager", True, False),
        (True, "sdpa", True, True),
    ],
)
def test_packed_rows_match_plain_forward(
    tiny_model_dir, monkeypatch, lora, attn_impl, segmented, checkpointing
):
    from verifiers.models import get_model
    from verifiers.training.loss import logprobs
    from verifiers.training.loss.logprobs import can_pack

    # segmented: packed_attention computes only the allowed blocks (from SEGMENTED_FROM_LEN on;
    # here for every length). checkpointing (grpo_defaults' setting): the layers run again in
    # backward, after the packed forward returned, and must take the same attention path.
    monkeypatch.setattr(logprobs, "SEGMENTED_FROM_LEN", 1 if segmented else 10**9)

    # fp32 explicitly: on a machine with CUDA get_model defaults to bf16, too coarse for 1e-5.
    model = get_model(
        str(tiny_model_dir), model_kwargs={"attn_implementation": attn_impl, "dtype": torch.float32}
    )
    if lora:
        from peft import get_peft_model

        import verifiers as vf

        model = get_peft_model(model, vf.lora_defaults(r=4, alpha=8))
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    ids, attn, start = _group_batch(model.config.vocab_size)
    assert can_pack(model, ids, attn, start)
    shapes = []
    hook = model.register_forward_pre_hook(
        lambda m, a, kw: shapes.append(kw["input_ids"].shape), with_kwargs=True
    )
    fast = _logprobs_and_grads(model, ids, attn, start, monkeypatch, pack=True)
    hook.remove()
    real = attn[:, start:].bool()
    assert shapes == [(1, start + int(real.sum()))]  # one sequence: the prompt once, no padding
    plain = _logprobs_and_grads(model, ids, attn, start, monkeypatch, pack=False)
    torch.testing.assert_close(fast[0][real], plain[0][real], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fast[1][real], plain[1][real], rtol=1e-5, atol=1e-5)
    assert not fast[0][~real].any()  # padding positions hold 0
    assert fast[2].keys() == plain[2].keys() and len(plain[2]) > 0
    for name, grad in plain[2].items():
        # Sums over many tokens in another order: compare against the gradient's scale.
        err = (fast[2][name] - grad).abs().max()
        assert err <= 1e-5 * grad.abs().max() + 1e-7, (name, float(err))


def test_can_pack_needs_a_shared_prompt_right_padding_and_a_short_sequence(tiny_model_dir, monkeypatch):
    from verifiers.models import get_model
    from verifiers.training.loss import logprobs

    model = get_model(str(tiny_model_dir))
    ids, attn, start = _group_batch(model.config.vocab_size)
    assert logprobs.can_pack(model, ids, attn, start)
    assert not logprobs.can_pack(model, ids[:1], attn[:1], start)  # one row: nothing to share
    holed = attn.clone()
    holed[2, start + 1] = 0  # a masked token inside a row
    assert not logprobs.can_pack(model, ids, holed, start)
    monkeypatch.setattr(logprobs, "MAX_PACKED_LEN", start + int(attn[:, start:].sum()) - 1)
    assert not logprobs.can_pack(model, ids, attn, start)


def test_packing_pays_by_the_measured_cost_model():
    from verifiers.training.loss.logprobs import packing_pays

    # SmolLM2 (hidden 576), prompt 441 + 8 completions of ~200 tokens: 2038 packed tokens
    # against 8 rows of 721 (measured 14.6 s packed, 28.9 s padded).
    # Cost: packed 2038 + 2038^2 / 2304 = 3841; padded 5768 + 8 * 721^2 / 2304 = 7573.
    assert packing_pays(2038, 8, 721, 576)
    # Two rows that share only a 1-token prompt: packing saves no tokens and pays
    # (2L)^2 attention pairs instead of 2 L^2: 1 + 2 * 500 = 1001 packed tokens,
    # cost 1001 + 1001^2 / 256 = 4915 against 2 * 501 + 2 * 501^2 / 256 = 2963.
    assert not packing_pays(1001, 2, 501, 64)


def test_long_groups_are_packed_even_where_the_full_mask_would_cost_more(tiny_model_dir, monkeypatch):
    from verifiers.models import get_model
    from verifiers.training.loss import logprobs

    # Two rows sharing a 1-token prompt, 1 + 2 x 600 = 1201 packed tokens: under the full mask
    # (1201^2 pairs) packing_pays says no. With packed_attention (from SEGMENTED_FROM_LEN on)
    # it scores 1 + 2 x 600 x 601 pairs over 1201 tokens, never more than the padded batch.
    model = get_model(str(tiny_model_dir))
    ids, attn, start = _group_batch(model.config.vocab_size, prompt_len=1, lengths=(600, 600))
    hidden = model.config.hidden_size
    assert not logprobs.packing_pays(1201, 2, 601, hidden)
    assert logprobs.can_pack(model, ids, attn, start)
    monkeypatch.setattr(logprobs, "SEGMENTED_FROM_LEN", 10**9)
    assert not logprobs.can_pack(model, ids, attn, start)


def test_shared_prefix_needs_identical_real_prompts():
    from verifiers.training.loss.logprobs import shared_prefix

    ids, attn, start = _group_batch(50)
    assert shared_prefix(ids, attn, start)
    assert not shared_prefix(ids[:1], attn[:1], start)  # one row: nothing to share
    other = ids.clone()
    other[2, 3] += 1
    assert not shared_prefix(other, attn, start)
    left_padded = attn.clone()
    left_padded[1, 0] = 0
    assert not shared_prefix(ids, left_padded, start)


def test_selective_log_softmax_matches_full_log_softmax_in_chunks():
    from verifiers.training.loss.logprobs import entropy_from_logits, selective_log_softmax

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, generator=g, requires_grad=True)
    ids = torch.randint(0, 11, (3, 5), generator=g)
    full = torch.log_softmax(logits, -1).gather(-1, ids[..., None]).squeeze(-1)
    chunked = selective_log_softmax(logits, ids, chunk_rows=4)
    torch.testing.assert_close(chunked, full)
    chunked.sum().backward()  # gradients flow through the chunked writes
    assert logits.grad is not None and logits.grad.abs().sum() > 0
    p = torch.softmax(logits.detach(), -1)
    torch.testing.assert_close(entropy_from_logits(logits, chunk_rows=4), -(p * p.log()).sum(-1))


def test_scoring_inputs_trims_padding_and_starts_at_first_loss_token():
    from verifiers.training.loss.logprobs import scoring_inputs

    ids = torch.tensor([[5, 6, 7, 8, 0, 0], [5, 6, 7, 8, 9, 0]])
    attn = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0]])
    loss = torch.tensor([[0, 0, 1, 1, 0, 0], [0, 0, 0, 1, 1, 0]])
    out = scoring_inputs(ids, attn, loss, loss.float() * -0.5)
    assert out["start"] == 2 and out["input_ids_BT"].shape == (2, 5)
    assert out["loss_mask_BT"].tolist() == [[1, 1, 0], [0, 1, 1]]

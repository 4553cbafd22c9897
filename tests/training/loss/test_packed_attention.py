"""packed_attention: only the allowed blocks of a packed group, the same output as the full masked attention."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from verifiers.training.loss.packed_attention import (  # noqa: E402
    NAME,
    install,
    make_segments,
    packed_attention,
)


def test_segments_of_a_two_token_prefix_and_rows_of_two_and_one():
    # Packed: [p0 p1 | a0 a1 | b0] -> positions 0 1 | 2 3 | 4; N = 2, b's second slot is padding.
    seg = make_segments(2, [2, 1], "cpu")
    assert seg.index_BN.tolist() == [[2, 3], [4, 0]]
    assert seg.valid_BN.tolist() == [[True, True], [True, False]]
    # Keys per row: [p0 p1 | own 0, own 1]. a0 sees p0 p1 a0; a1 sees all four;
    # b0 sees p0 p1 b0; b's padded query (its output is dropped) sees the prefix and b0,
    # and never the padded key.
    assert seg.mask_B1NK[:, 0].int().tolist() == [
        [[1, 1, 1, 0], [1, 1, 1, 1]],
        [[1, 1, 1, 0], [1, 1, 1, 0]],
    ]


def _full_mask_attention(q_1HLD, k_1KLD, v_1KLD, prefix, counts, scale):
    """The reference: plain sdpa over all L positions with the packed group's L x L mask."""
    L = q_1HLD.shape[2]
    segment = torch.repeat_interleave(torch.arange(len(counts) + 1), torch.tensor([prefix, *counts]))
    arange = torch.arange(L)
    allowed = (arange[:, None] >= arange[None, :]) & (
        (segment[None, :] == 0) | (segment[:, None] == segment[None, :])
    )
    groups = q_1HLD.shape[1] // k_1KLD.shape[1]
    k, v = k_1KLD.repeat_interleave(groups, 1), v_1KLD.repeat_interleave(groups, 1)
    out = torch.nn.functional.scaled_dot_product_attention(q_1HLD, k, v, attn_mask=allowed, scale=scale)
    return out.transpose(1, 2)  # [1, L, H, D]


@pytest.mark.parametrize("counts", [[3, 1, 4], [5, 0, 2], [1, 1]], ids=["uneven", "an-empty-row", "one-each"])
def test_matches_the_full_masked_attention_with_grouped_heads(counts):
    g = torch.Generator().manual_seed(0)
    prefix, H, K, D = 3, 4, 2, 8  # 4 query heads share 2 key/value heads
    L = prefix + sum(counts)
    q = torch.randn(1, H, L, D, generator=g, requires_grad=True)
    k = torch.randn(1, K, L, D, generator=g, requires_grad=True)
    v = torch.randn(1, K, L, D, generator=g, requires_grad=True)
    module = SimpleNamespace(training=False)
    seg = make_segments(prefix, counts, "cpu")
    fast, weights = packed_attention(module, q, k, v, None, scaling=0.3, vf_segments=seg)
    assert weights is None and fast.shape == (1, L, H, D)
    fast_grads = torch.autograd.grad((fast * torch.arange(L)[None, :, None, None]).sum(), (q, k, v))
    full = _full_mask_attention(q, k, v, prefix, counts, 0.3)
    full_grads = torch.autograd.grad((full * torch.arange(L)[None, :, None, None]).sum(), (q, k, v))
    torch.testing.assert_close(fast, full, rtol=1e-5, atol=1e-6)
    for a, b in zip(fast_grads, full_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_layers_switch_for_the_packed_forward_only_and_switch_back_even_after_an_error(tiny_model_dir):
    from verifiers.models import get_model

    model = get_model(str(tiny_model_dir), model_kwargs={"attn_implementation": "eager"})
    install(model)
    install(model)  # idempotent: one pair of hooks per layer
    layers = [m for m in model.modules() if type(m).__name__.endswith("Attention")]
    assert layers and all(len(m._forward_pre_hooks) == 1 for m in layers)
    seen = []
    layers[0].o_proj.register_forward_pre_hook(lambda m, a: seen.append(model.config._attn_implementation))
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    model(input_ids=ids)
    model(input_ids=ids, vf_segments=make_segments(3, [1, 1], "cpu"))
    assert seen == ["eager", NAME] and model.config._attn_implementation == "eager"

    def fail(module, args):
        raise RuntimeError("a layer failed")

    layers[0].o_proj.register_forward_pre_hook(fail)
    with pytest.raises(RuntimeError, match="a layer failed"):
        model(input_ids=ids, vf_segments=make_segments(3, [1, 1], "cpu"))
    assert model.config._attn_implementation == "eager"

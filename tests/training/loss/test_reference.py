"""The KL term's reference (loss/reference.py) on one CPU process: which form it takes, its
log-probs, and ``after_step``'s mixing toward the policy (the gathers: tests/training/weights/test_sync.py)."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from verifiers.training.loss.logprobs import eval_logprobs  # noqa: E402
from verifiers.training.loss.reference import Reference  # noqa: E402


def tiny_llama():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(config)


ACCELERATOR = SimpleNamespace(autocast=contextlib.nullcontext, unwrap_model=lambda m: m)


def args(**over):
    base = dict(beta=0.1, device="cpu", temperature=1.0, sync_ref_model=False, ref_model_sync_steps=2,
                ref_model_mixup_alpha=1.0)  # fmt: skip
    return SimpleNamespace(**(base | over))


def reference(policy, peft=False, **over):
    return Reference(lambda: policy, ACCELERATOR, args(**over), peft=peft, zero3=False, unwrap=lambda m: m)


IDS = torch.tensor([[1, 5, 9, 13, 17, 21]])
ATTN = torch.ones_like(IDS)


def nudge(model):
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))


def test_a_frozen_copy_scores_as_the_policy_did():
    policy = tiny_llama()
    ref = reference(policy)
    assert ref.model is not None and ref.model is not policy
    assert not any(p.requires_grad for p in ref.model.parameters()) and not ref.model.training
    before = eval_logprobs(policy, IDS, ATTN, 2, 1.0, "cpu")
    nudge(policy)
    torch.testing.assert_close(ref.logprobs(IDS, ATTN, 2), before)
    assert not torch.equal(eval_logprobs(policy, IDS, ATTN, 2, 1.0, "cpu"), before)


def test_no_copy_without_beta_or_with_peft():
    policy = tiny_llama()
    assert reference(policy, beta=0.0).model is None
    assert reference(policy, peft=True).model is None
    reference(policy, beta=0.0, sync_ref_model=True).after_step(2)  # nothing to mix: no error


def test_with_peft_the_reference_is_the_policy_with_its_adapter_disabled():
    policy, disabled = tiny_llama(), []

    @contextlib.contextmanager
    def disable_adapter():
        disabled.append(True)
        yield

    policy.disable_adapter = disable_adapter
    lp = reference(policy, peft=True).logprobs(IDS, ATTN, 2)
    assert disabled == [True]
    torch.testing.assert_close(lp, eval_logprobs(policy, IDS, ATTN, 2, 1.0, "cpu"))


def test_after_step_mixes_toward_the_policy_every_sync_steps_only_when_asked():
    policy = tiny_llama()
    still = reference(policy)  # sync_ref_model=False
    synced = reference(policy, sync_ref_model=True, ref_model_sync_steps=2, ref_model_mixup_alpha=1.0)
    nudge(policy)
    for ref in (still, synced):
        ref.after_step(1)
        assert not any(
            torch.equal(p, q) for p, q in zip(ref.model.parameters(), policy.parameters(), strict=True)
        )
    still.after_step(2)
    assert not any(
        torch.equal(p, q) for p, q in zip(still.model.parameters(), policy.parameters(), strict=True)
    )
    synced.after_step(2)
    assert all(torch.equal(p, q) for p, q in zip(synced.model.parameters(), policy.parameters(), strict=True))

"""Full fine-tuning of a bf16 model keeps fp32 master weights (issue 39, finding 4).

An AdamW step moves a weight by about the learning rate; a bf16 weight near 0.02 has a
spacing of 1.2e-4, so at lr 1e-5 most updates round back to the old value. The trainer
upcasts trainable half-precision parameters (compute stays bf16 under ``bf16=True``'s
autocast); one real step against the fake server must then move nearly every weight.
"""

from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

import verifiers as vf  # noqa: E402
from tests.doubles.trainer import RecordingClient, grpo_args, make_env  # noqa: E402


def bf16_trainer(tiny_model_dir, server, tmp_path, peft_config=None):
    model = vf.get_model(str(tiny_model_dir), model_kwargs={"dtype": torch.bfloat16})
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    return vf.GRPOTrainer(
        model=model,
        processing_class=vf.get_tokenizer(str(tiny_model_dir)),
        env=make_env(),
        args=grpo_args(tmp_path, max_steps=1, learning_rate=1e-5, weight_decay=0.0),
        peft_config=peft_config,
        client=RecordingClient(server),
    )


def test_one_step_at_lr_1e5_moves_nearly_every_weight_of_a_bf16_model(
    tiny_model_dir, fake_server, tmp_path, caplog
):
    caplog.set_level(logging.INFO, logger="verifiers.training.trainer")
    trainer = bf16_trainer(tiny_model_dir, fake_server, tmp_path)
    before = {n: p.detach().float().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    trainer.train()
    assert trainer.state.global_step == 1
    after = dict(trainer.model.named_parameters())
    changed = sum(int((after[n].detach().float() != b).sum()) for n, b in before.items())
    total = sum(b.numel() for b in before.values())
    assert changed / total >= 0.9, (
        f"one AdamW step at lr 1e-5 changed only {changed / total:.1%} of the weights"
    )
    assert all(after[n].dtype == torch.float32 for n in before)
    lines = [r.getMessage() for r in caplog.records if "fp32 master weights" in r.getMessage()]
    assert len(lines) == 1 and "bfloat16" in lines[0], lines  # said once, with the memory cost's remedy


def test_lora_leaves_the_frozen_base_in_bf16_and_the_adapter_in_fp32(tiny_model_dir, fake_server, tmp_path):
    from peft import LoraConfig

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    trainer = bf16_trainer(tiny_model_dir, fake_server, tmp_path, peft_config=lora)
    dtypes = {(p.requires_grad, p.dtype) for p in trainer.model.parameters()}
    # PEFT's autocast_adapter_dtype keeps the adapter fp32; the frozen base is not copied to fp32.
    assert dtypes == {(True, torch.float32), (False, torch.bfloat16)}

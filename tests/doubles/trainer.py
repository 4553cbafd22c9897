"""A GRPOTrainer on the tiny model, wired to a fake or a real server, as the trainer tests build it.

Stands in for the inference side of a training run: ``RecordingClient`` wraps the fake OpenAI
server (``tests/doubles/openai_server.py``) with the weight-sync methods of ``VLLMClient``,
recorded instead of sent; ``grpo_args``, ``make_env`` and ``make_trainer`` build a small CPU run
around it. ``server_args`` and ``server_env`` are the same run against a real vf-vllm
(``TOL`` bounds the per-token log-prob gap there).

Used by the default tier's trainer tests (tests/training/: test_trainer.py, test_master_weights.py,
lifecycle/, weights/test_sync_server.py, test_faults.py) and by tests/test_guide_snippets.py.
"""

from __future__ import annotations

import hashlib

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")

import verifiers as vf  # noqa: E402
from tests.doubles.openai_server import FakeServer  # noqa: E402


def reply_of(request: dict) -> str:
    """Deterministic per (prompt, seed): 1-12 characters, so rewards differ within a group."""
    key = f"{request.get('messages')}|{request.get('seed')}".encode()
    n = 1 + hashlib.sha256(key).digest()[0] % 12
    return "abcdefghijkl"[:n]


def length_reward(completion, **_) -> float:
    text = completion[-1]["content"] if isinstance(completion, list) else completion
    return len(text) / 12.0


def make_env(n: int = 8) -> vf.Environment:
    rows = {"question": [f"say something {i}" for i in range(n)], "answer": [""] * n}
    return vf.SingleTurnEnv(
        dataset=datasets.Dataset.from_dict(rows),
        eval_dataset=datasets.Dataset.from_dict(rows),
        rubric=vf.Rubric(funcs=[length_reward]),
    )


class RecordingClient:
    """An AsyncOpenAI client for the fake server plus the weight-sync methods, recorded."""

    def __init__(self, server: FakeServer, lora_enabled: bool = True):
        self._oai = server.client()
        self.model_name = server.model
        self.lora_enabled = lora_enabled
        self.syncs: list[tuple[str, int]] = []
        self.resets = 0
        self.last_weights: dict[str, torch.Tensor] = {}

    def __getattr__(self, name):
        return getattr(self._oai, name)

    def health(self):
        return {"model": self.model_name, "status": "ready"}

    def update_weights(self, named_tensors, **kw):
        named = list(named_tensors)
        self.last_weights.update({n: t.clone() for n, t in named})
        self.syncs.append(("full", len(named)))

    def update_lora(self, tensors, name="vf-lora", config=None):
        if not self.lora_enabled:
            raise vf.ServerError("LoRA is not enabled on this server", status=400)
        self.syncs.append(("lora", len(tensors)))

    def reset_prefix_cache(self):
        self.resets += 1


def grpo_args(tmp_path, **overrides):
    base = dict(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        report_to="none",
        max_steps=3,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        num_generations=4,
        learning_rate=1e-3,
        max_tokens=12,
        max_seq_len=256,
        max_prompt_length=128,
        beta=0.0,
        logging_steps=1,
        save_strategy="no",
        num_batches_ahead=0,
        importance_sampling_mask_low=None,  # the fake server's log-probs are not the model's
        importance_sampling_mask_high=None,
        async_generation_timeout=60,
        seed=0,
    )
    base.update(overrides)
    return vf.GRPOConfig(**base)


def make_trainer(tiny_model_dir, client, args, peft_config=None, env=None):
    model, tokenizer = vf.get_model_and_tokenizer(str(tiny_model_dir))
    return vf.GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        env=env or make_env(),
        args=args,
        peft_config=peft_config,
        client=client,
    )


def train_log(trainer) -> list[dict]:
    return [h for h in trainer.state.log_history if "loss" in h and "step" in h]


TOL = 1e-3  # fp32 server vs fp32 trainer, per sampled token


def char_length_reward(completion, **_) -> float:
    """Random tokens differ in length, so this reward varies within a group from the first step."""
    text = completion[-1]["content"] if isinstance(completion, list) else completion
    return min(len(text), 200) / 100.0


def server_env(n: int = 8) -> vf.Environment:
    rows = {"question": [f"Count to {i}." for i in range(n)], "answer": [""] * n}
    return vf.SingleTurnEnv(
        dataset=datasets.Dataset.from_dict(rows),
        eval_dataset=datasets.Dataset.from_dict(rows),
        rubric=vf.Rubric(funcs=[char_length_reward]),
    )


def server_args(tmp_path, **overrides):
    base = dict(
        max_tokens=16,
        learning_rate=3e-3,
        num_batches_ahead=0,
        importance_sampling_mask_low=0.5,
        importance_sampling_mask_high=5.0,
        mask_truncated_completions=False,  # the random model never stops before max_tokens
    )
    base.update(overrides)
    return grpo_args(tmp_path, **base)

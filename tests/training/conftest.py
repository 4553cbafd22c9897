"""Shared by the training tests: the fake server of the in-process trainers (test_trainer.py,
test_master_weights.py, lifecycle/), the one of the launched runs (test_distributed.py,
lifecycle/test_exit_status.py) and the real vf-vllm of test_distributed.py and test_trainer.py."""

from __future__ import annotations

import contextlib
import math

import pytest


@pytest.fixture(scope="module")
def fake_server():
    """The fake OpenAI server of an in-process trainer (``tests/doubles/trainer.py``'s ``reply_of``)."""
    from tests.doubles.openai_server import FakeServer
    from tests.doubles.trainer import reply_of

    with FakeServer(reply=reply_of) as server:
        yield server


@pytest.fixture(scope="module")
def fake_url():
    """The fake OpenAI server's URL, replying as ``tests/drivers/dist_train.py`` expects.

    Deterministic rollouts: replies depend only on (prompt, seed), and the generator seeds each
    rollout from (seed, batch, slot), so every run with the same seed trains the same batches."""
    from tests.doubles import openai_server as fakeserver
    from tests.drivers.dist_train import fake_reply

    with pytest.MonkeyPatch.context() as mp:
        # Sampling log-probs of a uniform policy over the 49152-token vocabulary, close to the random
        # tiny model's own (entropy 10.79), so importance weights stay near 1 and the loss is not tiny.
        mp.setattr(fakeserver, "logprob_of", lambda token_id: -math.log(49152))
        with fakeserver.fake_server(reply=fake_reply) as server:
            yield server.url


@pytest.fixture(scope="package")
def lora_vllm_server(tiny_model_dir, tmp_path_factory):
    """One vf-vllm for test_distributed.py and test_trainer.py (a start costs about 30 s on 2
    cores): the tiny model, LoRA on (rank 8), seeded. Their runs sync weights into it, so each
    test that assumes the base weights asks for ``base_weights`` below."""
    from tests.doubles.vllm_server import serve

    flags = ("--max-num-seqs", "32", "--enable-lora", "--max-lora-rank", "8", "--seed", "0")
    flags += ("--no-enable-chunked-prefill",)  # vLLM-CPU bug with seeded, chunked prompts
    with serve(tiny_model_dir, tmp_path_factory.mktemp("training-vllm"), *flags) as server:
        yield server


@pytest.fixture
def base_weights(lora_vllm_server, tiny_model_dir):
    """Put the tiny model's own weights back on the shared server, for a test that assumes them:
    earlier runs synced theirs, and a LoRA run's adapter applies to whatever base it holds."""
    import torch
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    with contextlib.closing(lora_vllm_server.client()) as client:
        client.update_weights(list(base.named_parameters()))

"""Sizing vLLM's KV cache from the run (verifiers/inference/server/kv_cache.py). (What vf-rl asks for:
tests/cli/rl/test_plan.py.)"""

from __future__ import annotations

import pytest

from verifiers.inference.server.kv_cache import (
    TOKEN_GRANULE,
    MiB,
    cache_dtype_bytes,
    choose_kv_cache,
    kv_bytes_per_token,
)

GiB = 1024 * MiB
SMOLLM2_BF16 = kv_bytes_per_token(num_layers=30, num_kv_heads=3, head_size=64, dtype_bytes=2)


def test_bytes_per_token_counts_k_and_v_in_every_layer():
    assert SMOLLM2_BF16 == 2 * 30 * 3 * 64 * 2 == 23040
    assert kv_bytes_per_token(2, 2, 32, 4) == 1024  # the tiny test model in fp32
    with pytest.raises(ValueError, match="head_size=0"):
        kv_bytes_per_token(2, 2, 0, 4)


@pytest.mark.parametrize(
    "name, model_bytes, expected",
    [
        ("auto", 4, 4),
        (None, 2, 2),
        ("bfloat16", 4, 2),
        ("float16", 4, 2),
        ("fp8_e4m3", 2, 1),
        ("float32", 2, 4),
    ],
)
def test_cache_dtype_bytes(name, model_bytes, expected):
    assert cache_dtype_bytes(name, model_bytes) == expected


def test_sequences_times_length_when_it_fits():
    plan = choose_kv_cache(1024, max_model_len=512, num_seqs=128, available_bytes=20 * GiB)
    assert plan.tokens == 128 * 512 and plan.bytes == 128 * 512 * 1024  # 64 MiB, not 92% of RAM
    assert plan.line.startswith("vf-vllm: KV cache 64.0 MiB for 65536 tokens (128 sequences × 512 tokens")
    assert "\n" not in plan.line and "--kv-cache-memory-bytes" in plan.line


def test_vllm_defaults_are_capped_at_half_the_free_memory():
    # SmolLM2 served with vLLM's defaults (128 sequences × 8192 tokens) would want 22.5 GiB.
    plan = choose_kv_cache(SMOLLM2_BF16, max_model_len=8192, num_seqs=128, available_bytes=12 * GiB)
    assert plan.bytes <= 6 * GiB + TOKEN_GRANULE * SMOLLM2_BF16
    assert plan.bytes > 5.9 * GiB and "capped at 50% of the 12.0 GiB available" in plan.line


def test_never_below_one_full_sequence():
    # vLLM refuses to start with a cache that cannot hold one --max-model-len sequence.
    # (plus one block, which vLLM keeps for itself: exactly 2048 tokens would hold only 1920)
    plan = choose_kv_cache(SMOLLM2_BF16, max_model_len=8192, num_seqs=128, available_bytes=100 * MiB)
    assert plan.tokens == 8192 + TOKEN_GRANULE
    assert "raised to one --max-model-len 8192 sequence plus a block" in plan.line
    plan = choose_kv_cache(1024, max_model_len=2048, tokens=1000)
    assert plan.tokens == 2048 + TOKEN_GRANULE


def test_run_sized_tokens_are_taken_as_given_and_rounded_to_whole_blocks():
    plan = choose_kv_cache(SMOLLM2_BF16, max_model_len=1024, tokens=32 * 512, available_bytes=1 * MiB)
    assert plan.tokens == 16384 and plan.bytes == 16384 * SMOLLM2_BF16  # not capped: the run needs it
    assert "--kv-cache-tokens 16384" in plan.line
    assert choose_kv_cache(1024, max_model_len=100, tokens=1000).tokens == 1024  # whole 256-token granules


def test_bad_arguments():
    with pytest.raises(ValueError):
        choose_kv_cache(1024, max_model_len=512)
    with pytest.raises(ValueError):
        choose_kv_cache(1024, max_model_len=512, tokens=0)

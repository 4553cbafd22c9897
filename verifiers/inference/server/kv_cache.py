"""Sizing vLLM's KV cache from the run, for ``vf-vllm`` (and ``vf-rl``, which passes ``--kv-cache-tokens``).

Why: on the CPU backend ``--gpu-memory-utilization`` (default 0.92) is a share of
host memory that vLLM reserves up front, and vLLM refuses to start when that much
is not free: on a shared 24 GiB machine it fails as soon as anything else holds
memory. A server needs a cache for the sequences it will run at once, no more:

    tokens = sequences × tokens per sequence    (vf-vllm: --max-num-seqs × --max-model-len;
                                                  vf-rl: min(batch_size, max_concurrent) × max_seq_len)
    bytes  = tokens × 2 (K and V) × layers × KV heads × head size × bytes per value

The result is never below one full ``max_model_len`` sequence plus one block
(vLLM refuses a smaller cache; it keeps a block for itself), and, when it comes from vLLM's defaults rather than from the
run, never above half of the memory available at start (the trainer and the
rest of the machine need the other half). A cache smaller than what every
sequence could use only means queued or recomputed requests, never a failure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Rounded up to whole blocks: vLLM's CPU block sizes (16, 128, 256) all divide it.
TOKEN_GRANULE = 256
AVAILABLE_SHARE = 0.5
MiB = 1 << 20


@dataclass(frozen=True)
class KVCachePlan:
    """The chosen cache: its size in bytes and tokens, and the one log line that explains it."""

    bytes: int
    tokens: int
    line: str


def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_size: int, dtype_bytes: int) -> int:
    """Bytes of KV cache one token takes across the model: K and V in every attention layer."""
    for name, value in (
        ("num_layers", num_layers),
        ("num_kv_heads", num_kv_heads),
        ("head_size", head_size),
        ("dtype_bytes", dtype_bytes),
    ):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive integer")
    return 2 * num_layers * num_kv_heads * head_size * dtype_bytes


def cache_dtype_bytes(kv_cache_dtype: str | None, model_dtype_bytes: int) -> int:
    """Bytes per cached value for vLLM's ``--kv-cache-dtype`` (``auto``: the model's dtype)."""
    name = (kv_cache_dtype or "auto").lower()
    if name == "auto":
        return model_dtype_bytes
    if name in ("float16", "bfloat16", "half"):
        return 2
    if name in ("float32", "float"):
        return 4
    return 1  # fp8 / int8 / 4-bit formats: one byte or less per value (over-sizing is harmless)


def choose_kv_cache(
    bytes_per_token: int,
    max_model_len: int,
    *,
    tokens: int | None = None,
    num_seqs: int | None = None,
    available_bytes: int | None = None,
    share: float = AVAILABLE_SHARE,
) -> KVCachePlan:
    """The KV cache for a server whose sequences are at most ``max_model_len`` tokens.

    ``tokens`` is what the run needs (vf-rl's ``--kv-cache-tokens``): taken as
    given, raised to one full sequence if smaller. Without it the cache holds
    ``num_seqs`` full-length sequences, capped at ``share`` of ``available_bytes``.
    """
    if bytes_per_token < 1 or max_model_len < 1:
        raise ValueError("bytes_per_token and max_model_len must be positive")
    # One full sequence, plus a block: vLLM keeps one block of the cache for itself.
    floor = max_model_len + TOKEN_GRANULE
    if tokens is not None:
        if tokens < 1:
            raise ValueError(f"tokens={tokens} must be >= 1")
        wanted, why = tokens, f"--kv-cache-tokens {tokens}"
        capped = False
    else:
        if num_seqs is None or num_seqs < 1:
            raise ValueError("pass tokens or a positive num_seqs")
        wanted = num_seqs * max_model_len
        why = f"{num_seqs} sequences × {max_model_len} tokens"
        capped = False
        if available_bytes is not None:
            cap = int(available_bytes * share) // bytes_per_token
            if wanted > cap:
                wanted, capped = cap, True
    chosen = max(wanted, floor)
    chosen = math.ceil(chosen / TOKEN_GRANULE) * TOKEN_GRANULE
    size = chosen * bytes_per_token
    notes = []
    if capped:
        notes.append(f"capped at {share:.0%} of the {_mib(available_bytes or 0)} available")
    if wanted < floor:
        notes.append(f"raised to one --max-model-len {max_model_len} sequence plus a block")
    detail = f"{why}, {_kib(bytes_per_token)} per token" + (f"; {'; '.join(notes)}" if notes else "")
    line = (
        f"vf-vllm: KV cache {_mib(size)} for {chosen} tokens ({detail}); "
        "--kv-cache-memory-bytes or --gpu-memory-utilization set it yourself"
    )
    return KVCachePlan(bytes=size, tokens=chosen, line=line)


def available_memory() -> int | None:
    """Bytes of memory available right now (psutil, which vLLM depends on), or None."""
    try:
        import psutil
    except ImportError:
        return None
    return int(psutil.virtual_memory().available)


def _mib(n: int) -> str:
    return f"{n / MiB:.1f} MiB" if n < 10 * 1024 * MiB else f"{n / (1024 * MiB):.1f} GiB"


def _kib(n: int) -> str:
    return f"{n / 1024:.1f} KiB"

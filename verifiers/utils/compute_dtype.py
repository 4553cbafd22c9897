"""Which float type a CPU computes in fastest: bf16 where its matmul is clearly faster, else fp32.

CPUs differ: an Intel Xeon with AMX multiplies bf16 matrices about 5x as fast as fp32
(measured here: 1,085 against 189 GFLOP/s on 2 cores), an AMD EPYC with AVX-512 BF16
about 2x, and a CPU without bf16 instructions emulates it, slower than fp32. Flags in
``/proc/cpuinfo`` do not say how fast oneDNN's kernels are on a given machine, so the
rates are measured: one square matmul per dtype, best of the runs in a tenth of a second,
twice, the dtypes taking turns (a busy neighbour only slows a run down, and slows both dtypes
alike, so the ratio holds under load). Why that long: on a Xeon with AMX the first
milliseconds of bf16 ran at half speed (451 and 491 GFLOP/s at the start of two processes,
858-870 later; 5 runs of a 1024 matmul last 10 ms), which put the ratio at 1.58-1.62, a hair
above the threshold, where a busier start would have chosen fp32.

bf16 is chosen when its rate is at least :data:`BF16_MIN_SPEEDUP` times fp32's. Then
the trainer computes under bf16 autocast with fp32 master weights and fp32 log-softmax
(``grpo_defaults`` and vf-rl's ``bf16`` left to AUTO), and ``vf-vllm`` serves in bf16
(``--dtype`` not given). Elsewhere both stay fp32.

``VF_CPU_DTYPE`` (``bfloat16``/``float32``/``auto``) fixes the choice without measuring:
vf-rl measures once and passes its choice to both children through it, so server and
trainer never disagree on a borderline CPU, and a run can be pinned for reproducibility.
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass

# "Clearly faster": below this the dtype's precision loss buys too little speed. Autocast
# also casts each weight once per forward, which eats part of a small gain.
BF16_MIN_SPEEDUP = 1.5
ENV = "VF_CPU_DTYPE"
_NAMES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float32": "float32", "fp32": "float32"}


@dataclass(frozen=True)
class ComputeDtype:
    """The choice and what it rests on (rates are None when ``VF_CPU_DTYPE`` decided)."""

    dtype: str  # "bfloat16" | "float32"
    fp32_flops: float | None
    bf16_flops: float | None
    reason: str

    @property
    def bf16(self) -> bool:
        return self.dtype == "bfloat16"

    def line(self) -> str:
        """One line for the log: the dtype and why."""
        return f"CPU compute dtype: {self.dtype} ({self.reason})"


MEASURE_S = 0.1  # per dtype and round (two rounds): see the module's docstring


def matmul_rate(dtype_name: str, n: int = 1024, repeats: int = 5, min_seconds: float = 0.0) -> float:
    """Best FLOP/s of an ``n x n`` matmul in ``dtype_name`` over at least ``repeats`` runs, and
    runs for at least ``min_seconds`` (torch's threads)."""
    import torch

    dtype = getattr(torch, dtype_name)
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    out = torch.empty(n, n, dtype=dtype)
    torch.matmul(a, b, out=out)  # warm-up: thread pool, page faults, oneDNN's kernel choice
    best, runs, start = float("inf"), 0, time.perf_counter()
    while runs < repeats or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        torch.matmul(a, b, out=out)
        best = min(best, time.perf_counter() - t0)
        runs += 1
    return 2.0 * n**3 / best


def measured_rates(rounds: int = 2, seconds: float = MEASURE_S) -> tuple[float, float]:
    """(fp32, bf16) FLOP/s: the best of ``rounds`` turns each, the dtypes alternating so that a slow
    moment (a neighbour's burst, a core's clock still rising) is not all one dtype's."""
    fp32 = bf16 = 0.0
    for _ in range(rounds):
        fp32 = max(fp32, matmul_rate("float32", min_seconds=seconds))
        bf16 = max(bf16, matmul_rate("bfloat16", min_seconds=seconds))
    return fp32, bf16


def decide(fp32_flops: float, bf16_flops: float) -> ComputeDtype:
    """The choice from two measured rates (pure: the tests give it numbers)."""
    ratio = bf16_flops / fp32_flops if fp32_flops > 0 else 0.0
    rates = f"bf16 {bf16_flops / 1e9:,.0f} GFLOP/s, fp32 {fp32_flops / 1e9:,.0f} GFLOP/s: {ratio:.2f}x"
    if ratio >= BF16_MIN_SPEEDUP:
        return ComputeDtype("bfloat16", fp32_flops, bf16_flops, f"{rates}; set {ENV}=float32 to keep fp32")
    return ComputeDtype("float32", fp32_flops, bf16_flops, f"{rates}, under {BF16_MIN_SPEEDUP}x")


def from_env(value: str | None) -> ComputeDtype | None:
    """The choice ``VF_CPU_DTYPE`` fixes, None for unset/``auto``; a bad value is one clear error."""
    value = (value or "").strip().lower()
    if value in ("", "auto"):
        return None
    if value not in _NAMES:
        from verifiers.errors import ConfigError

        raise ConfigError(f"{ENV}={value!r} is not a dtype", hint="use bfloat16, float32 or auto")
    return ComputeDtype(_NAMES[value], None, None, f"{ENV}={value}")


@functools.cache
def cpu_compute_dtype() -> ComputeDtype:
    """This machine's CPU compute dtype: ``VF_CPU_DTYPE`` if set, else measured once per process."""
    fixed = from_env(os.environ.get(ENV))
    if fixed is not None:
        return fixed
    return decide(*measured_rates())

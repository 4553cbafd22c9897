"""Which cores vLLM-CPU's worker threads use when vf-vllm serves on a CPU: all of them.

vLLM-CPU's default (``VLLM_CPU_OMP_THREADS_BIND=auto``) binds the worker's OpenMP
threads to one logical CPU per physical core and *reserves* one core per worker for
the scheduler and API processes. On a small machine that halves generation: on 2
cores the worker gets one. vf-vllm serves a trainer that waits while it generates
(``cpu_phases``, training/cpu_phases.py), so the reserved core would sit idle.
Measured on 2 cores (SmolLM2-135M fp32, 8 prompts × 8 samples × ≤ 64 tokens):
27.0 s a batch with ``auto``, 15.7 s with the threads on both cores.

So, for a single-worker CPU server whose user set neither
``VLLM_CPU_OMP_THREADS_BIND`` nor ``VLLM_CPU_NUM_OF_RESERVED_CPU``, vf-vllm binds
the threads to one logical CPU of every physical core this process may run on (the
same per-core choice as vLLM's ``auto``, without the reservation). Machines with
several NUMA nodes keep vLLM's choice: ``auto`` binds to one node on purpose.

Beside other work (``utils/cpu_load.py``, measured once at start) the cores that work
keeps busy are left out: a thread team whose slowest member shares its core runs at that
member's speed (measured on 2 cores beside one spinning process: 0.47x raw vLLM's tokens/s
with both cores, where vLLM's default kept one core clear).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from pathlib import Path

from verifiers.utils.cpu_load import (
    SYS_ROOT,
    CpuLoad,
    cores_to_use,
    enabled,
    least_busy,
    measure,
    one_cpu_per_core,
)

USER_VARS = ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU")


def numa_nodes(sys_root: Path = SYS_ROOT) -> int:
    nodes = [p for p in (sys_root / "node").glob("node[0-9]*")] if (sys_root / "node").is_dir() else []
    return max(len(nodes), 1)


def all_cores_binding(
    world_size: int,
    env: Mapping[str, str] | None = None,
    sys_root: Path = SYS_ROOT,
    load: CpuLoad | None = None,
) -> str | None:
    """The ``VLLM_CPU_OMP_THREADS_BIND`` value vf-vllm sets, or None to leave vLLM's default.

    None when the user chose (either variable set), when the server has several
    workers (tensor/pipeline/data parallel: each needs its own cores), or on a
    machine with several NUMA nodes. Beside ``load`` (other processes' CPU use), the
    cores it keeps busy are left out, down to one.
    """
    env = os.environ if env is None else env
    if world_size != 1 or any(env.get(v) for v in USER_VARS) or numa_nodes(sys_root) > 1:
        return None
    cpus = one_cpu_per_core(sorted(os.sched_getaffinity(0)), sys_root)
    if len(cpus) <= 1:
        return None
    return ",".join(str(c) for c in least_busy(cpus, load, cores_to_use(len(cpus), load)))


def bind_all_cores(world_size: int, env: MutableMapping[str, str] | None = None) -> str | None:
    """Set ``VLLM_CPU_OMP_THREADS_BIND`` in ``env``; return the line to log, or None.

    With an explicit list vLLM reserves no core (its reservation only shapes ``auto``)."""
    env = os.environ if env is None else env
    if all_cores_binding(world_size, env) is None:  # the user chose, or vLLM's own choice stands
        return None
    load = measure(env=env) if enabled(env) else None
    binding = all_cores_binding(world_size, env, load=load)
    env["VLLM_CPU_OMP_THREADS_BIND"] = binding
    if load is not None and load.busy_cores():
        return (
            f"vf-vllm: other processes use {load.others_cores:.1f} cores of this machine; vLLM-CPU worker "
            f"threads on cores {binding} only (a thread sharing its core holds back every other). "
            "Set VLLM_CPU_OMP_THREADS_BIND to choose the cores yourself."
        )
    return (
        f"vf-vllm: vLLM-CPU worker threads on cores {binding} (all of them; a trainer on this machine "
        "waits while the server generates). Set VLLM_CPU_OMP_THREADS_BIND to choose the cores yourself."
    )

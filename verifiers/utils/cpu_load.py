"""Which cores other processes keep busy, so that a thread pool can stay off them.

A CPU thread pool (OpenMP under torch and vLLM-CPU) splits each matmul evenly over its
threads and waits for the slowest. One thread sharing its core with a busy neighbour runs at
half speed and holds every other thread back: measured on 2 cores with one process spinning
beside a run, vf-vllm bound to both cores fell to 0.43x of raw vLLM (which leaves one core to
its API process) and training slowed 3-4x where TRL slowed 2.2x. A pool on the idle cores only
is smaller but never waits on a shared one.

So at start vf-vllm (``inference/cpu_binding.py``) and the trainer (torch's thread count)
sample ``/proc/stat`` for a moment and leave out each core another process kept at least
:data:`BUSY_SHARE` busy, when some core stays idle. This sees the load at start only: a
neighbour that starts later is not followed (``VF_CPU_IGNORE_LOAD=1`` turns the sampling off;
``OMP_NUM_THREADS`` / ``VLLM_CPU_OMP_THREADS_BIND`` set by the user win).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

BUSY_SHARE = 0.5  # a core busier than this with other work would hold a thread pool back
SAMPLE_S = 0.5  # long enough to see a steady neighbour, short beside a server's start-up
IGNORE_ENV = "VF_CPU_IGNORE_LOAD"


def read_proc_stat(path: str = "/proc/stat") -> dict[int, tuple[int, int]]:
    """``{cpu: (busy jiffies, total jiffies)}`` from ``/proc/stat``'s per-CPU lines."""
    out: dict[int, tuple[int, int]] = {}
    try:
        with open(path) as f:
            for line in f:
                if not line.startswith("cpu") or line.startswith("cpu "):
                    continue
                name, *fields = line.split()
                values = [int(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
                idle = values[3] + values[4]
                out[int(name[3:])] = (sum(values) - idle, sum(values))
    except (OSError, ValueError):
        return {}
    return out


@dataclass(frozen=True)
class CoreLoad:
    """Each core's busy share over the sample, and the cores a thread pool should use."""

    share: dict[int, float]
    busy: list[int]
    free: list[int]

    def line(self) -> str:
        shares = ", ".join(f"core {c} {self.share[c]:.0%}" for c in self.busy)
        return f"{shares} busy with other processes at start"


def core_shares(
    cpus: Iterable[int],
    sample_s: float = SAMPLE_S,
    read: Callable[[], dict[int, tuple[int, int]]] = read_proc_stat,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[int, float] | None:
    """Each core's busy share over ``sample_s`` seconds; None when ``/proc/stat`` cannot tell."""
    before = read()
    sleep(sample_s)
    after = read()
    share = {}
    for c in cpus:
        if c not in before or c not in after:
            return None
        busy, total = after[c][0] - before[c][0], after[c][1] - before[c][1]
        share[c] = busy / total if total > 0 else 0.0
    return share


def core_load(
    cpus: Iterable[int],
    sample_s: float = SAMPLE_S,
    read: Callable[[], dict[int, tuple[int, int]]] = read_proc_stat,
    sleep: Callable[[float], None] = time.sleep,
) -> CoreLoad | None:
    """Busy and free cores among ``cpus``; None when nothing needs leaving out (no core busy, every
    core busy, the sampling is off, or ``/proc/stat`` cannot be read)."""
    cpus = sorted(cpus)
    if os.environ.get(IGNORE_ENV, "").lower() in ("1", "true", "yes") or len(cpus) < 2:
        return None
    share = core_shares(cpus, sample_s, read, sleep)
    if share is None:
        return None
    busy = [c for c in cpus if share[c] >= BUSY_SHARE]
    free = [c for c in cpus if share[c] < BUSY_SHARE]
    if not busy or not free:
        return None
    return CoreLoad(share, busy, free)


def threads_beside_load(world_size: int = 1) -> str | None:
    """On a CPU trainer: torch's threads only on the cores no other process keeps busy at start;
    returns the line to log, or None when nothing changed (quiet cores, ``OMP_NUM_THREADS`` set by
    the user, or several processes, which share the cores among themselves already)."""
    if world_size != 1 or os.environ.get("OMP_NUM_THREADS"):
        return None
    import torch

    cpus = sorted(os.sched_getaffinity(0))
    load = core_load(cpus)
    threads = torch.get_num_threads()
    if load is None or threads <= len(load.free):
        return None
    torch.set_num_threads(len(load.free))
    return (
        f"training with {len(load.free)} torch thread(s) instead of {threads} ({load.line()}); "
        "set OMP_NUM_THREADS to choose, or VF_CPU_IGNORE_LOAD=1 to use every core"
    )

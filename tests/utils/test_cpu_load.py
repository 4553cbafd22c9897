"""Others' CPU load, measured from /proc, and the cores it leaves to a thread team."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from verifiers.errors import ConfigError
from verifiers.utils import cpu_load
from verifiers.utils.cpu_load import CpuLoad, cores_to_use, descendants, least_busy, measure, ours_env


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


def test_descendants_follow_the_tree():
    ppids = {10: 1, 11: 10, 12: 11, 13: 1, 14: 13}
    assert descendants({10}, ppids) == {10, 11, 12}
    assert descendants({10, 13}, ppids) == {10, 11, 12, 13, 14}


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


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="reads /proc")
def test_a_real_neighbour_is_seen_and_our_own_children_are_not():
    # Our own child spinning: ours, not a neighbour.
    child = subprocess.Popen(
        [sys.executable, "-c", "import time\nend = time.monotonic() + 3\nwhile time.monotonic() < end: pass"]
    )
    try:
        time.sleep(0.3)
        quiet = measure(window_s=0.5, env={})
    finally:
        child.kill()
        child.wait()
    # A process outside our tree (its parent exits at once), as another user's work.
    out = subprocess.run(
        [sys.executable, "-c", _DETACHED_SPIN, "3"], stdout=subprocess.PIPE, text=True, check=True
    )
    pid = int(out.stdout)
    try:
        time.sleep(0.3)
        busy = measure(window_s=0.5, env={})
        named = measure(window_s=0.5, env={"VF_CPU_OURS": str(pid)})  # named as ours: not counted
    finally:
        os.kill(pid, 9)
    assert quiet is not None and busy is not None and named is not None
    # Bounds leave room for the machine's other work (CI runs nothing else beside the suite).
    assert busy.others_cores - quiet.others_cores > 0.6, (quiet, busy)
    assert named.others_cores < busy.others_cores - 0.6, (named, busy)
    assert max(busy.busy_by_cpu.values()) > 0.8

"""benchmarks/_common.py's memory meters on a real process tree: a parent and a forked child that
share a touched buffer. The RSS sum counts the shared pages once per process; the PSS sum once."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20
SHARED_MIB = 200

# Touch SHARED_MIB of memory, fork (the child's pages are the parent's until written), both wait.
TREE = f"""
import os, sys, time
buf = bytearray({SHARED_MIB} * {MIB})
for i in range(0, len(buf), 4096):
    buf[i] = 1
if os.fork() == 0:
    time.sleep(60); os._exit(0)
print("ready", flush=True)
time.sleep(60)
"""


@pytest.fixture(scope="module")
def common():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location("bench_common", ROOT / "benchmarks" / "_common.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_the_pss_sum_counts_a_page_two_processes_share_once(common):
    pytest.importorskip("psutil")
    if not Path("/proc/self/smaps_rollup").exists():
        pytest.skip("needs /proc/PID/smaps_rollup (Linux 4.14+)")
    proc = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.2)  # the child has forked before "ready"; let it settle
        rss, pss = common.tree_rss_bytes(proc.pid), common.tree_pss_bytes(proc.pid)
        with common.PeakTreeRSS(proc.pid, every_s=0.05) as peak:
            time.sleep(0.3)
    finally:
        proc.kill()
        proc.wait()
    assert rss >= 2 * SHARED_MIB * MIB  # the buffer in each process's RSS
    assert SHARED_MIB * MIB <= pss <= rss - 0.8 * SHARED_MIB * MIB, (rss / MIB, pss / MIB)
    assert peak.peak >= 2 * SHARED_MIB * MIB and SHARED_MIB * MIB <= peak.peak_pss < peak.peak
    assert common.pss_bytes(2**22 + 12345) == 0  # no such process: nothing, not an error

"""vf-vllm on CPU: worker threads on one logical CPU of every physical core, unless the user chose."""

from __future__ import annotations

import os

import pytest

from verifiers.inference.cpu_binding import all_cores_binding, bind_all_cores, one_cpu_per_core


def fake_sys(tmp_path, cores: dict[int, tuple[int, int]], nodes: int = 1):
    """A /sys/devices/system tree: logical CPU -> (package, core)."""
    for cpu, (pkg, core) in cores.items():
        topo = tmp_path / "cpu" / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text(f"{pkg}\n")
        (topo / "core_id").write_text(f"{core}\n")
    for n in range(nodes):
        (tmp_path / "node" / f"node{n}").mkdir(parents=True)
    return tmp_path


def test_one_logical_cpu_per_physical_core(tmp_path):
    # 4 logical CPUs, 2 cores with 2 hyperthreads each: vLLM's auto pick is the last of each core.
    root = fake_sys(tmp_path, {0: (0, 0), 1: (0, 1), 2: (0, 0), 3: (0, 1)})
    assert one_cpu_per_core([0, 1, 2, 3], root) == [2, 3]
    assert one_cpu_per_core([0, 1], tmp_path / "missing") == [0, 1]  # no topology: each its own core


def test_binding_is_left_to_the_user_or_to_vllm_when_it_should_be(tmp_path, monkeypatch):
    cpus = sorted(os.sched_getaffinity(0))
    root = fake_sys(tmp_path, {c: (0, c) for c in cpus})
    quiet = lambda cpus: None  # noqa: E731 - no core busy with other work
    if len(cpus) > 1:
        assert all_cores_binding(1, {}, root, quiet) == (",".join(map(str, cpus)), None)
    assert all_cores_binding(1, {"VLLM_CPU_OMP_THREADS_BIND": "0"}, root) is None
    assert all_cores_binding(1, {"VLLM_CPU_NUM_OF_RESERVED_CPU": "1"}, root) is None
    assert all_cores_binding(2, {}, root) is None  # tensor parallel: each worker needs its own cores
    two_nodes = fake_sys(tmp_path / "numa", {c: (0, c) for c in cpus}, nodes=2)
    assert all_cores_binding(1, {}, two_nodes) is None


def test_bind_all_cores_sets_the_variable_and_says_so(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0, 1})
    monkeypatch.setattr("verifiers.inference.cpu_binding.one_cpu_per_core", lambda cpus, *_: cpus)
    monkeypatch.setattr("verifiers.inference.cpu_binding.numa_nodes", lambda *_: 1)
    monkeypatch.setattr("verifiers.inference.cpu_binding.core_load", lambda cpus: None)
    env: dict[str, str] = {}
    line = bind_all_cores(1, env)
    assert env == {"VLLM_CPU_OMP_THREADS_BIND": "0,1"} and "cores 0,1" in line
    assert bind_all_cores(1, {"VLLM_CPU_OMP_THREADS_BIND": "1"}) is None


def test_cores_busy_with_other_work_are_left_out(monkeypatch):
    """A neighbour spinning on core 1: the worker threads go on core 0 only, even a single core
    (vLLM's auto could pick the busy one), and the line says why."""
    from verifiers.utils.cpu_load import CoreLoad

    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0, 1})
    monkeypatch.setattr("verifiers.inference.cpu_binding.one_cpu_per_core", lambda cpus, *_: cpus)
    monkeypatch.setattr("verifiers.inference.cpu_binding.numa_nodes", lambda *_: 1)
    monkeypatch.setattr(
        "verifiers.inference.cpu_binding.core_load", lambda cpus: CoreLoad({0: 0.02, 1: 0.97}, [1], [0])
    )
    env: dict[str, str] = {}
    line = bind_all_cores(1, env)
    assert env == {"VLLM_CPU_OMP_THREADS_BIND": "0"}
    assert "cores 0 (the idle ones: core 1 97% busy with other processes at start)" in line


def test_core_load_reads_other_processes_share_from_proc_stat(monkeypatch):
    from verifiers.utils import cpu_load

    monkeypatch.delenv(cpu_load.IGNORE_ENV, raising=False)  # the suite's conftest sets it
    # jiffies (busy, total) per core before and after the sample: core 1 busy 95%, core 0 5%
    samples = iter([{0: (0, 0), 1: (0, 0)}, {0: (5, 100), 1: (95, 100)}])
    load = cpu_load.core_load([0, 1], read=lambda: next(samples), sleep=lambda s: None)
    assert load.busy == [1] and load.free == [0] and load.share == {0: 0.05, 1: 0.95}
    for before, after in (
        ({0: (0, 0), 1: (0, 0)}, {0: (5, 100), 1: (5, 100)}),  # quiet: nothing left out
        ({0: (0, 0), 1: (0, 0)}, {0: (90, 100), 1: (95, 100)}),
    ):  # all busy: nothing gained
        samples = iter([before, after])
        assert cpu_load.core_load([0, 1], read=lambda it=samples: next(it), sleep=lambda s: None) is None
    monkeypatch.setenv(cpu_load.IGNORE_ENV, "1")
    assert cpu_load.core_load([0, 1], read=lambda: pytest.fail("sampled"), sleep=lambda s: None) is None
    assert cpu_load.read_proc_stat()  # this machine's own /proc/stat parses


def test_a_real_spinning_neighbour_is_seen():
    import subprocess
    import sys
    import time

    from verifiers.utils.cpu_load import BUSY_SHARE, core_shares

    cpus = sorted(os.sched_getaffinity(0))
    spin = subprocess.Popen(["taskset", "-c", str(cpus[-1]), sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        share = core_shares(cpus, sample_s=1.0)
    finally:
        spin.kill()
        spin.wait()
    assert share is not None and share[cpus[-1]] >= max(BUSY_SHARE, 0.8), share


def test_trainer_threads_stay_off_a_busy_core(monkeypatch):
    import torch

    from verifiers.utils import cpu_load

    monkeypatch.delenv(cpu_load.IGNORE_ENV, raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0, 1})
    monkeypatch.setattr(cpu_load, "core_load", lambda cpus: cpu_load.CoreLoad({0: 0.0, 1: 0.99}, [1], [0]))
    threads = torch.get_num_threads()
    set_to = []
    monkeypatch.setattr(torch, "set_num_threads", set_to.append)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    line = cpu_load.threads_beside_load()
    assert set_to == [1] and "1 torch thread(s) instead of 2" in line and "core 1 99% busy" in line
    assert cpu_load.threads_beside_load(world_size=2) is None  # ranks share the cores already
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert cpu_load.threads_beside_load() is None  # the user's count
    assert torch.get_num_threads() == 2 and threads >= 1

"""vf-vllm on CPU: worker threads on one logical CPU of every physical core, unless the user chose."""

from __future__ import annotations

import os

from verifiers.inference.server.cpu_binding import all_cores_binding, bind_all_cores, one_cpu_per_core


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
    if len(cpus) > 1:
        assert all_cores_binding(1, {}, root) == ",".join(map(str, cpus))
    assert all_cores_binding(1, {"VLLM_CPU_OMP_THREADS_BIND": "0"}, root) is None
    assert all_cores_binding(1, {"VLLM_CPU_NUM_OF_RESERVED_CPU": "1"}, root) is None
    assert all_cores_binding(2, {}, root) is None  # tensor parallel: each worker needs its own cores
    two_nodes = fake_sys(tmp_path / "numa", {c: (0, c) for c in cpus}, nodes=2)
    assert all_cores_binding(1, {}, two_nodes) is None


def test_bind_all_cores_sets_the_variable_and_says_so(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0, 1})
    monkeypatch.setattr("verifiers.inference.server.cpu_binding.one_cpu_per_core", lambda cpus, *_: cpus)
    monkeypatch.setattr("verifiers.inference.server.cpu_binding.numa_nodes", lambda *_: 1)
    env: dict[str, str] = {"VF_CPU_NEIGHBOURS": "ignore"}  # the machine's other work aside
    line = bind_all_cores(1, env)
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0,1" and "cores 0,1" in line
    assert bind_all_cores(1, {"VLLM_CPU_OMP_THREADS_BIND": "1"}) is None


def test_cores_that_other_work_keeps_busy_are_left_out(monkeypatch, tmp_path):
    from verifiers.utils.cpu_load import CpuLoad

    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0, 1, 2, 3})
    root = fake_sys(tmp_path, {c: (0, c) for c in range(4)})
    beside_one = CpuLoad(others_cores=1.0, busy_by_cpu={0: 0.1, 1: 0.0, 2: 1.0, 3: 0.05}, window_s=0.5)
    assert all_cores_binding(1, {}, root, load=beside_one) == "0,1,3"
    quiet = CpuLoad(others_cores=0.2, busy_by_cpu={2: 0.2}, window_s=0.5)
    assert all_cores_binding(1, {}, root, load=quiet) == "0,1,2,3"
    everything = CpuLoad(others_cores=9.0, busy_by_cpu={}, window_s=0.5)
    assert all_cores_binding(1, {}, root, load=everything) == "0"  # never fewer than one


def test_bind_all_cores_says_when_it_leaves_cores_to_a_neighbour(monkeypatch):
    from verifiers.utils.cpu_load import CpuLoad

    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0, 1})
    monkeypatch.setattr("verifiers.inference.server.cpu_binding.one_cpu_per_core", lambda cpus, *_: cpus)
    monkeypatch.setattr("verifiers.inference.server.cpu_binding.numa_nodes", lambda *_: 1)
    busy = CpuLoad(others_cores=1.0, busy_by_cpu={0: 1.0, 1: 0.0}, window_s=0.5)
    monkeypatch.setattr("verifiers.inference.server.cpu_binding.measure", lambda **_: busy)
    env: dict[str, str] = {"VF_CPU_NEIGHBOURS": "measure"}
    line = bind_all_cores(1, env)
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "1" and "1.0 cores" in line
    env = {"VF_CPU_NEIGHBOURS": "ignore"}  # the switch: every core
    assert "cores 0,1" in bind_all_cores(1, env) and env["VLLM_CPU_OMP_THREADS_BIND"] == "0,1"

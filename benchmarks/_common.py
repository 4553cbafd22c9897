"""Helpers shared by the benchmarks: a vf-vllm server for a run, process memory, machine FLOP/s.

Imported as ``from _common import ...``: ``python benchmarks/X.py`` puts this folder on
``sys.path``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import verifiers as vf
from verifiers.inference.server.parent_watch import launcher_env

# vLLM-CPU settings every benchmark uses: eager (no compile time), the trainer's dtype
# (``vllm_server(dtype=...)``, fp32 unless a benchmark says), chunked prefill off (a vLLM-CPU bug
# with seeded, chunked prompts), a fixed 1 GiB KV cache unless ``vllm_server(kv_tokens=...)``
# sizes it to the run.
SERVER_FLAGS = (
    "--enforce-eager", "--max-model-len", "1024", "--no-enable-chunked-prefill", "--max-num-seqs", "64",
)  # fmt: skip
KV_FLAGS = ("--kv-cache-memory-bytes", str(1 << 30))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(client, proc: subprocess.Popen, log_path, timeout: float = 900) -> None:
    """Poll the server until ready; fail at once, with its log's tail, if its process exits."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            tail = open(log_path, errors="replace").read()[-2000:]
            raise SystemExit(f"vf-vllm exited with code {proc.returncode}; log tail:\n{tail}")
        try:
            client.wait_until_ready(timeout=5)
            return
        except vf.ServerError:
            pass
    raise SystemExit(f"vf-vllm not ready after {timeout:.0f} s; see {log_path}")


class _Started(float):
    """The server's start-up time in seconds, also carrying its process id (``.pid``)."""

    pid: int


@contextlib.contextmanager
def vllm_server(
    model_dir: str,
    port: int,
    log_path: Path,
    extra_args: Sequence[str] = (),
    cpus: str | None = None,
    env: dict[str, str] | None = None,
    kv_tokens: int | None = None,
    dtype: str = "float32",
) -> Iterator[float]:
    """A vf-vllm server; yields its start-up time (a float with ``.pid``), stops it (process group) after.

    No --enable-lora: on a CPU server the trainer syncs merged weights (lora_sync="auto").
    ``cpus`` (e.g. ``"0"``) pins the whole server process tree to those cores (``taskset``).
    ``env`` adds variables to the server's environment (e.g. ``VLLM_CPU_OMP_THREADS_BIND``).
    ``kv_tokens`` sizes the KV cache for that many tokens (``--kv-cache-tokens``) instead of 1 GiB.
    """
    from verifiers.inference.client.vllm_client import VLLMClient

    cmd = [sys.executable, "-m", "verifiers.cli.vllm", "--model", model_dir, "--port", str(port)]
    kv = ("--kv-cache-tokens", str(kv_tokens)) if kv_tokens else KV_FLAGS
    cmd += [*SERVER_FLAGS, "--dtype", dtype, *kv, *extra_args]
    if cpus:
        cmd = ["taskset", "-c", cpus, *cmd]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # The server ends with this benchmark, even one killed with SIGKILL (parent_watch).
            env={**os.environ, **(env or {}), **launcher_env()},
        )
    try:
        t0 = time.time()
        wait_ready(VLLMClient(port=port), proc, log_path)
        started = _Started(time.time() - t0)
        started.pid = proc.pid
        yield started
    finally:
        # (a server that exited on its own is reported above: a missing group must not replace that)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _tree(pid: int) -> list:
    import psutil

    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _rss_sum(procs: list) -> int:
    import psutil

    total = 0
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += proc.memory_info().rss
    return total


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of a process and all its descendants (vf-vllm: API server, engine core, worker),
    summed: a page that several of them map (torch's libraries, which each process loads) counts once
    per process, so this overstates what the tree takes. :func:`tree_pss_bytes` counts it once."""
    return _rss_sum(_tree(pid))


def pss_bytes(pid: int) -> int:
    """A process's proportional set size: its own pages, plus each shared page divided by the number of
    processes mapping it (/proc/PID/smaps_rollup, Linux 4.14+; 0 when it cannot be read)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def tree_pss_bytes(pid: int) -> int:
    """The memory a process tree takes, each page counted once (the sum of the tree's PSS). A page
    it shares with a process outside the tree counts only in part: the benchmarks add it to their
    trainer's peak RSS, which counts the libraries both map in full, so the sum still counts those
    pages more than once (never less). Reported beside the RSS sum."""
    return _pss_sum(_tree(pid))


def _pss_sum(procs: list) -> int:
    return sum(pss_bytes(p.pid) for p in procs)


class PeakTreeRSS:
    """Samples the tree's summed RSS and PSS in a thread while the ``with`` body runs; ``.peak`` and
    ``.peak_pss`` are the highest of each.

    Sampling can miss a short spike, so these are lower bounds of the true peaks.
    """

    def __init__(self, pid: int, every_s: float = 0.25):
        self.pid, self.every_s, self.peak, self.peak_pss = pid, every_s, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            procs = _tree(self.pid)  # one walk of the process table per sample, for both sums
            self.peak = max(self.peak, _rss_sum(procs))
            self.peak_pss = max(self.peak_pss, _pss_sum(procs))
            self._stop.wait(self.every_s)

    def __enter__(self) -> PeakTreeRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def own_peak_rss_bytes() -> int:
    """This process's peak resident memory (VmHWM)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def matmul_flops(n: int = 2048, repeats: int = 10) -> float:
    """Best fp32 FLOP/s of an ``n x n`` matmul over ``repeats`` runs, with torch's current thread count.

    The best run, not the mean: other load on a shared machine only ever slows a run down.
    """
    from verifiers.utils.compute_dtype import matmul_rate

    return matmul_rate("float32", n, repeats)


def matmul_rates(n: int = 2048, repeats: int = 10) -> dict[str, float]:
    """Best FLOP/s of an ``n x n`` matmul in fp32 and in bf16 (this machine's two peaks)."""
    from verifiers.utils.compute_dtype import matmul_rate

    return {"float32": matmul_rate("float32", n, repeats), "bfloat16": matmul_rate("bfloat16", n, repeats)}


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), for saying which machine a run was on."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown CPU"


# Detached (its parent exits at once), so that it is not in the benchmark's process tree:
# vf-vllm and the trainer count their launcher's tree as their own work, not a neighbour's
# (verifiers/utils/cpu_load.py). It still ends with the benchmark, even a killed one.
_SPIN = """import os, sys, time
nice, watched = int(sys.argv[1]), int(sys.argv[2])
if os.fork():
    os._exit(0)
os.setsid()
os.nice(nice)
print(os.getpid(), flush=True)
os.close(1)
while True:
    end = time.monotonic() + 0.2
    while time.monotonic() < end:
        pass
    try:
        os.kill(watched, 0)
    except ProcessLookupError:
        os._exit(0)
"""


@contextlib.contextmanager
def neighbour(processes: int, nice: int = 0) -> Iterator[list[int]]:
    """``processes`` busy neighbours, each a Python process spinning on one core (unpinned: the
    kernel places it, as a user's other work), at ``nice``; stopped on exit. Yields their pids.

    Users' machines are rarely quiet: a compile, a browser, another job. Not this process's
    children (see ``_SPIN``), as another user's work would not be."""
    pids = []
    try:
        for _ in range(processes):
            out = subprocess.run(
                [sys.executable, "-c", _SPIN, str(nice), str(os.getpid())],
                stdout=subprocess.PIPE, text=True, check=True, timeout=30,
            )  # fmt: skip
            pids.append(int(out.stdout.split()[0]))
        time.sleep(0.5 if pids else 0)  # running before anything is measured
        yield pids
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

"""A finished run ends clean (issue 26): no unraisable exception at teardown, nothing left behind.

Each test runs a small piece end to end in a fresh ``python -X dev`` subprocess (dev mode shows
``ResourceWarning``s and every "Exception ignored in ..." line) whose ``sys.unraisablehook``
records what reaches it, then checks, inside the child after the work and outside after it
exited:

- exit status 0, in time (a thread nobody stops would hang the exit);
- no unraisable exception (e.g. asyncio's "Event loop is closed" from a subprocess transport's
  ``__del__`` after its loop closed), no "unclosed transport" warning;
- no thread still running but the main one and known idle daemons, no child process
  (processes carrying the run's marker in their environment), no new ``/dev/shm/vf-*`` file;
- ``drain_gloo_workers`` (what ``destroy_group_at_exit`` runs at exit): the gloo worker
  threads of a finished group are idle, so none frees a tensor after the interpreter started
  finalizing (``terminate called without an active exception``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHM = Path("/dev/shm")

# What the child runs around the piece: the hook, then a JSON report of what is left.
PRELUDE = """
import json, os, sys, threading
sys.path.insert(0, {root!r})
UNRAISABLE = []
sys.unraisablehook = lambda u: UNRAISABLE.append(f"{{type(u.exc_value).__name__}}: {{u.exc_value}} ({{u.object!r}})")
"""
REPORT = """
import gc
gc.collect()  # what a cycle held is freed now, while the hook is still ours
threads = [f"{t.name}{' (daemon)' if t.daemon else ''}" for t in threading.enumerate() if t is not threading.main_thread()]
print("REPORT " + json.dumps({"unraisable": UNRAISABLE, "threads": threads}), flush=True)
"""


def shm_files() -> set[str]:
    return {p.name for p in SHM.glob("vf-*")} if SHM.is_dir() else set()


def marked_processes(marker: str) -> list[int]:
    """Pids of live processes whose environment holds ``marker`` (the child and what it started)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "environ").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def run_clean(body: str, timeout: float = 120) -> dict:
    """Run ``body`` in a ``python -X dev`` child; check its exit and what it leaves; its report."""
    marker = "vf-clean-exit-" + uuid.uuid4().hex
    code = PRELUDE.format(root=str(ROOT)) + textwrap.dedent(body) + REPORT
    before = shm_files()
    env = {**os.environ, "VF_CLEAN_EXIT_MARK": marker, "HF_HUB_OFFLINE": "1", "PYTHONDEVMODE": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-X", "dev", "-c", code], cwd=ROOT, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        proc.kill()
    text = stdout + stderr
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{text[-4000:]}"
    for bad in ("Exception ignored", "Event loop is closed", "unclosed transport", "unclosed <socket"):
        assert bad not in text, f"{bad!r} in the output:\n{text[-4000:]}"
    reports = [line for line in stdout.splitlines() if line.startswith("REPORT ")]
    assert reports, text[-4000:]
    report = json.loads(reports[-1].removeprefix("REPORT "))
    assert report["unraisable"] == [], report["unraisable"]
    assert marked_processes(marker) == [], "processes of the run still alive"
    # Transport files are named vf-<kind>-<pid>-<random>: only the child's count (others may run).
    left = {name for name in shm_files() - before if f"-{proc.pid}-" in name}
    assert left == set(), f"shared-memory files left in /dev/shm: {left}"
    return report


def test_sandbox_runs_end_clean():
    # The cases that once left a pipe open when the loop closed: code killed by the sandbox
    # (blocked fork), output flood, wall-clock timeout; and a run from inside a running loop.
    report = run_clean(
        """
        import asyncio
        from verifiers.envs.sandbox import arun_python, run_python

        assert run_python("print(1)").stdout == "1\\n"
        for _ in range(6):  # racy one at a time: the pipe's EOF may or may not beat the return
            assert run_python("import ctypes\\nctypes.CDLL('libc.so.6').fork()").error
            assert run_python("print('x' * 10**7)", max_output_bytes=1024).truncated
        assert run_python("import time\\ntime.sleep(30)", timeout_s=0.5).timed_out

        async def inside_a_loop():
            return run_python("print(2)"), await arun_python("print(3)")

        a, b = asyncio.run(inside_a_loop())
        assert (a.stdout, b.stdout) == ("2\\n", "3\\n")
        """
    )
    assert report["threads"] == [], report["threads"]


def test_evaluate_against_a_server_ends_clean():
    # A whole evaluation (sync wrapper, shared loop thread, the environment's worker pool, the
    # HTTP client) against the fake server, run in the child; after it only idle daemons remain.
    report = run_clean(
        """
        import datasets
        import verifiers as vf
        from tests.doubles.openai_server import fake_server

        def tool_like(completion, **_):  # a sync reward: runs in the environment's thread pool
            return float(len(completion[-1]["content"]))

        rows = {"question": [f"q{i}" for i in range(4)], "answer": [""] * 4}
        env = vf.SingleTurnEnv(dataset=datasets.Dataset.from_dict(rows), rubric=vf.Rubric(funcs=[tool_like]))
        with fake_server(reply=lambda req: "fine") as server:
            client = server.client()
            out = env.evaluate(client, "fake-model", num_examples=4, rollouts_per_example=2)
            assert len(out.reward) == 8 and all(r == 4.0 for r in out.reward), out.reward
        """
    )
    # The shared sync loop and the pool's idle workers are daemons (they never block the exit);
    # nothing else may still run.
    assert all(t.endswith("(daemon)") for t in report["threads"]), report["threads"]


def test_drain_waits_for_idle_gloo_workers():
    # A one-process gloo group whose workers ran collectives: after destroy, drain says idle.
    pytest.importorskip("torch")
    run_clean(
        f"""
        import os, torch, torch.distributed as dist
        from verifiers.training.processes import _gloo_worker_states, drain_gloo_workers
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str({_free_port()}))
        dist.init_process_group("gloo", rank=0, world_size=1)
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(torch.nn.Linear(4, 4))  # holds the group: destroy cannot end its threads
        for _ in range(3):
            out = [torch.zeros(1)]
            dist.all_gather(out, torch.ones(1))
        del out
        workers = _gloo_worker_states()
        assert workers, "no gloo worker thread found (thread name changed?)"
        dist.destroy_process_group()
        assert drain_gloo_workers(timeout=5.0)
        assert all(state == "S" for state, _ in _gloo_worker_states().values())
        """
    )


def _free_port() -> int:
    from tests.doubles.vllm_server import free_port  # below the ephemeral range (its docstring)

    return free_port()

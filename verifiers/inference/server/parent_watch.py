"""vLLM's engine processes end when the vf-vllm that started them is killed.

vLLM runs its engine core in a child process of the API server (and, with the multiprocessing
executor, its workers in children of that). A worker notices a dead engine core (vLLM gives it a
pipe that closes), but the engine core does not notice a dead API server: after a
``kill -9 <vf-vllm pid>`` (or the OOM killer) it went on running, holding the model, its KV cache
and, on a GPU, the GPU's memory, until someone found and killed it by hand. The next vf-vllm on
that GPU then failed for want of memory.

:func:`register` is a vLLM general plugin (entry point ``vllm.general_plugins`` in setup.py), which
vLLM loads in each of its processes. In a process that vf-vllm's server started (the environment
variable :data:`ENV`, which vf-vllm sets and its children inherit), it starts one daemon thread that
checks once a second whether the process's parent is still the one that started it. Once it is not
(the parent died and the process was handed to init or a subreaper), the thread sends the process
SIGTERM, which vLLM's engine core and workers handle by shutting down as on a normal stop, and
ends it with ``os._exit`` if that has not happened :data:`GRACE_S` later.

Elsewhere (``vllm serve``, a Python program using vLLM in this environment) it does nothing.

vf-vllm's own process is its user's, except when a program of ours started it (vf-rl, the
benchmarks, scripts/gpu_check.py): that program puts its pid in :data:`LAUNCHER_ENV`
(:func:`launcher_env`), and :func:`watch_launcher`, called first thing in vf-vllm's ``main``, then
ends the server the same way when that program dies. Before, a benchmark killed with SIGKILL left its
server running, holding its memory (issue 43). The pid must be vf-vllm's parent: a variable that
leaked through a shell or another program's environment names someone else, and is ignored.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil

ENV = "VF_VLLM_END_WITH_PARENT"  # "1": vf-vllm set it; "0" (set by the user) turns the watch off
LAUNCHER_ENV = "VF_VLLM_LAUNCHER_PID"  # set by a program of ours that starts vf-vllm: its own pid
POLL_S = 1.0
GRACE_S = 30.0  # for vLLM's own shutdown after the SIGTERM, before os._exit

_started = False  # vLLM may load its plugins more than once in a process


def register() -> None:
    """vLLM's plugin hook: watch the parent, in a process vf-vllm's server started."""
    global _started
    from verifiers.inference.server import log_filter

    log_filter.register()  # vf's other per-process setting: one reload warning, not one per layer
    if _started or os.environ.get(ENV) != "1":
        return
    import multiprocessing

    parent = multiprocessing.parent_process()
    if parent is None:  # not a multiprocessing child: vf-vllm's own process, which its user owns
        return
    _started = True
    threading.Thread(target=watch, args=(parent.pid,), name="vf-end-with-parent", daemon=True).start()


def launcher_env() -> dict[str, str]:
    """The environment entries a program puts in vf-vllm's environment so that the server ends
    with it, and counts the program's processes as its own, not as a neighbour's load
    (``utils/cpu_load.py``: vf-vllm leaves out cores that other work keeps busy)."""
    from verifiers.utils.cpu_load import ours_env

    return {LAUNCHER_ENV: str(os.getpid()), **ours_env()}


def watch_launcher() -> bool:
    """In vf-vllm's own process: end with the program that started it, when that program named
    itself in :data:`LAUNCHER_ENV` and is this process's parent. True when the watch started."""
    # Popped: vLLM's processes below are watched by the plugin hook, each against its own parent.
    named = os.environ.pop(LAUNCHER_ENV, "")
    if not named.isdigit() or int(named) != os.getppid() or os.environ.get(ENV) == "0":
        return False
    threading.Thread(target=watch, args=(int(named),), name="vf-end-with-launcher", daemon=True).start()
    return True


def watch(parent_pid: int, poll_s: float = POLL_S, grace_s: float = GRACE_S) -> None:
    """Wait until this process's parent is no longer ``parent_pid``, then send this process SIGTERM;
    ``os._exit(1)`` if it is still alive ``grace_s`` later."""
    # getppid, not the parent's pid: a pid can be reused, and a dead parent's child is re-parented
    # at once (to init, or to the nearest subreaper), so getppid changes exactly when it dies.
    while os.getppid() == parent_pid:
        time.sleep(poll_s)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(grace_s)
    os._exit(1)


def still_running(processes: Iterable[psutil.Process]) -> list[int]:
    """The pids of ``processes`` that are still running: how the tests and
    scripts/gpu_check.py see whether the watch ended a killed server's engine processes.

    A zombie counts as ended: a process re-parented to an init that does not reap (a container's)
    stays a zombie, holding neither memory nor the GPU."""
    import psutil  # a dependency of vLLM

    running = []
    for p in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            if p.status() != psutil.STATUS_ZOMBIE:
                running.append(p.pid)
    return running

"""Training across several processes (accelerate): one object to all, step metrics from all,
waiting together, and the collective timeout.

``broadcast``, ``combine_metrics``, ``max_over_processes`` and ``wait_together`` are
collective: every process must call them, in the same order.

Why ranks never hang: only the main process talks to the server, so whenever it waits
(for the server to be ready or to come back, for a generation batch) the other processes
wait for it in a collective. ``wait_together`` keeps every such collective short: the
main process does the wait in a helper thread and broadcasts a heartbeat every
``HEARTBEAT_S`` seconds, then the outcome: the result, or its failure as one line that every
process raises (``RankFailedError``). The collective timeout (``ddp_timeout``) then only has
to outlast what the main process does alone between two collectives: one weight push
(``sync_weights_timeout``), one generation batch (``async_generation_timeout``, e.g. while a
checkpoint saves the generator's state) and checkpoint writes (TrainingArguments' 30
minutes stays the floor for those); ``config/collective.py`` derives it, and a rank that hangs
without exiting is ended by it. A rank that crashes is ended by the launcher (torchrun stops
the others at once).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import torch

from verifiers.errors import RankFailedError, StopRequested

T = TypeVar("T")

HEARTBEAT_S = 5.0  # the main process tells the others it is still waiting this often


def broadcast(accelerator: Any, obj: Any) -> Any:
    """The main process's ``obj`` (any picklable object) on every process."""
    if accelerator.num_processes == 1:
        return obj
    from accelerate.utils import broadcast_object_list

    return broadcast_object_list([obj], from_process=0)[0]


def combine_metrics(accelerator: Any, values: dict[str, float], device: Any) -> dict[str, float]:
    """Every process's step metrics combined (names from the main process; NaN where one lacks it):
    the mean, except names ending in ``/min`` and ``/max``, which take the minimum and maximum."""
    names = broadcast(accelerator, sorted(values))
    if not names:
        return {}
    t = torch.tensor([values.get(n, float("nan")) for n in names], device=device, dtype=torch.float64)
    every = accelerator.gather(t[None]).view(-1, len(names)).cpu()
    valid = ~torch.isnan(every)
    mean = torch.nansum(every, 0) / valid.sum(0).clamp(min=1)
    lo = torch.where(valid, every, torch.inf).min(0).values
    hi = torch.where(valid, every, -torch.inf).max(0).values
    pick = {"min": lo, "max": hi}
    return {n: float(pick.get(n.rsplit("/", 1)[-1], mean)[i]) for i, n in enumerate(names)}


def max_over_processes(accelerator: Any, value: int | None, device: Any) -> int:
    """The largest ``value`` (None: 0) over all processes, the same on each (collective: every
    process calls it). For a stop signal: one that reached any process stops them all."""
    if accelerator.num_processes == 1:
        return int(value or 0)
    every = accelerator.gather(torch.tensor([float(value or 0)], device=device))
    return int(every.max().item())


def wait_together(accelerator: Any, work: Callable[[], T], what: str, *, share: bool = True) -> T | None:
    """``work()`` on the main process while the others wait for it in short collectives.

    Returns its result on every process (``share=False``: ``None`` on the others, for results
    that cannot be pickled). If it raises, the main process raises it and every other process
    raises ``RankFailedError`` with its line ("... while <what>"). One process: ``work()``.
    """
    if getattr(accelerator, "num_processes", 1) == 1:
        return work()
    if not accelerator.is_main_process:
        while True:
            outcome = broadcast(accelerator, None)
            if outcome[0] == "done":
                return outcome[1]
            if outcome[0] == "stop":  # a stop signal, not a failure: every process stops the same way
                raise StopRequested(outcome[1])
            if outcome[0] == "failed":
                raise RankFailedError(f"the main process failed while {what}: {outcome[1]}")
    box: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["value"] = work()
        except BaseException as err:  # handed to the main thread, raised there
            box["error"] = err
        finally:
            done.set()

    # A daemon thread: a wait that never ends must not keep the process from exiting.
    threading.Thread(target=run, name=f"vf-wait ({what})", daemon=True).start()
    try:
        while not done.wait(HEARTBEAT_S):
            broadcast(accelerator, ("waiting",))
    except BaseException as err:  # e.g. Ctrl-C in this thread: release the others with its line
        broadcast(accelerator, _failure(err))
        raise
    if "error" in box:
        broadcast(accelerator, _failure(box["error"]))
        raise box["error"]
    broadcast(accelerator, ("done", box["value"] if share else None))
    return box["value"]


def _failure(err: BaseException) -> tuple[str, str]:
    """What the other processes get: a stop (``StopRequested``) as such, anything else as its line."""
    if isinstance(err, StopRequested):
        return ("stop", str(err))
    text = " ".join(str(err).split())
    return ("failed", f"{type(err).__name__}: {text}" if text else type(err).__name__)


def apply_collective_timeout(seconds: float) -> None:
    """Set the running process group's timeout (if there is one): transformers passes
    ``ddp_timeout`` to it only in some set-ups (not with ``use_cpu`` / ``ACCELERATE_USE_CPU``),
    and a value assigned after the group started would otherwise be ignored."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return
    set_timeout = getattr(dist.distributed_c10d, "_set_pg_timeout", None)
    if set_timeout is not None:
        set_timeout(timedelta(seconds=seconds))


def start_training_processes(args: Any) -> None:
    """Where training starts (``GRPOTrainer.__init__``), not in the config: give the running process
    group the run's ``ddp_timeout`` and have it destroyed cleanly at exit (``destroy_group_at_exit``).
    Nothing happens without a process group; calling it again is harmless."""
    apply_collective_timeout(args.ddp_timeout)
    destroy_group_at_exit()


_DESTROY_AT_EXIT: list[bool] = []  # registered once per process
GLOO_WORKER = "pt_gloo_runloop"  # the thread name ProcessGroupGloo gives its worker threads
DRAIN_SETTLE_S = 0.02  # a worker waiting for the GIL retries every 5 ms (sys.getswitchinterval)
DRAIN_TIMEOUT_S = 2.0


def destroy_group_at_exit() -> None:
    """At interpreter exit, while Python is still whole: destroy the default (gloo) process group,
    then wait until gloo's worker threads are idle (``drain_gloo_workers``).

    Why: a gloo worker thread keeps its last collective (and that collective's tensors) until just
    after the caller's ``wait()`` returns. When the caller has already dropped those tensors (e.g.
    ``accelerator.gather``'s temporaries), their Python objects belong to C++, and the worker's
    release takes the GIL to free them. If the interpreter starts finalizing first, CPython ends
    that thread with ``pthread_exit`` inside the tensor's ``noexcept`` destructor: ``terminate
    called without an active exception`` (SIGABRT) after a run that succeeded (core dump:
    ``runLoop`` -> ``~AsyncAllgatherWork`` -> ``TensorImpl::decref_pyobject`` ->
    ``gil_scoped_acquire`` -> ``take_gil`` -> ``PyThread_exit_thread``; torchrun then reports
    the rank failed). ``destroy_process_group`` alone does not stop those threads: DDP (or
    DeepSpeed) still holds the group, so its destructor, which joins them, runs only in teardown.
    ``atexit`` runs before that teardown; a group the user already destroyed is left alone (its
    workers are still drained). Only a gloo group is destroyed: NCCL's shutdown at exit has not
    been run on these machines.
    """
    dist = torch.distributed
    if _DESTROY_AT_EXIT or not (dist.is_available() and dist.is_initialized()):
        return
    _DESTROY_AT_EXIT.append(True)

    def destroy() -> None:
        if dist.is_initialized() and dist.get_backend() == "gloo":
            dist.destroy_process_group()
        drain_gloo_workers()  # also after a destroy of the user's own, or for a gloo side group

    import atexit

    atexit.register(destroy)


def drain_gloo_workers(timeout: float = DRAIN_TIMEOUT_S, settle: float = DRAIN_SETTLE_S) -> bool:
    """Wait (with the GIL released) until every gloo worker thread of this process is idle; whether
    they are. Idle: asleep, and not woken once during ``settle`` seconds (a worker releasing its last
    collective runs, or wakes every 5 ms while it waits for the GIL). No worker threads (no
    collective ran, or not Linux: nothing to read): returns True at once. Call it only after the
    last collective (e.g. after ``destroy_process_group``): a new one would wake them again."""
    import time

    before = _gloo_worker_states()
    if not before:
        return True
    deadline = time.monotonic() + timeout
    while True:
        time.sleep(settle)  # sleeping releases the GIL and the CPU to the workers
        now = _gloo_worker_states()
        if now == before and all(state == "S" for state, _ in now.values()):
            return True
        if time.monotonic() > deadline:
            return False
        before = now


def _gloo_worker_states() -> dict[str, tuple[str, int]]:
    """``{thread id: (state letter, context switches)}`` of this process's gloo worker threads, from
    ``/proc/self/task`` (empty where there is none)."""
    import os

    states = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return {}
    for tid in tids:
        base = f"/proc/self/task/{tid}"
        try:
            with open(f"{base}/comm") as f:
                if f.read().strip() != GLOO_WORKER:
                    continue
            with open(f"{base}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]  # after "(comm)", which may hold spaces
            with open(f"{base}/status") as f:
                switches = sum(int(line.split()[1]) for line in f if "ctxt_switches" in line)
        except (OSError, IndexError, ValueError):  # the thread ended while we read it
            continue
        states[tid] = (state, switches)
    return states

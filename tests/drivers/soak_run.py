"""A long ``RLTrainer`` run against a running vf-vllm server that records its own footprint.

    python -m tests.drivers.soak_run --port P --server-pid PID --model DIR --out OUT --steps N

Used by ``test_soak.py`` and ``benchmarks/soak.py``. It trains the tiny model on
``Count to <i>.`` prompts as ``vf-rl`` would (``RLTrainer``: LoRA, one batch ahead,
``runs/metrics.jsonl``), with a checkpoint every ``--save-steps`` steps and
``save_total_limit=2``. At step 1 and every ``--every`` steps, at the end of the step,
it appends one JSON line to ``OUT/soak_samples.jsonl``::

    {"step": 50, "elapsed_s": 31.2,
     "trainer": {"rss_mb": ..., "rss_raw_mb": ..., "fds": ..., "threads": ..., "procs": 1,
                 "py_objects": ..., "pool_threads": 4,
                 "thread_names": {"MainThread": 1, "asyncio_*": 4, ...}},
     "server": {"rss_mb": ..., "fds": ..., "threads": ..., "procs": 3}}

Each side is a process *tree*: the trainer process with any children, and the
vf-vllm process (``--server-pid``) with its engine core and whatever else it
spawned. RSS, open file descriptors and threads are summed over the tree (shared
pages count once per process, the same way at every sample, so the sums compare).
Read with psutil when it is installed, else from ``/proc``. The trainer's ``rss_mb`` is
the memory in use, measured after a full garbage collection and ``malloc_trim``
(``in_use_rss_mb``); its plain RSS is ``rss_raw_mb``.

The helpers at the bottom (``read_samples``, ``figure``, ``drift``, ``format_table``) are
what the test and the benchmark compare and print; ``pool_cap`` bounds the pool workers
that ``figure`` leaves out.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

SAMPLES_FILE = "soak_samples.jsonl"
FIGURES = ("rss_mb", "fds", "threads")
SIDES = ("trainer", "server")
# asyncio's default executor (``asyncio.to_thread``, and the DNS lookup of each new
# connection) names its workers ``asyncio_<n>`` and starts them on demand, up to
# ``min(32, cpus + 4)`` per event loop. It fills when work first overlaps, which may be late
# in a run (four connections reopened at once after a pause), so these threads are bounded,
# not flat: the trainer's thread figure leaves them out and ``pool_cap`` bounds them.
POOL_WORKER = re.compile(r"^asyncio_\d+$")
LOOP_THREADS = ("MainThread", "vf-generator", "verifiers-sync-loop")  # where our event loops run


# ---- the footprint of a process tree ---------------------------------------------------------------
def tree_stats(pid: int) -> dict[str, float]:
    """RSS (MiB), open fds and threads summed over ``pid`` and its descendants; zeros if it is gone."""
    try:
        import psutil
    except ImportError:
        return _proc_tree_stats(pid)
    total = {"rss_mb": 0.0, "fds": 0, "threads": 0, "procs": 0}
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return total
    for p in procs:
        try:  # a child may exit between the listing and the reading
            with p.oneshot():
                rss, fds, threads = p.memory_info().rss, p.num_fds(), p.num_threads()
        except psutil.NoSuchProcess:
            continue
        total["rss_mb"] += rss / 2**20
        total["fds"] += fds
        total["threads"] += threads
        total["procs"] += 1
    return total


def _proc_tree_stats(pid: int) -> dict[str, float]:
    """``tree_stats`` from ``/proc`` (Linux), for machines without psutil."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:  # "pid (comm) state ppid ...": comm may hold spaces, so split after its ")"
                stat = Path(f"/proc/{entry}/stat").read_text()
                parent[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    tree, frontier = [], [pid] if pid in parent else []
    while frontier:
        p = frontier.pop()
        tree.append(p)
        frontier += [c for c, pp in parent.items() if pp == p]
    total = {"rss_mb": 0.0, "fds": 0, "threads": 0, "procs": 0}
    for p in tree:
        try:
            status = dict(
                line.split(":", 1)
                for line in Path(f"/proc/{p}/status").read_text().splitlines()
                if ":" in line
            )
            rss_kb = int(status.get("VmRSS", "0 kB").split()[0])  # a zombie has no VmRSS
            threads = int(status["Threads"])
            fds = len(os.listdir(f"/proc/{p}/fd"))
        except (OSError, KeyError, ValueError):
            continue
        total["rss_mb"] += rss_kb / 1024
        total["fds"] += fds
        total["threads"] += threads
        total["procs"] += 1
    return total


def python_threads() -> dict[str, Any]:
    """This process's Python threads: how many are default-executor workers, and a count per
    name (those workers as ``asyncio_*``), so a grown figure says which threads grew."""
    names = [t.name for t in threading.enumerate()]
    return {
        "pool_threads": sum(1 for n in names if POOL_WORKER.match(n)),
        "thread_names": dict(Counter("asyncio_*" if POOL_WORKER.match(n) else n for n in names)),
    }


def pool_cap(sample: dict[str, Any]) -> int:
    """The most default-executor workers the trainer may hold: ``min(32, cpus + 4)`` for
    each thread that runs an event loop (asyncio's own limit)."""
    names = sample["trainer"]["thread_names"]
    loops = sum(names.get(n, 0) for n in LOOP_THREADS)
    return loops * min(32, (os.cpu_count() or 1) + 4)


def in_use_rss_mb() -> float:
    """This process's RSS once garbage cycles are collected and glibc's ``malloc_trim(0)`` has
    handed free pages back: the memory still in use. Without both, RSS follows the collector's
    cadence (the 600-step run: a full collection every ~200 steps, 40 MB of garbage before it)
    and what the allocator merely keeps. Plain RSS where libc has no ``malloc_trim``."""
    import ctypes

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    return tree_stats(os.getpid())["rss_mb"]


class FootprintSampler(TrainerCallback):
    """At the end of step 1 and of every ``every``-th step: one line of both trees' figures.

    Sampled at the same point of every step (after the optimizer step, before that step's
    log and checkpoint), so the figures compare across steps.
    """

    def __init__(self, path: Path, server_pid: int, every: int):
        self.path, self.server_pid, self.every = path, server_pid, every
        self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        step = state.global_step
        if step != 1 and step % self.every:
            return
        line = {
            "step": step,
            "elapsed_s": round(time.perf_counter() - self.started, 2),
            "trainer": self.trainer_figures(),
            "server": tree_stats(self.server_pid),
        }
        with open(self.path, "a") as fh:
            fh.write(json.dumps(line) + "\n")

    @staticmethod
    def trainer_figures() -> dict[str, Any]:
        """The trainer's figures; ``rss_mb`` is the memory in use (``in_use_rss_mb``), and the
        plain RSS before it is ``rss_raw_mb``. ``py_objects`` counts what the collector tracks
        after collecting: a Python-level leak grows it, allocator noise does not."""
        raw = {**tree_stats(os.getpid()), **python_threads()}
        in_use = in_use_rss_mb()
        return {**raw, "rss_raw_mb": raw["rss_mb"], "rss_mb": in_use, "py_objects": len(gc.get_objects())}


# ---- the run ---------------------------------------------------------------------------------------
def config(out: str, port: int, steps: int, save_steps: int):
    """As small a step as trains for real: 2 prompts × 2 rollouts of ≤ 8 tokens, LoRA, one batch ahead."""
    from verifiers.training.rl.config import RLConfig

    return RLConfig(
        run_name="soak",
        output_dir=out,
        max_steps=steps,
        rollouts_per_example=2,
        micro_batch_size=4,
        batch_size=4,
        max_tokens=8,
        max_seq_len=128,
        max_prompt_len=64,
        learning_rate=5e-5,
        num_batches_ahead=1,  # async: batch n+1 is generated while batch n trains
        cpu_phases="overlap",  # ... even though the server shares this CPU
        save_steps=save_steps,
        logging_steps=1,
        report_to="none",
        vllm_server_port=port,
        vllm_server_timeout=60,
        generation_timeout=120,
        grpo_args={
            "save_total_limit": 2,
            "seed": 0,
            "mask_truncated_completions": False,  # the random model never stops before max_tokens
        },
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--server-pid", type=int, required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--every", type=int, default=25, help="sample every N steps (and at step 1)")
    p.add_argument("--save-steps", type=int, default=25)
    a = p.parse_args(argv)

    import datasets

    import verifiers as vf
    from tests.drivers.resume_run import char_length_reward
    from verifiers.training.rl import RLTrainer

    rows = {"question": [f"Count to {i}." for i in range(8)], "answer": [""] * 8}
    env = vf.SingleTurnEnv(
        dataset=datasets.Dataset.from_dict(rows), rubric=vf.Rubric(funcs=[char_length_reward])
    )
    Path(a.out).mkdir(parents=True, exist_ok=True)
    sampler = FootprintSampler(Path(a.out) / SAMPLES_FILE, a.server_pid, a.every)
    trainer = RLTrainer(a.model, env, args=config(a.out, a.port, a.steps, a.save_steps), callbacks=[sampler])
    trainer.train()


# ---- reading the samples ----------------------------------------------------------------------------
def read_samples(out: str | os.PathLike) -> dict[int, dict[str, Any]]:
    """``{step: sample}`` from ``OUT/soak_samples.jsonl``."""
    lines = (Path(out) / SAMPLES_FILE).read_text().splitlines()
    return {s["step"]: s for s in map(json.loads, filter(str.strip, lines))}


def figure(sample: dict[str, Any], side: str, name: str) -> float:
    """One figure of one side; the trainer's threads without its pool workers (see ``POOL_WORKER``)."""
    value = sample[side][name]
    if side == "trainer" and name == "threads":
        value -= sample[side].get("pool_threads", 0)
    return value


def drift(samples: dict[int, dict[str, Any]], first: int, last: int) -> dict[str, float]:
    """``{"trainer.rss_mb": relative change, ...}`` from step ``first`` to step ``last``."""
    out = {}
    for side in SIDES:
        for name in FIGURES:
            a, b = figure(samples[first], side, name), figure(samples[last], side, name)
            out[f"{side}.{name}"] = (b - a) / a if a else float("inf")
    return out


def format_table(samples: dict[int, dict[str, Any]]) -> str:
    """One row per sampled step: elapsed time, then RSS/fds/threads (processes) of each tree."""
    head = (
        f"{'step':>5} {'s':>7} | {'trainer MiB':>11} {'raw':>6} {'fds':>5} {'thr':>4} {'pool':>4} {'py objs':>8} | "
        f"{'server MiB':>10} {'fds':>5} {'thr':>4} {'procs':>5}"
    )
    rows = [head, "-" * len(head)]
    for step in sorted(samples):
        s, t, v = samples[step], samples[step]["trainer"], samples[step]["server"]
        rows.append(
            f"{step:>5} {s['elapsed_s']:>7.1f} | {t['rss_mb']:>11.1f} {t.get('rss_raw_mb', 0):>6.0f} "
            f"{t['fds']:>5} {t['threads']:>4} "
            f"{t.get('pool_threads', 0):>4} {t.get('py_objects', 0):>8} | "
            f"{v['rss_mb']:>10.1f} {v['fds']:>5} {v['threads']:>4} {v['procs']:>5}"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    main()

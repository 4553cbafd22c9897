"""Chaos benchmark: random faults during a ``vf-rl`` run, nothing lost, proved against a fault-free run.

    python benchmarks/chaos.py                                  # 20 minutes of faults, then the reference run
    python benchmarks/chaos.py --minutes 4 --faults kill_server,kill_trainer,stop_server
    python benchmarks/chaos.py --dry-run                        # the fault schedule and the TOML; starts nothing
    python benchmarks/chaos.py --reference outputs/benchmarks/chaos/reference/runs/metrics.jsonl

Method. One TOML (written to ``--out``): SmolLM2-135M + LoRA on reverse-text on CPU, 2 prompts ×
4 rollouts of at most 32 tokens a step, a checkpoint every 2 steps (a restart redoes at most 2),
short hang bounds so that a stopped process is found quickly (printed, and kept in the JSON).
``vf-rl`` runs it as a user would; from its first logged step on, faults are injected at seeded
random times over ``--minutes`` (no two closer than ``--min-gap-s``), each kind drawn in turn from
a seeded shuffle of the kinds asked for, and only when its target exists:

- ``kill_server`` / ``kill_engine``: SIGKILL the vf-vllm API process / its ``VLLM::EngineCore`` child;
- ``kill_trainer``: SIGKILL the trainer process vf-rl started (``accelerate launch`` with 2 processes);
- ``kill_rank``: SIGKILL one training rank (``--processes 2``);
- ``stop_*`` (server, engine, trainer = rank 0, rank): SIGSTOP, held until vf-rl reports the hang or
  the target's detection bound plus a margin has passed, then SIGCONT if the process still lives;
- ``full_disk``: ``output_dir`` is a small tmpfs (mounted as root; its ``logs`` and ``runs`` are links
  to the real disk, so the run's own record survives); a ballast file fills it until the next
  checkpoint write fails and vf-rl restarts the trainer, then the ballast is removed;
- ``truncate_checkpoint``: halve a file of the newest complete checkpoint (a previous good one must
  exist), then SIGKILL the trainer: the restart must skip it (its manifest no longer matches) for
  the previous good one.

Processes are found by walking the process tree of the ``vf-rl`` process started here (psutil), the
ranks from the heartbeat files (``logs/heartbeats/rank<r>.live`` hold the pid). For each fault the
record holds the target, when it was detected (vf-rl's one-line notes in ``logs/vf-rl.log``, seen as
they appear), when the run recovered (the first step logged to ``runs/metrics.jsonl`` after the
fault was dealt with) and the steps logged again (``"redone": true``) between it and the next fault.

Step count. The faulted and the reference run train the same fixed number of steps: as many as a
fault-free run fits into ``--minutes`` at ``--step-s`` seconds a step (measured on this 2-core
machine; ``--steps`` overrides, ``--reference`` takes its step count), so the faulted run, slowed by
its outages, is still training when the fault window closes and then finishes the rest.

Comparison (``exact``). The reference is the same TOML without faults (run after the faulted run,
or ``--reference``). Every step 1..max_steps must be in the faulted run. Every line the faulted run
logged for a step (its first copy and any copy redone after a restart) must match the reference's
line of that step: the data fields (reward, its spread, completion lengths: functions of the
rollouts alone) bit for bit, since every rollout's request carries a seed derived from the run's
seed, the batch and its slot (``sampling_seeds = "rollout"``), and a restarted trainer resumes its
weights, optimizer and RNG from the checkpoint; the model fields (loss, grad_norm, entropy,
importance ratio, learning rate) within ``--rtol`` (the JSON gives the largest difference measured
per field, so the tolerance is a measurement, not an assumption). ``exact=1`` when all of that holds.
What makes two fresh runs compute alike on a CPU (each was needed; without it step 1 or 2 already
differed in a fault-free pair): the adapter's init follows the run's seed (GRPOTrainer seeds before
``get_peft_model``); the server computes one sequence at a time without a prefix cache (vLLM's
batched kernels round differently with the batch's make-up, and a near tie then samples another
token); both runs get one CPU dtype and every core (``REPRODUCIBLE_ENV``).

Outputs in ``--out``: ``chaos.toml``, ``faulted/`` and ``reference/`` (vf-rl's stdout and logs, the
metrics), ``chaos.json`` (faults, bounds, comparison, machine), ``chaos.png`` (steps over time, faults
as vertical marks, detection and recovery spans), a markdown table, and one closing line:
``faults=N survived=N lost_steps=K max_detect_s=S max_recover_s=R exact=1``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import cpu_model, free_port

ROOT = Path(__file__).resolve().parents[1]

KINDS = (
    "kill_server", "kill_engine", "kill_trainer", "kill_rank",
    "stop_server", "stop_engine", "stop_trainer", "stop_rank",
    "full_disk", "truncate_checkpoint",
)  # fmt: skip
RANK_KINDS = frozenset({"kill_rank", "stop_rank"})
SERVER_KINDS = frozenset({"kill_server", "kill_engine", "stop_server", "stop_engine"})

# Bounds the benchmark's TOML sets (vf-rl's defaults are 60 s, 120 s and about 31 min): a stopped
# server or trainer is found within a minute, so an hour holds many faults. The trainer's loop
# bound must outlast a server restart (up to vllm_server_timeout, 300 s) plus a step: the trainer
# does not beat its loop while it waits for a lost server.
SERVER_ANSWER_S = 20.0  # inference.hang_timeout_s
SERVER_PROGRESS_S = 40.0  # inference.progress_timeout_s
TRAINER_LOOP_S = 420.0  # trainer.hang_timeout_s
TRAINER_LIVE_S = 30.0  # trainer_watch.LIVE_BOUND_S (fixed in vf-rl)
PROBE_S = 5.0  # server_watch.PROBE_INTERVAL_S: a hang is found up to one probe (plus its timeout) late
MAX_RESTARTS = 1000  # per side: an hour of faults must never run out of restarts

# One step (2 prompts x 4 rollouts x 32 tokens: generation, training, weight sync) on 2 cores: 7-12 s
# when they are quiet, a median of 23 s (up to 80 s) while another benchmark ran beside it (2026-11-29).
STEP_S = 20.0
SAVE_STEPS = 2
TMPFS_BYTES = 256 << 20  # three checkpoints of a LoRA r8 adapter with its optimizer are ~40 MiB
TARGET_WAIT_S = 60.0  # a fault whose target is missing (mid-restart) waits this long, then is skipped
FAULT_LEAD_S = 10.0  # the first fault comes at least this long after the first step is logged

# Both runs, and every restart in them, compute alike: the same CPU dtype (measured once here,
# not by each vf-rl: a borderline CPU could choose differently) and every core whatever else runs
# (utils/cpu_load.py would give a restarted trainer fewer threads beside a busy moment, and
# another summation order). Filled in by main().
REPRODUCIBLE_ENV: dict[str, str] = {"VF_CPU_NEIGHBOURS": "ignore"}

DATA_FIELDS = (
    "reward", "reward_std", "reward/min", "reward/max", "zero_std_groups_frac",
    "completion_length/mean", "completion_length/min", "completion_length/max", "truncated_frac",
)  # fmt: skip
MODEL_FIELDS = ("loss", "grad_norm", "entropy", "importance_ratio/mean", "learning_rate")

# vf-rl's notes that report a fault (launcher.py, server_watch.py, trainer_watch.py).
SERVER_NOTE = re.compile(
    r"^Inference server .*(exited with status|did not answer)|^vLLM engine core .*made no progress"
)
TRAINER_NOTE = re.compile(r"^Trainer (exited with|rank \d+ .*made no progress)")
READY_AGAIN = "Inference server ready again"
CORRUPT_LINE = re.compile(r"(checkpoint-\d+) is corrupt .*resuming from (checkpoint-\d+)")
RESTART_FROM = re.compile(
    r"restarting it \(\d+/\d+\) from (checkpoint-\d+|the start|the checkpoint it started from)"
)


# -- the schedule -----------------------------------------------------------------------------


@dataclass
class Fault:
    """One fault: planned (kind, ``at_s`` after the first logged step), then what happened."""

    kind: str
    at_s: float
    injected_s: float | None = None  # seconds from vf-rl's start
    target: str = ""
    pid: int | None = None
    released_s: float | None = None  # SIGCONT (stops), ballast removed (full_disk)
    detected_s: float | None = None
    detected_by: str = ""
    recovered_s: float | None = None
    redone: list[int] = field(default_factory=list)
    skipped: str = ""  # why it was not injected

    def detect_after(self) -> float | None:
        if self.injected_s is None or self.detected_s is None:
            return None
        return self.detected_s - self.injected_s

    def recover_after(self) -> float | None:
        if self.injected_s is None or self.recovered_s is None:
            return None
        return self.recovered_s - self.injected_s


def usable_kinds(
    asked: Sequence[str], processes: int, disk: str | None, corrupt: str | None
) -> tuple[list[str], dict[str, str]]:
    """The kinds whose targets can exist in this run, and why each other one cannot.

    ``disk``/``corrupt``: None when that fault can be done, else the reason it cannot."""
    kept, dropped = [], {}
    for kind in asked:
        if kind in RANK_KINDS and processes < 2:
            dropped[kind] = "needs --processes 2 (one trainer process has no other rank)"
        elif kind == "full_disk" and disk:
            dropped[kind] = disk
        elif kind == "truncate_checkpoint" and corrupt:
            dropped[kind] = corrupt
        else:
            kept.append(kind)
    return kept, dropped


def schedule(
    seed: int, kinds: Sequence[str], span_s: float, min_gap_s: float, lead_s: float = FAULT_LEAD_S
) -> list[Fault]:
    """Seeded fault times in [lead_s, span_s] (seconds after the first logged step), consecutive ones
    ``min_gap_s`` to 1.5 × ``min_gap_s`` apart; kinds drawn in turn from a seeded shuffle of ``kinds``
    (every kind once before any twice). The same arguments give the same schedule."""
    if not kinds or span_s < lead_s:
        return []
    rng = random.Random(seed)
    faults: list[Fault] = []
    bag: list[str] = []
    t = lead_s + rng.uniform(0, min_gap_s / 2)
    while t <= span_s:
        if not bag:
            bag = list(kinds)
            rng.shuffle(bag)
        faults.append(Fault(bag.pop(), round(t, 1)))
        t += min_gap_s + rng.uniform(0, min_gap_s / 2)
    return faults


def stop_bound(kind: str, step_s: float) -> float:
    """How long a SIGSTOP is held at most: the target's detection bound, the probe's lateness, and
    for the engine the wait until requests are pending (it is only found while the trainer waits
    for a batch), plus a margin."""
    if kind == "stop_server":
        return SERVER_ANSWER_S + 2 * PROBE_S + 20
    if kind == "stop_engine":
        return SERVER_PROGRESS_S + 2 * PROBE_S + 3 * step_s + 20
    return TRAINER_LIVE_S + 20  # stop_trainer, stop_rank: the live beat


# vf-rl's own waits after it notices and before its line (launcher.STOP_GRACE_S: the rest of a
# process group ending; then up to 5 s for the child's log to be copied out) and the liveness
# thread's period (heartbeat.LIVE_BEAT_S): part of the stated bounds below.
GROUP_END_S = 10.0 + 5.0
LIVE_BEAT_S = 2.0


def detect_bound(kind: str, step_s: float) -> float | None:
    """The longest a fault may go unnoticed, from its injection to vf-rl's line, as docs/vf-rl.md
    states it; None where detection is not a bound of vf-rl's (a full disk is found when the
    trainer next writes a checkpoint, up to ``save_steps`` steps later; a server stopped while
    (re)starting is only covered by its start-up timeout)."""
    exit_seen = 0.5  # the launcher polls both children every 0.5 s
    if kind in ("kill_server", "kill_engine"):
        # The API process exits (for the engine: once vLLM's monitor sees its engine gone), then
        # the rest of the group is ended before the line.
        return exit_seen + GROUP_END_S + (GROUP_END_S if kind == "kill_engine" else 0)
    if kind in ("kill_trainer", "kill_rank", "truncate_checkpoint"):
        return exit_seen + GROUP_END_S
    if kind == "stop_server":
        return SERVER_ANSWER_S + 2 * PROBE_S + GROUP_END_S
    if kind == "stop_engine":
        # Found only while requests are pending: the trainer may be in a training phase (up to a step).
        return SERVER_PROGRESS_S + 2 * PROBE_S + GROUP_END_S + step_s
    if kind in ("stop_trainer", "stop_rank"):
        return TRAINER_LIVE_S + LIVE_BEAT_S + exit_seen + GROUP_END_S
    return None


def steps_for(minutes: float, step_s: float) -> int:
    """Steps a fault-free run trains in ``minutes`` at ``step_s`` a step (at least 2 checkpoints' worth)."""
    return max(3 * SAVE_STEPS, math.ceil(minutes * 60 / step_s))


# -- the TOML ---------------------------------------------------------------------------------


def config_toml(seed: int, steps: int, port: int, output_dir: str) -> str:
    """The run both sides train (the reference with another port and output_dir)."""
    return f"""\
# benchmarks/chaos.py: SmolLM2-135M + LoRA, reverse-text on CPU, small steps, short hang bounds.
model = "smollm2"

[env]
id = "reverse-text"

[env.args]
num_train_examples = 200
num_eval_examples = 4

[inference]
gpus = 0
port = {port}
max_restarts = {MAX_RESTARTS}
hang_timeout_s = {SERVER_ANSWER_S:g}       # no answer to /vf/progress: stopped API process
progress_timeout_s = {SERVER_PROGRESS_S:g}   # requests pending, no engine step: stopped engine

[inference.args]
enforce_eager = true
no_enable_chunked_prefill = true
# One sequence at a time and no prefix cache: a rollout's logits then never depend on which other
# requests shared its batch or computed its prompt's cached blocks, so a retried or restarted batch
# samples the same tokens from the same seed (vLLM's batched kernels differ in the last bits).
max_num_seqs = 1
no_enable_prefix_caching = true
kv_cache_memory_bytes = 268435456
max_model_len = 512

[trainer]
gpus = 0
max_restarts = {MAX_RESTARTS}
hang_timeout_s = {TRAINER_LOOP_S:g}      # above a server restart (vllm_server_timeout) plus a step

[trainer.args]
run_name = "chaos"
output_dir = "{output_dir}"
seed = {seed}
rollouts_per_example = 4
micro_batch_size = 4
batch_size = 8               # 2 prompts x 4 rollouts
max_steps = {steps}
max_tokens = 32
max_seq_len = 320
max_prompt_len = 256
learning_rate = 5e-4
warmup_steps = 0
beta = 0.0
temperature = 1.0
lora_rank = 8
lora_alpha = 16
save_steps = {SAVE_STEPS}               # a restart redoes at most this many steps
save_total_limit = 3         # truncate_checkpoint needs a good one before the newest
log_samples_every = 0
"""


# -- reading a run ----------------------------------------------------------------------------


def train_lines(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The step lines of a metrics file (not eval or the closing summary), in file order."""
    out = []
    for r in records:
        if not isinstance(r, dict) or not isinstance(r.get("step"), int):
            continue
        if "train_runtime" in r or any(k.startswith("eval_") for k in r):
            continue
        if "loss" in r or "reward" in r:
            out.append(r)
    return out


def read_metrics(path: Path) -> list[dict[str, Any]]:
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError):
            records.append(json.loads(line))  # a line cut short by a kill is skipped, as vf-rl's reader does
    return records


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def _rel(a: Any, b: Any) -> float:
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return math.inf
    if a == b:
        return 0.0
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


def compare(
    faulted: Sequence[dict[str, Any]], reference: Sequence[dict[str, Any]], max_steps: int, rtol: float
) -> dict[str, Any]:
    """The exactness rule (module docstring) on two runs' step lines.

    Returns missing steps, per field the largest relative difference and the lines that broke the
    rule, whether the last line of each step is bit-exact, and ``exact``."""
    ref = {r["step"]: r for r in reference}  # the reference trained each step once
    fault_steps = {r["step"] for r in faulted}
    missing = [s for s in range(1, max_steps + 1) if s not in fault_steps]
    missing_ref = [s for s in range(1, max_steps + 1) if s not in ref]
    worst: dict[str, float] = {}
    broken: list[dict[str, Any]] = []
    last: dict[int, dict[str, Any]] = {}
    for r in faulted:
        last[r["step"]] = r  # file order: the last copy wins
        base = ref.get(r["step"])
        if base is None:
            continue
        for name in DATA_FIELDS + MODEL_FIELDS:
            if name not in r and name not in base:
                continue
            diff = 0.0 if _same(r.get(name), base.get(name)) else _rel(r.get(name), base.get(name))
            worst[name] = max(worst.get(name, 0.0), diff)
            bad = diff > 0 if name in DATA_FIELDS else diff > rtol
            if bad:
                broken.append({"step": r["step"], "field": name, "redone": bool(r.get("redone")),
                               "attempt": r.get("attempt", 1), "faulted": r.get(name), "reference": base.get(name)})  # fmt: skip
    last_exact = {
        s: all(_same(r.get(n), ref[s].get(n)) for n in DATA_FIELDS + MODEL_FIELDS if n in r or n in ref[s])
        for s, r in last.items()
        if s in ref
    }
    exact_fields = sorted(n for n, d in worst.items() if d == 0.0)
    off_data = sorted({b["step"] for b in broken if b["field"] in DATA_FIELDS})
    off_model = sorted({b["step"] for b in broken if b["field"] in MODEL_FIELDS})
    return {
        "missing": missing,
        "missing_in_reference": missing_ref,
        "max_rel_diff": worst,
        "bit_exact_fields": exact_fields,
        "close_fields": sorted(n for n, d in worst.items() if 0.0 < d <= rtol),
        "broken": broken,
        "steps_off_in_data": off_data,  # some copy trained on other rollouts than the reference's
        "steps_off_in_model": off_model,  # some copy's loss/grad_norm/... beyond rtol
        "last_line_bit_exact_steps": sum(last_exact.values()),
        "steps_compared": len(last_exact),
        "rtol": rtol,
        "exact": not missing and not missing_ref and not broken and bool(faulted),
    }


def closing_line(faults: Sequence[Fault], lost_steps: int, exact: bool) -> str:
    """``faults=N survived=N lost_steps=K max_detect_s=S max_recover_s=R exact=1``; N counts injected
    faults, survived those after which the run went on (a step logged after it was dealt with)."""
    done = [f for f in faults if f.injected_s is not None]
    survived = sum(1 for f in done if f.recovered_s is not None)
    detect = [d for f in done if (d := f.detect_after()) is not None]
    recover = [r for f in done if (r := f.recover_after()) is not None]
    return (
        f"faults={len(done)} survived={survived} lost_steps={lost_steps} "
        f"max_detect_s={max(detect, default=0):.0f} max_recover_s={max(recover, default=0):.0f} exact={int(exact)}"
    )


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def within_bounds(faults: Sequence[Fault], step_s: float) -> tuple[int, int]:
    """(detections within their stated bound, detections that have a bound)."""
    judged = [
        (d, b)
        for f in faults
        if (d := f.detect_after()) is not None and (b := detect_bound(f.kind, step_s)) is not None
    ]
    return sum(1 for d, b in judged if d <= b), len(judged)


def undetected(faults: Sequence[Fault], step_s: float) -> list[str]:
    """Injected faults with a stated bound that vf-rl never reported (a stop released unnoticed):
    ``within_bounds`` judges detections only, so these are listed beside it, never left out."""
    return [
        f"{i}:{f.kind}"
        for i, f in enumerate(faults, 1)
        if f.injected_s is not None and f.detected_s is None and detect_bound(f.kind, step_s) is not None
    ]


def format_table(faults: Sequence[Fault], step_s: float = STEP_S) -> str:
    """The markdown table: one row per fault in the schedule (skipped ones say why)."""
    rows = [
        "| # | fault | when (s) | target | detected after (s) | bound (s) | recovered after (s) | steps redone |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for i, f in enumerate(faults, 1):
        if f.injected_s is None:
            rows.append(f"| {i} | {f.kind} | - | not injected: {f.skipped} | - | - | - | - |")
            continue
        target = f"{f.target} (pid {f.pid})" if f.pid else f.target
        redone = ",".join(map(str, f.redone)) if f.redone else "0"
        detected = _cell(f.detect_after()) + (f" ({f.detected_by})" if f.detected_by else "")
        bound = _cell(detect_bound(f.kind, step_s))
        rows.append(
            f"| {i} | {f.kind} | {f.injected_s:.0f} | {target} | {detected} | {bound} | "
            f"{_cell(f.recover_after())} | {redone} |"
        )
    return "\n".join(rows)


# -- watching a running vf-rl -----------------------------------------------------------------


class Tail:
    """New complete lines of a file, each stamped with when it was first seen (seconds from ``t0``)."""

    def __init__(self, path: Path, t0: float):
        self.path, self.t0, self.offset, self.lines = path, t0, 0, []
        self.partial = b""

    def poll(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return
        self.offset += len(data)
        data, now = self.partial + data, time.monotonic() - self.t0
        *complete, self.partial = data.split(b"\n")
        self.lines += [(now, line.decode("utf-8", errors="replace")) for line in complete]


class Watch:
    """Polls vf-rl's notes, the trainer's log and the metrics file twice a second on a thread."""

    def __init__(self, out: Path, t0: float):
        self.notes = Tail(out / "logs" / "vf-rl.log", t0)
        self.trainer = Tail(out / "logs" / "trainer.log", t0)
        self.metrics = Tail(out / "runs" / "metrics.jsonl", t0)
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="chaos-watch")
        self.thread.start()

    def _run(self) -> None:
        while not self.done.wait(0.5):
            self.poll()

    def poll(self) -> None:
        with self.lock:
            for tail in (self.notes, self.trainer, self.metrics):
                tail.poll()

    def steps(self) -> list[tuple[float, dict[str, Any]]]:
        """(seen at, record) of every step line so far."""
        with self.lock:
            out = []
            for t, line in self.metrics.lines:
                with contextlib.suppress(ValueError):
                    rec = json.loads(line)
                    if train_lines([rec]):
                        out.append((t, rec))
            return out

    def note_after(self, since: float, pattern: re.Pattern[str]) -> tuple[float, str] | None:
        with self.lock:
            return next(((t, s) for t, s in self.notes.lines if t >= since and pattern.search(s)), None)

    def close(self) -> None:
        self.done.set()
        self.thread.join(2)
        self.poll()


# -- the processes ----------------------------------------------------------------------------


def _cmdline(proc) -> str:
    with contextlib.suppress(Exception):
        return " ".join(proc.cmdline())
    return ""


def find_targets(vf_rl_pid: int, heartbeats: Path) -> dict[str, Any]:
    """The processes of a running vf-rl: ``server``, ``engine``, ``trainer`` and ``ranks`` {rank: process}
    (psutil.Process objects; absent when not running now)."""
    import psutil

    found: dict[str, Any] = {"ranks": {}}
    try:
        root = psutil.Process(vf_rl_pid)
        children = root.children()
    except psutil.Error:
        return found
    for child in children:
        line = _cmdline(child)
        if "verifiers.cli.vllm" in line:
            found["server"] = child
            with contextlib.suppress(psutil.Error):
                subs = child.children(recursive=True)
                titled = [p for p in subs if "EngineCore" in _cmdline(p)]  # vLLM's setproctitle
                # without setproctitle: the largest child (not multiprocessing's resource tracker)
                others = [p for p in subs if "resource_tracker" not in _cmdline(p)]
                engines = titled or sorted(others, key=lambda p: p.memory_info().rss)[-1:]
                if engines:
                    found["engine"] = engines[0]
        elif "verifiers.cli.train" in line or "accelerate" in line:
            found["trainer"] = child
    trainer = found.get("trainer")
    if trainer is not None:
        with contextlib.suppress(psutil.Error):
            family = {trainer.pid, *(p.pid for p in trainer.children(recursive=True))}
            for path in heartbeats.glob("rank*.live"):
                with contextlib.suppress(OSError, ValueError, psutil.Error):
                    pid = int(path.read_text().strip())
                    if pid in family:
                        found["ranks"][int(path.name[4:].split(".")[0])] = psutil.Process(pid)
    return found


def target_for(kind: str, found: dict[str, Any], rng: random.Random) -> tuple[str, Any] | None:
    """(name, process) a fault of ``kind`` acts on, or None when it is not running now."""
    ranks = found["ranks"]
    if kind in ("kill_server", "stop_server"):
        return ("server", found["server"]) if "server" in found else None
    if kind in ("kill_engine", "stop_engine"):
        return ("engine", found["engine"]) if "engine" in found else None
    if kind in ("kill_trainer", "truncate_checkpoint", "full_disk"):
        # full_disk kills nothing; it waits for a trainer in training (its next save fails)
        return ("trainer", found["trainer"]) if "trainer" in found and ranks else None
    if kind == "stop_trainer":
        return ("rank 0", ranks[0]) if 0 in ranks else None
    if kind in RANK_KINDS:
        others = sorted(r for r in ranks if r > 0) or sorted(ranks)
        if len(ranks) < 2:
            return None
        r = rng.choice(others)
        return (f"rank {r}", ranks[r])
    raise ValueError(kind)


def _still(proc) -> bool:
    """The same process (pid and start time) still exists: never signal a recycled pid."""
    import psutil

    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _signal(proc, signum: int) -> None:
    with contextlib.suppress(Exception):
        if _still(proc):
            proc.send_signal(signum)


# -- full disk --------------------------------------------------------------------------------


@contextlib.contextmanager
def small_disk(folder: Path, size: int) -> Iterator[str | None]:
    """Mount a ``size``-byte tmpfs at ``folder`` (root only); yields None, or why it cannot."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or not shutil.which("mount"):
        yield "needs root to mount a small tmpfs for output_dir (this user is not root)"
        return
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "chaos-tmpfs", str(folder)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        yield f"mount -t tmpfs failed here: {done.stderr.strip()[:200]}"
        return
    try:
        yield None
    finally:
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)  # busy: detach it


def fill(folder: Path) -> Path:
    """Write a ballast file in ``folder`` until the file system is full (unbuffered: no write is left
    pending in a buffer to fail later); its path."""
    ballast = folder / "chaos-ballast.bin"
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (1 << 20, 4096):  # then the last few KiB
            with contextlib.suppress(OSError):
                while os.write(fd, b"\0" * size) == size:
                    pass
    finally:
        os.close(fd)
    return ballast


# -- one run ----------------------------------------------------------------------------------


def vf_rl_command(toml: Path, processes: int) -> list[str]:
    """vf-rl itself, or with ``--processes 2`` vf-rl with its trainer under ``accelerate launch``: what
    ``trainer.gpus = 2`` plans, which a CPU config (``gpus = 0``: one process) cannot ask for."""
    code = "import sys\n"
    if processes > 1:
        code += (
            "from verifiers.cli.run_config import schema\n"
            f"schema.TrainerConfig.num_processes = property(lambda self: {processes})\n"
        )
    code += "from verifiers.cli.rl.plan import main\nsys.exit(main(sys.argv[1:]))\n"
    return [sys.executable, "-c", code, "@", str(toml), "--no-tmux"]


def prepare_dir(run: Path, on_tmpfs: bool) -> None:
    """A fresh run folder: ``run/output`` is output_dir; with a tmpfs its logs and metrics are links
    to ``run/logs`` and ``run/runs`` on the real disk (the full disk hits checkpoints only)."""
    if run.exists():
        for mount in (run / "output",):
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)
        shutil.rmtree(run)
    (run / "output").mkdir(parents=True)
    if on_tmpfs:
        for name in ("logs", "runs"):
            (run / name).mkdir()


def link_record(run: Path) -> None:
    """After the tmpfs is mounted on ``run/output``: its ``logs`` and ``runs`` point to the real disk."""
    for name in ("logs", "runs"):
        (run / "output" / name).symlink_to(run / name, target_is_directory=True)


def run_vf_rl(
    toml: Path, run: Path, processes: int, faults: Sequence[Fault], min_gap_s: float, seed: int, step_s: float,
    deadline_s: float,
) -> dict[str, Any]:  # fmt: skip
    """Run vf-rl on ``toml`` (output_dir ``run/output``) and inject ``faults``; the run's record.

    A fault comes at its scheduled time, but never sooner than ``min_gap_s`` after the one before
    (a stop held long, or a target waited for, would otherwise push two together)."""
    output = run / "output"
    t0 = time.monotonic()
    with open(run / "vf-rl.out", "wb") as out:
        proc = subprocess.Popen(
            vf_rl_command(toml, processes), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
            env={**os.environ, **REPRODUCIBLE_ENV, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
    watch = Watch(output, t0)
    rng = random.Random(seed + 1)  # which rank; apart from the schedule's stream
    stopped: list[Any] = []
    training_at: float | None = None
    last_at = -math.inf
    try:
        pending = list(faults)
        while proc.poll() is None:
            now = time.monotonic() - t0
            if now > deadline_s:
                print(f"chaos: vf-rl still running after {deadline_s:.0f} s: stopping it", flush=True)
                break
            if training_at is None and watch.steps():
                training_at = watch.steps()[0][0]
                print(f"chaos: first step logged at {training_at:.0f} s; faults from now on", flush=True)
            if (
                training_at is not None
                and pending
                and now >= max(training_at + pending[0].at_s, last_at + min_gap_s)
            ):
                fault = pending.pop(0)
                inject(fault, proc, output, watch, t0, rng, step_s, stopped)
                if fault.injected_s is not None:
                    last_at = fault.injected_s
                continue
            time.sleep(0.5)
        for fault in pending:
            fault.skipped = "the run had ended" if proc.poll() is not None else "past the run's deadline"
    finally:
        for p in stopped:
            _signal(p, signal.SIGCONT)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        watch.close()
    return {
        "exit": proc.returncode,
        "seconds": time.monotonic() - t0,
        "training_at_s": training_at,
        "steps": [(t, r) for t, r in watch.steps()],
        "notes": [(t, s) for t, s in watch.notes.lines],
        "corrupt": [(t, s) for t, s in watch.trainer.lines if CORRUPT_LINE.search(s)],
    }


def inject(
    fault: Fault, proc: subprocess.Popen, output: Path, watch: Watch, t0: float, rng: random.Random,
    step_s: float, stopped: list[Any],
) -> None:  # fmt: skip
    """Inject one fault (waiting up to TARGET_WAIT_S for its target), and for stops and the full
    disk hold it until vf-rl reports it or its bound has passed."""
    from verifiers.training.lifecycle.checkpoint import checkpoints, is_complete, last_complete_checkpoint

    heartbeats = output / "logs" / "heartbeats"
    waited = time.monotonic()
    # a second complete checkpoint can be up to two saves away
    patience = (
        max(TARGET_WAIT_S, 2 * SAVE_STEPS * step_s) if fault.kind == "truncate_checkpoint" else TARGET_WAIT_S
    )
    while True:
        found = find_targets(proc.pid, heartbeats)
        target = target_for(fault.kind, found, rng)
        extra = ""
        if target is not None and fault.kind == "truncate_checkpoint":
            newest = last_complete_checkpoint(output)
            earlier = [
                p for _, p in checkpoints(output) if is_complete(p) and newest and p.name != Path(newest).name
            ]
            if newest is None or not earlier:
                target, extra = None, "no complete checkpoint before the newest"
        if target is not None or proc.poll() is not None or time.monotonic() - waited > patience:
            break
        time.sleep(0.5)
    if target is None:
        fault.skipped = extra or f"no {fault.kind.split('_', 1)[1]} process for {patience:.0f} s"
        print(f"chaos: {fault.kind} skipped: {fault.skipped}", flush=True)
        return
    name, victim = target
    fault.target, fault.pid = name, victim.pid
    pattern = SERVER_NOTE if fault.kind in SERVER_KINDS else TRAINER_NOTE
    if fault.kind == "truncate_checkpoint":
        newest = Path(last_complete_checkpoint(output))
        files = sorted((p for p in newest.iterdir() if p.is_file() and p.name != "checkpoint_complete.json"),
                       key=lambda p: -p.stat().st_size)  # fmt: skip
        victim_file = files[0]
        size = victim_file.stat().st_size
        fault.injected_s = time.monotonic() - t0
        os.truncate(victim_file, size // 2)
        victim.kill()  # the restart must now pick the checkpoint before this one
        fault.target = f"{newest.name}/{victim_file.name} {size}->{size // 2} B, then trainer"
    elif fault.kind == "full_disk":
        fault.injected_s = time.monotonic() - t0
        ballast = fill(output)
        fault.target = f"output_dir tmpfs ({ballast.stat().st_size >> 20} MiB ballast)"
        fault.pid = None
        limit = (SAVE_STEPS + 2) * step_s * 3 + 120  # the next save, on a slow step
        hit = _hold(fault, watch, t0, pattern, limit, lambda: proc.poll() is None)
        ballast.unlink()
        fault.released_s = time.monotonic() - t0
        if hit is None:
            print("chaos: full_disk: no trainer failure within the hold; ballast removed", flush=True)
    elif fault.kind.startswith("kill_"):
        fault.injected_s = time.monotonic() - t0
        victim.kill()
    else:  # stop_*
        fault.injected_s = time.monotonic() - t0
        victim.send_signal(signal.SIGSTOP)
        stopped.append(victim)
        _hold(fault, watch, t0, pattern, stop_bound(fault.kind, step_s), lambda: _still(victim))
        _signal(victim, signal.SIGCONT)
        fault.released_s = time.monotonic() - t0
    print(f"chaos: {fault.kind} at {fault.injected_s:.0f} s: {fault.target} (pid {fault.pid})", flush=True)


def _hold(
    fault: Fault, watch: Watch, t0: float, pattern: re.Pattern[str], limit_s: float, alive
) -> tuple[float, str] | None:
    """Wait until vf-rl's note for this fault appears (or ``limit_s`` passes, or the target is gone)."""
    while time.monotonic() - t0 - fault.injected_s < limit_s:
        watch.poll()
        hit = watch.note_after(fault.injected_s, pattern)
        if hit is not None or not alive():
            return hit
        time.sleep(0.5)
    return None


def attribute(faults: Sequence[Fault], record: dict[str, Any]) -> None:
    """Detection, recovery and redone steps of each injected fault, from the run's timed lines."""
    done = [f for f in faults if f.injected_s is not None]
    notes, steps = record["notes"], record["steps"]
    for i, f in enumerate(done):
        until = done[i + 1].injected_s if i + 1 < len(done) else math.inf
        pattern = SERVER_NOTE if f.kind in SERVER_KINDS else TRAINER_NOTE
        hit = next(((t, s) for t, s in notes if f.injected_s <= t < until and pattern.search(s)), None)
        if hit is not None:
            f.detected_s = hit[0]
            m = RESTART_FROM.search(hit[1])
            f.detected_by = "exit" if "exited" in hit[1] else "hang"
            if m:
                f.detected_by += f", resumed from {m.group(1)}"
        settled = max(x for x in (f.injected_s, f.detected_s, f.released_s) if x is not None)
        f.recovered_s = next((t for t, _ in steps if t > settled), None)
        if f.recovered_s is None and record["exit"] == 0:
            f.recovered_s = record["seconds"]  # no step after it, but the run finished
        f.redone = [r["step"] for t, r in steps if f.injected_s <= t < until and r.get("redone")]
        if f.kind == "truncate_checkpoint":  # the trainer's own line: which one it skipped, which it took
            seen = next((s for t, s in record.get("corrupt", []) if f.injected_s <= t < until), None)
            m = CORRUPT_LINE.search(seen) if seen else None
            f.detected_by += (
                f"; skipped {m.group(1)} for {m.group(2)}" if m else "; no corrupt-checkpoint line"
            )


# -- the picture ------------------------------------------------------------------------------


def _xy(points: Sequence[tuple[float, int]]) -> tuple[list[float], list[int]]:
    return [x for x, _ in points], [y for _, y in points]


def plot(
    record: dict[str, Any], reference: dict[str, Any] | None, faults: Sequence[Fault], path: Path, title: str
) -> None:
    """Steps over time (first copies, redone copies, the reference), faults as vertical marks,
    detection (red) and recovery (green) spans."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(13, 5))
    first = [(t, r["step"]) for t, r in record["steps"] if not r.get("redone")]
    again = [(t, r["step"]) for t, r in record["steps"] if r.get("redone")]
    if reference and reference.get("steps"):
        ax.plot(
            *_xy([(t, r["step"]) for t, r in reference["steps"]]), color="0.7", lw=1, label="reference run"
        )
    if first:
        ax.plot(*_xy(first), ".", color="tab:blue", label="step logged")
    if again:
        ax.plot(*_xy(again), "x", color="tab:orange", label="step redone")
    top = max([r["step"] for _, r in record["steps"]] or [1])
    for f in faults:
        if f.injected_s is None:
            continue
        ax.axvline(f.injected_s, color="black", lw=0.8)
        ax.text(f.injected_s, top * 1.02, f.kind, rotation=90, va="bottom", ha="right", fontsize=7)
        if f.detected_s is not None:
            ax.axvspan(f.injected_s, f.detected_s, color="tab:red", alpha=0.2)
        if f.recovered_s is not None:
            ax.axvspan(f.detected_s if f.detected_s is not None else f.injected_s, f.recovered_s,
                       color="tab:green", alpha=0.15)  # fmt: skip
    ax.set(xlabel="seconds since vf-rl started", ylabel="step", title=title)
    ax.set_ylim(0, top * 1.25)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# -- main -------------------------------------------------------------------------------------


def corrupt_support() -> str | None:
    """None when a restart skips a corrupt newest checkpoint (checkpoint verification is in), else why not."""
    try:
        from verifiers.training.lifecycle import checkpoint
    except ImportError as e:  # noqa: F841
        return "the training stack does not import here"
    if not hasattr(checkpoint, "verify") or not hasattr(checkpoint, "newest_good_checkpoint"):
        return "checkpoint verification (a corrupt newest checkpoint skipped) is not in this version"
    return None


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=20, help="the fault window, from the first logged step")
    p.add_argument("--seed", type=int, default=0, help="the run's seed and the schedule's")
    p.add_argument("--processes", type=int, choices=(1, 2), default=1, help="trainer processes (2: CPU DDP)")
    p.add_argument(
        "--faults", default=",".join(KINDS), help=f"comma list of kinds (default all): {','.join(KINDS)}"
    )
    p.add_argument("--min-gap-s", type=float, default=90, help="least seconds between two faults")
    p.add_argument(
        "--step-s", type=float, default=STEP_S, help="a fault-free step's seconds, for the step count"
    )
    p.add_argument(
        "--steps", type=int, default=None, help="steps of both runs (default: from --minutes and --step-s)"
    )
    p.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance of the model fields")
    p.add_argument("--out", default="outputs/benchmarks/chaos")
    p.add_argument(
        "--reference", default=None, help="a fault-free run's metrics.jsonl (or its folder) to compare with"
    )
    p.add_argument(
        "--dry-run", action="store_true", help="print the fault schedule and the TOML; start nothing"
    )
    args = p.parse_args(argv)
    unknown = [k for k in args.faults.split(",") if k and k not in KINDS]
    if unknown:
        p.error(f"unknown fault kind(s) {', '.join(unknown)}; choose from {', '.join(KINDS)}")
    args.kinds = [k for k in KINDS if k in args.faults.split(",")]  # one order, whatever the list's
    return args


def reference_metrics(path: str) -> Path:
    p = Path(path)
    if p.is_dir():
        for candidate in (
            p / "runs" / "metrics.jsonl",
            p / "output" / "runs" / "metrics.jsonl",
            p / "metrics.jsonl",
        ):
            if candidate.is_file():
                return candidate
    if not p.is_file():
        raise SystemExit(f"--reference {path}: no metrics.jsonl there")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out).absolute()
    ref_path = reference_metrics(args.reference) if args.reference else None
    ref_lines = train_lines(read_metrics(ref_path)) if ref_path else None
    steps = args.steps or (
        max(r["step"] for r in ref_lines) if ref_lines else steps_for(args.minutes, args.step_s)
    )
    span = args.minutes * 60
    disk_why = None if os.geteuid() == 0 else "needs root to mount a small tmpfs for output_dir"
    kinds, dropped = usable_kinds(args.kinds, args.processes, disk_why, corrupt_support())
    faults = schedule(args.seed, kinds, span, args.min_gap_s)
    bounds = {
        "inference.hang_timeout_s": SERVER_ANSWER_S, "inference.progress_timeout_s": SERVER_PROGRESS_S,
        "trainer.hang_timeout_s": TRAINER_LOOP_S, "trainer live bound (LIVE_BOUND_S)": TRAINER_LIVE_S,
        "server probe interval": PROBE_S, "max_restarts (each side)": MAX_RESTARTS,
        "stop held at most": {k: stop_bound(k, args.step_s) for k in ("stop_server", "stop_engine", "stop_trainer", "stop_rank")},
    }  # fmt: skip
    toml_text = config_toml(args.seed, steps, 8000, str(out / "faulted" / "output"))
    print(f"steps: {steps} per run ({'--steps' if args.steps else 'the reference' if ref_lines else f'{args.minutes:g} min / {args.step_s:g} s a step'}); "
          f"faults over {span:.0f} s from the first logged step, >= {args.min_gap_s:g} s apart")  # fmt: skip
    print("bounds: " + ", ".join(f"{k} = {v}" for k, v in bounds.items()))
    for kind, why in dropped.items():
        print(f"not injected: {kind}: {why}")
    print("schedule (s after the first logged step):")
    for i, f in enumerate(faults, 1):
        print(f"  {i:2d}. {f.at_s:7.1f}  {f.kind}")
    if args.dry_run:
        print("\nTOML (port and output_dir set per run):\n" + toml_text)
        return 0

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # exit through the finally blocks
    from verifiers.utils.compute_dtype import cpu_compute_dtype

    REPRODUCIBLE_ENV.setdefault("VF_CPU_DTYPE", cpu_compute_dtype().dtype)
    print(f"both runs: {', '.join(f'{k}={v}' for k, v in REPRODUCIBLE_ENV.items())}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    deadline = span + steps * args.step_s * 3 + 1200  # faults, then every step slow, then start-ups
    faulted_run = out / "faulted"
    prepare_dir(faulted_run, on_tmpfs="full_disk" in kinds)
    disk = (
        small_disk(faulted_run / "output", TMPFS_BYTES) if "full_disk" in kinds else contextlib.nullcontext()
    )
    with disk as why:
        if why:
            dropped["full_disk"] = why
            for f in faults:
                if f.kind == "full_disk":
                    f.skipped = why
            print(f"not injected: full_disk: {why}")
        elif "full_disk" in kinds:
            link_record(faulted_run)
        toml = out / "chaos.toml"
        toml.write_text(config_toml(args.seed, steps, free_port(), str(faulted_run / "output")))
        live = [f for f in faults if not f.skipped]
        record = run_vf_rl(
            toml, faulted_run, args.processes, live, args.min_gap_s, args.seed, args.step_s, deadline
        )
    if not record["steps"]:
        tail = (faulted_run / "vf-rl.out").read_text(errors="replace")[-3000:]
        raise SystemExit(
            f"vf-rl logged no step (exit {record['exit']}); no reference run. Its output ends:\n{tail}"
        )
    attribute(faults, record)
    reference: dict[str, Any] | None = None
    if ref_lines is None:
        ref_run = out / "reference"
        prepare_dir(ref_run, on_tmpfs=False)
        ref_toml = ref_run / "chaos.toml"
        ref_toml.write_text(config_toml(args.seed, steps, free_port(), str(ref_run / "output")))
        reference = run_vf_rl(ref_toml, ref_run, args.processes, [], 0, args.seed, args.step_s, deadline)
        ref_lines = [r for _, r in reference["steps"]]
        if reference["exit"] != 0:
            print(
                f"chaos: the reference run exited {reference['exit']}; see {ref_run / 'vf-rl.out'}",
                flush=True,
            )
    faulted_lines = [r for _, r in record["steps"]]
    result = compare(faulted_lines, ref_lines, steps, args.rtol)
    step_times = sorted(r["time/step_s"] for r in ref_lines if isinstance(r.get("time/step_s"), (int, float)))
    median_step = step_times[len(step_times) // 2] if step_times else None
    line = closing_line(faults, len(result["missing"]), result["exact"])
    summary = {
        "settings": {k: v for k, v in vars(args).items()},
        "steps": steps,
        "bounds": bounds,
        "not_injected_kinds": dropped,
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count()},
        "faulted_run": {"exit": record["exit"], "seconds": record["seconds"], "first_step_at_s": record["training_at_s"]},
        "reference_run": ({"exit": reference["exit"], "seconds": reference["seconds"]} if reference else {"metrics": str(ref_path)}),
        "median_step_s": median_step,
        "faults": [dataclasses.asdict(f) for f in faults],
        "comparison": result,
        "detections_within_bounds": dict(zip(("within", "judged"), within_bounds(faults, args.step_s), strict=True)),
        "undetected_with_a_bound": undetected(faults, args.step_s),
        "notes": record["notes"],
        "closing": line,
    }  # fmt: skip
    (out / "chaos.json").write_text(json.dumps(summary, indent=2, default=str))
    plot(record, reference, faults, out / "chaos.png", f"vf-rl under faults, seed {args.seed}, {steps} steps")
    table = format_table(faults, args.step_s)
    (out / "chaos.md").write_text(table + "\n")
    print(table)
    inside, judged = within_bounds(faults, args.step_s)
    print(
        f"detections within their stated bound: {inside} of {judged} (docs/vf-rl.md; '-': no bound of vf-rl's); "
        f"not detected though bounded: {', '.join(undetected(faults, args.step_s)) or 'none'}"
    )
    print(
        f"vf-rl exit {record['exit']} after {record['seconds']:.0f} s; median step {median_step or float('nan'):.1f} s (reference)"
    )
    print(f"bit-exact fields: {', '.join(result['bit_exact_fields']) or '-'}; within rtol {args.rtol:g}: "
          f"{', '.join(result['close_fields']) or '-'}; lines off the rule: {len(result['broken'])}; "
          f"missing steps: {result['missing'] or '-'}; steps off in data: {result['steps_off_in_data'] or '-'}, "
          f"in model fields: {result['steps_off_in_model'] or '-'}")  # fmt: skip
    print(f"wrote {out / 'chaos.json'}, {out / 'chaos.png'} and {out / 'chaos.md'}", flush=True)
    print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

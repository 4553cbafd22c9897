"""A process and every process below it, read from ``/proc``: what ending a child has to reach.

A child's process group is not enough. torch's elastic agent, which ``accelerate launch`` runs for
two or more processes (and ``torchrun``), starts each rank with ``start_new_session=True``
(``torch/distributed/elastic/multiprocessing/subprocess_handler``): every rank leads a session and
group of its own. SIGKILL to the launcher's group ended the agent only; the ranks, re-parented to
init, went on running. Measured in ``benchmarks/chaos.py --processes 2`` (2026-11-29): a stopped
rank 0 killed this way by ``vf-rl`` was continued later, finished its checkpoint and logged a step
while the restarted trainer trained the same steps beside it. So the tree is read *before* the
kill (afterwards the orphans no longer hang below it) and each of its processes is signalled.

Linux only (``/proc``); elsewhere the tree is the process alone, as a group kill was before.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

PROC = Path("/proc")


def parent_pids(proc: Path = PROC) -> dict[int, int]:
    """pid -> parent pid of every process in ``proc`` (empty where there is no ``/proc``)."""
    out: dict[int, int] = {}
    try:
        entries = list(proc.iterdir())
    except OSError:
        return out
    for d in entries:
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue  # ended meanwhile
            out[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return out


def descendants(roots: set[int], ppids: Mapping[int, int]) -> set[int]:
    """``roots`` and every process below them in ``ppids`` (pid -> parent pid)."""
    children: dict[int, list[int]] = {}
    for pid, ppid in ppids.items():
        children.setdefault(ppid, []).append(pid)
    seen, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo.extend(children.get(pid, ()))
    return seen


def tree(pid: int, proc: Path = PROC) -> set[int]:
    """``pid`` and every process below it now."""
    return descendants({pid}, parent_pids(proc))


def running(pids: Iterable[int], proc: Path = PROC) -> set[int]:
    """Those of ``pids`` that still exist and are not zombies (a zombie holds nothing but its pid)."""
    out = set()
    for pid in pids:
        try:
            state = (proc / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            if not proc.is_dir():  # no /proc: ask the kernel
                try:
                    os.kill(pid, 0)
                except (ProcessLookupError, PermissionError):
                    continue
                out.add(pid)
            continue
        if state not in ("Z", "X"):
            out.add(pid)
    return out


def signal_all(pids: Iterable[int], signum: int) -> None:
    """Send ``signum`` to each of ``pids`` that is still there."""
    for pid in pids:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

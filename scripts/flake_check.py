"""Rerun chosen tests N times, each time in a fresh pytest process, and print each test's failure rate.

    python scripts/flake_check.py -n 10 tests/training/test_distributed.py::test_two_processes_match_one_process -- -m ""
    python scripts/flake_check.py -n 30 --lock /tmp/vf-heavy.lock tests/test_a.py::test_x tests/test_b.py

Each target (a node id, a file, anything pytest accepts) is run N times; a run is one
``python -m pytest`` subprocess (nothing is shared between runs: a crash at exit, a
leaked port or a leftover process shows up as the flake it is). Per-test outcomes come
from the run's JUnit XML, so one target may hold several tests (parametrized cases share
the run's module-level caches, as they do in the suite). Arguments after ``--`` go to
pytest (e.g. ``-m ""`` to include ``slow`` tests).

Output: per test, ``runs``, ``failed``, ``skipped`` and the failure rate, then the last
lines of its first failure; a run that produced no test results (collection error, the
pytest process itself killed) counts as a failure of its target. The closing line is
``flake_check runs=R failed=F`` (test runs and failed test runs over all targets); the exit
status is 1 if any run failed, 0 otherwise.

With ``--lock FILE`` each run holds an exclusive ``flock`` on FILE and releases it before
the next, so long checks share a busy machine in short turns. There is no retry: a test
that fails once in N runs is reported as failing 1/N.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TAIL_LINES = 25  # lines of a failure kept for the report


@dataclass
class Tally:
    """One test's record over the runs."""

    runs: int = 0
    failed: int = 0
    skipped: int = 0
    first_failure: str = ""
    seconds: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.failed / self.runs if self.runs else 0.0


def parse_junit(path: Path) -> dict[str, tuple[str, str]]:
    """``{test id: (outcome, text)}`` from a JUnit XML file; outcome is passed, failed or skipped.

    The id is ``classname::name`` as JUnit writes it (``tests.training.test_x::test_y[case]``);
    ``text`` is the failure's message and traceback (empty unless failed)."""
    outcomes: dict[str, tuple[str, str]] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")  # an error in a fixture or at teardown fails the test too
        if bad is not None:
            text = "\n".join(x for x in (bad.get("message", ""), bad.text or "") if x)
            outcomes[test_id] = ("failed", text)
        elif case.find("skipped") is not None:
            outcomes[test_id] = ("skipped", "")
        else:
            outcomes[test_id] = ("passed", "")
    return outcomes


def tail(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


@contextlib.contextmanager
def held(lock: str | None) -> Iterator[None]:
    """An exclusive flock on ``lock`` for the block (nothing without one)."""
    if lock is None:
        yield
        return
    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def run_once(
    target: str, pytest_args: list[str], timeout: float, lock: str | None
) -> tuple[dict, str, int, float]:
    """One fresh pytest process on ``target``: its per-test outcomes, output, exit status and
    seconds (the run's own, not the wait for the lock)."""
    with tempfile.TemporaryDirectory(prefix="vf-flake-") as tmp:
        xml = Path(tmp) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}",
               "-o", "junit_family=xunit2", *pytest_args, target]  # fmt: skip
        with held(lock):
            start = time.monotonic()
            try:
                proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
                output, code = proc.stdout + proc.stderr, proc.returncode
            except subprocess.TimeoutExpired as err:
                output = f"{err.stdout or ''}{err.stderr or ''}\n[flake_check: killed after {timeout:g} s]"
                output, code = output if isinstance(output, str) else str(output), -9
            took = time.monotonic() - start
        outcomes = parse_junit(xml) if xml.exists() and xml.stat().st_size else {}
    return outcomes, output, code, took


def check(
    targets: list[str], runs: int, pytest_args: list[str], timeout: float, lock: str | None
) -> dict[str, Tally]:
    """Run every target ``runs`` times; the tallies by test id (a target with no results: by target)."""
    tallies: dict[str, Tally] = {}
    for target in targets:
        for i in range(runs):
            outcomes, output, code, took = run_once(target, pytest_args, timeout, lock)
            if not outcomes or (code != 0 and all(o == "passed" for o, _ in outcomes.values())):
                # No results, or every test passed yet pytest failed (e.g. it crashed at exit).
                outcomes = {**outcomes, target: ("failed", f"pytest exited {code}\n{output}")}
            for test_id, (outcome, text) in outcomes.items():
                t = tallies.setdefault(test_id, Tally())
                t.runs += 1
                t.seconds.append(took)
                if outcome == "skipped":
                    t.skipped += 1
                elif outcome == "failed":
                    t.failed += 1
                    if not t.first_failure:
                        t.first_failure = tail(text if text.strip() else output)
            failed = sorted(k for k, (o, _) in outcomes.items() if o == "failed")
            print(f"[{target}] run {i + 1}/{runs}: exit {code}, {took:.0f} s"
                  + (f", failed: {', '.join(failed)}" if failed else ""), flush=True)  # fmt: skip
    return tallies


def report(tallies: dict[str, Tally]) -> str:
    lines = []
    for test_id, t in tallies.items():
        skipped = f", skipped {t.skipped}" if t.skipped else ""
        lines.append(f"{test_id}: runs {t.runs}, failed {t.failed}, rate {t.rate:.1%}{skipped}")
    for test_id, t in tallies.items():
        if t.first_failure:
            lines += ["", f"--- first failure of {test_id} (last lines) ---", t.first_failure]
    total = sum(t.runs for t in tallies.values())
    failed = sum(t.failed for t in tallies.values())
    lines += ["", f"flake_check runs={total} failed={failed}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    pytest_args: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, pytest_args = argv[:at], argv[at + 1 :]
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("targets", nargs="+", help="pytest node ids, files or directories")
    p.add_argument("-n", "--runs", type=int, default=10, help="runs per target (default 10)")
    p.add_argument(
        "--timeout", type=float, default=1800, help="seconds one pytest run may take (default 1800)"
    )
    p.add_argument("--lock", help="hold an exclusive flock on this file during each run")
    a = p.parse_args(argv)
    if a.runs < 1:
        p.error(f"--runs must be at least 1, got {a.runs}")
    tallies = check(a.targets, a.runs, pytest_args, a.timeout, a.lock)
    print("\n" + report(tallies), flush=True)
    return 1 if any(t.failed for t in tallies.values()) else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONFAULTHANDLER", "1")  # a crash in a run prints every thread's stack
    sys.exit(main())

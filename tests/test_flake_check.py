"""scripts/flake_check.py: per-test outcomes from JUnit XML, rates, and the closing line."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("flake_check", ROOT / "scripts" / "flake_check.py")
flake_check = importlib.util.module_from_spec(spec)
sys.modules["flake_check"] = flake_check  # dataclasses look their module up by name
spec.loader.exec_module(flake_check)

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
  <testcase classname="tests.test_x" name="test_ok[a]" time="0.1"/>
  <testcase classname="tests.test_x" name="test_bad" time="0.1">
    <failure message="assert 1 == 2">def test_bad():
&gt;       assert 1 == 2</failure>
  </testcase>
  <testcase classname="tests.test_x" name="test_teardown" time="0.1"><error message="teardown boom"/></testcase>
  <testcase classname="tests.test_x" name="test_skip" time="0.0"><skipped message="no gpu"/></testcase>
</testsuite></testsuites>
"""


def test_parse_junit_outcomes(tmp_path):
    path = tmp_path / "j.xml"
    path.write_text(JUNIT)
    out = flake_check.parse_junit(path)
    assert {k: v[0] for k, v in out.items()} == {
        "tests.test_x::test_ok[a]": "passed",
        "tests.test_x::test_bad": "failed",
        "tests.test_x::test_teardown": "failed",  # an error at teardown fails the test too
        "tests.test_x::test_skip": "skipped",
    }
    assert "assert 1 == 2" in out["tests.test_x::test_bad"][1]


def test_report_rates_and_closing_line():
    t = {
        "a::ok": flake_check.Tally(runs=10),
        "a::flaky": flake_check.Tally(runs=10, failed=1, first_failure="E boom"),
    }
    text = flake_check.report(t)
    assert "a::ok: runs 10, failed 0, rate 0.0%" in text
    assert "a::flaky: runs 10, failed 1, rate 10.0%" in text and "E boom" in text
    assert text.splitlines()[-1] == "flake_check runs=20 failed=1"


def test_reruns_in_fresh_processes(tmp_path):
    # A test that fails on every second run (state kept in a file: each run is a new process).
    (tmp_path / "test_alt.py").write_text(
        "from pathlib import Path\n"
        "def test_alt():\n"
        f"    p = Path({str(tmp_path / 'count')!r})\n"
        "    n = int(p.read_text()) + 1 if p.exists() else 1\n"
        "    p.write_text(str(n))\n"
        "    assert n % 2, f'run {n}'\n"
    )
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "flake_check.py"), "-n", "4", str(tmp_path / "test_alt.py"),
         "--", "--rootdir", str(tmp_path), "-p", "no:randomly"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "test_alt::test_alt: runs 4, failed 2, rate 50.0%" in proc.stdout
    assert "AssertionError: run 2" in proc.stdout  # the first failure's lines
    assert proc.stdout.rstrip().splitlines()[-1] == "flake_check runs=4 failed=2"

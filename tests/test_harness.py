"""The test harness itself: a test run stopped with SIGTERM still stops what its tests started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Stands in for a test that serves vf-vllm: a child in its own session (as tests/doubles/vllm_server.py
# starts the server), stopped in a `finally`, with the test still running when SIGTERM comes.
INNER_TEST = """
import os, subprocess, sys, time
from pathlib import Path

def test_holds_a_child():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    Path(os.environ["CHILD_PID_FILE"]).write_text(str(child.pid))
    try:
        time.sleep(120)
    finally:
        child.kill()
        child.wait()
        Path(os.environ["CHILD_PID_FILE"]).write_text("stopped")
"""


def test_sigterm_unwinds_the_run_so_servers_are_stopped(tmp_path):
    test_file, pid_file = tmp_path / "test_inner.py", tmp_path / "child.pid"
    test_file.write_text(INNER_TEST)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "tests.conftest",
        "-p",
        "no:cacheprovider",
        str(test_file),
    ]
    env = {**os.environ, "CHILD_PID_FILE": str(pid_file)}
    run = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text().isdigit():
            assert run.poll() is None and time.monotonic() < deadline, run.stdout.read().decode()
            time.sleep(0.05)
        child = int(pid_file.read_text())
        run.send_signal(signal.SIGTERM)
        out = run.communicate(timeout=30)[0].decode()
    finally:
        run.kill()
    assert pid_file.read_text() == "stopped", out  # the test's `finally` ran
    assert "KeyboardInterrupt" in out and run.returncode == 2, out  # pytest's "interrupted" exit
    try:
        os.kill(child, 0)
    except ProcessLookupError:
        pass
    else:
        raise AssertionError(f"the test's child {child} outlived the run")


def test_test_servers_take_ports_below_the_kernels_ephemeral_range():
    """An outgoing connection's local port comes from the ephemeral range, so a port picked
    there can be taken before vf-vllm binds it (CI lost a package fixture so)."""
    from tests.doubles import vllm_server

    start = vllm_server._ephemeral_start()
    ports = {vllm_server.free_port() for _ in range(20)}
    assert all(1024 <= p < start for p in ports), (start, sorted(ports))
    assert len(ports) > 10  # drawn at random: two tests picking at once rarely meet


def test_a_server_whose_port_was_taken_starts_again_on_another(tmp_path, monkeypatch):
    """``serve`` picks another port when the server's log says its port was bound first; a port
    the test chose, or any other failure, fails the test at once."""
    import pytest

    from tests.doubles import vllm_server

    monkeypatch.setattr(vllm_server.pytest, "importorskip", lambda name: None)
    starts = []

    class Fake(vllm_server.Server):
        def start(self):
            self.log_start = self.log.stat().st_size if self.log.exists() else 0
            starts.append(self.port)
            taken = len(starts) < 3
            with open(self.log, "a") as f:
                f.write("OSError: [Errno 98] Address already in use\n" if taken else "ready\n")

        def wait_ready(self, timeout=240.0):
            if self.log.read_text().endswith("in use\n"):
                pytest.fail("vf-vllm exited with code 1")

        def stop(self):
            pass

    monkeypatch.setattr(vllm_server, "Server", Fake)
    with vllm_server.serve(tmp_path, tmp_path) as server:
        assert len(starts) == 3 and server.port == starts[-1] and len(set(starts)) == 3
    starts.clear()
    with pytest.raises(pytest.fail.Exception), vllm_server.serve(tmp_path, tmp_path, port=12345):
        pass
    assert starts == [12345]  # the test's own port: not retried

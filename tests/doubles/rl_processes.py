"""vf-rl's two children stood in for: a fake inference server, fake trainers, and a Plan over them.

Stands in for vf-vllm and vf-train under vf-rl's launcher (``verifiers/cli/rl/``): ``FAKE_SERVER``
is a small HTTP server script that answers ``/health`` for a while and then crashes (status 7);
``fake_trainer`` runs any Python code as the trainer; ``make_plan`` builds the launcher's
``Plan`` from ``RL_CONFIG`` (``tests/doubles/configs.py``) around those commands. ``gone`` says
whether a child's process group is gone, ``on_a_terminal`` runs a command on a pty (tmux mode),
``wait_for`` polls a condition. ``free_port`` is re-exported for the scripts that child
processes run (``import tests.doubles.rl_processes as T``).

Used by the default tier's cli tests (tests/cli/rl/: the launcher, its supervision, trainer
restarts) and by their slow real runs (``wait_for``).
"""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.doubles.configs import RL_CONFIG as CONFIG  # noqa: E402
from tests.doubles.vllm_server import free_port  # noqa: E402
from verifiers.cli.rl import plan as rl_cli  # noqa: E402
from verifiers.cli.run_config import load as tc  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

__all__ = [
    "FAKE_SERVER",
    "ROOT",
    "fake_server",
    "fake_trainer",
    "free_port",
    "gone",
    "make_plan",
    "on_a_terminal",
    "wait_for",
]


FAKE_SERVER = textwrap.dedent(
    """
    import http.server, sys, time
    port, delay, lifetime = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
    print("fake server starting", flush=True)
    time.sleep(delay)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path in ("/health", "/v1/models") else 404)
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    http.server.HTTPServer.allow_reuse_address = True  # a restart binds the port again at once
    server = http.server.HTTPServer(("127.0.0.1", port), Handler)
    server.timeout = 0.2
    print("fake server ready", flush=True)
    end = time.monotonic() + lifetime
    while time.monotonic() < end:
        server.handle_request()
    print("RuntimeError: fake server exits", flush=True)  # the error line vf-rl quotes
    sys.exit(7)
    """
)


def make_plan(tmp_path, server_cmd, trainer_cmd, timeout=30.0, port=None, max_restarts=None) -> rl_cli.Plan:
    port = port or free_port()
    raw = tc.tomllib.loads(CONFIG)
    raw["inference"]["port"] = port
    if max_restarts is not None:
        raw["inference"]["max_restarts"] = max_restarts
    config = tc.parse_config(raw, source=tmp_path / "cfg.toml")
    logs = tmp_path / "logs"
    return rl_cli.Plan(
        config=config,
        installs=[],
        server=rl_cli.Side("inference", server_cmd, {}, logs / "inference.log"),
        trainer=rl_cli.Side("trainer", trainer_cmd, {}, logs / "trainer.log"),
        timeout=timeout,
    )


def fake_server(tmp_path, port, delay=0.0, lifetime=60.0) -> list[str]:
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER)
    return [sys.executable, str(script), str(port), str(delay), str(lifetime)]


def fake_trainer(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def gone(proc) -> bool:
    try:
        os.killpg(proc.pid, 0)
    except ProcessLookupError:
        return True
    return False


def on_a_terminal(argv: list[str], poke=None, timeout: float = 90) -> str:
    """Run ``argv`` (from the repository root) on a pty until it ends, draining the terminal (or
    tmux blocks on it); ``poke(fd)`` is called between reads (to type keys). Returns the output."""
    import pty
    import select

    pid, fd = pty.fork()
    if pid == 0:  # the child: vf-rl's Launcher on a terminal
        os.chdir(ROOT)
        os.execv(argv[0], argv)
    output, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        if select.select([fd], [], [], 0.2)[0]:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
        if poke is not None:
            poke(fd)
        if os.waitpid(pid, os.WNOHANG)[0]:
            break
    return output.decode(errors="replace")


def wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)

"""A real vf-vllm server for tests: the tiny model in a subprocess on a free port.

Not a double: the real server, started and stopped the way a test needs it; ``free_port`` and
``bound_unix_sockets`` (what a server process holds) go with it. Used by the server tier
(``-m server``, part of the default run) and the slow tier's real runs.

``serve(model_dir, tmp_dir, *flags)`` starts ``python -m verifiers.cli.vllm`` in its
own process group, waits until ``/vf/health`` says ready (or fails the test with the
tail of the server's log), yields a :class:`Server` and stops the whole group after.
Each test module passes its own ``flags`` (LoRA, seed, ``--max-num-seqs``, ...): the
settings here are only the CPU ones every test server shares.

A test may ``kill()`` (SIGKILL, like a crash) or ``stop()`` the server and ``start()``
it again: it comes back on the same port, logging to the same file.

Only the standard library and pytest are imported here; vLLM runs in the subprocess.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

LOOPBACK = "127.0.0.1"
# Binding every interface puts a server "off loopback" for its security check (admin
# routes then need a token), while tests still send their traffic to 127.0.0.1 only.
ALL_INTERFACES = "0.0.0.0"

# One vLLM cache for every test server, the one scripts/env.sh names. On a cache miss vLLM
# inspects the model class in a fresh Python process (about 10 s of imports on 2 cores) before
# it starts the engine; a cache per server paid that at every start.
VLLM_CACHE_ROOT = os.environ.get("VLLM_CACHE_ROOT") or str(
    Path(__file__).resolve().parents[2] / ".cache" / "vllm"
)

# Eager fp32 (no compile time; the trainer's dtype) and a small fixed KV cache.
CPU_FLAGS = ("--enforce-eager", "--dtype", "float32", "--kv-cache-memory-bytes", str(256 << 20))
PORT_ATTEMPTS = 3


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default range starts here


def free_port(host: str = LOOPBACK) -> int:
    """A port free now, below the kernel's ephemeral range.

    A port the kernel hands out for ``bind(0)`` comes from the range it also gives every
    outgoing connection's local end: in the seconds before vf-vllm binds it, one of the many
    client connections of a parallel test run can take it (CI: "Address already in use" at
    the server's start). Below that range only another explicit bind can, and the ports are
    drawn at random, so two tests picking at once rarely meet; ``serve`` retries if they do.
    """
    top = _ephemeral_start()
    for _ in range(50):
        port = random.randrange(max(1024, top - 12000), top)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # a crowded low range: the kernel's pick
        s.bind((host, 0))
        return s.getsockname()[1]


class Server:
    """One vf-vllm process (group) serving ``model_dir``; ``start()`` does not wait for it."""

    def __init__(
        self,
        model_dir: Path,
        tmp_dir: Path,
        *flags: str,
        port: int | None = None,
        host: str | None = None,
        env: Mapping[str, str | None] | None = None,
        max_model_len: int = 512,
    ):
        self.model_dir, self.tmp_dir = Path(model_dir), Path(tmp_dir)
        self.host = host  # the address to bind; None: vf-vllm's default (loopback)
        self.port = port or free_port(host or LOOPBACK)
        self.log = self.tmp_dir / "server.log"
        self.cmd = [sys.executable, "-m", "verifiers.cli.vllm", "--model", str(self.model_dir)]
        self.cmd += ["--host", host] if host else []
        self.cmd += ["--port", str(self.port), "--max-model-len", str(max_model_len), *CPU_FLAGS, *flags]
        self.env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CACHE_ROOT": VLLM_CACHE_ROOT}
        for name, value in (env or {}).items():  # None removes a variable
            if value is None:
                self.env.pop(name, None)
            else:
                self.env[name] = value
        self.proc: subprocess.Popen | None = None
        self.log_start = 0  # where the last start's lines begin in the log

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def client(self, **kwargs):
        """A new ``VLLMClient`` for this server; the caller closes it."""
        from verifiers.inference.client.vllm_client import VLLMClient

        return VLLMClient(self.url, **{"request_timeout": 60, **kwargs})

    def start(self) -> None:
        from verifiers.inference.server.parent_watch import launcher_env

        self.log_start = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as fh:  # the child keeps its own copy of the file
            self.proc = subprocess.Popen(
                self.cmd,
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**self.env, **launcher_env()},  # ends with the test process, even a killed one
            )

    def wait_ready(self, timeout: float = 240.0) -> None:
        """Wait for ``/vf/health``; fail the test with the log's tail if the server exits or times out."""
        from verifiers.errors import ServerError

        deadline = time.monotonic() + timeout
        with contextlib.closing(self.client()) as client:
            while True:
                if self.proc is not None and self.proc.poll() is not None:
                    pytest.fail(f"vf-vllm exited with code {self.proc.returncode}; log tail:\n{self.tail()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    pytest.fail(f"vf-vllm not ready after {timeout:.0f} s; log tail:\n{self.tail()}")
                try:  # short waits, so that a crashed server is noticed at once
                    client.wait_until_ready(timeout=min(5.0, left))
                    return
                except ServerError:
                    pass
                except Exception as e:  # noqa: BLE001 - anything else: the log says more
                    pytest.fail(f"vf-vllm did not start ({e!r}); log tail:\n{self.tail()}")

    def kill(self) -> None:
        """SIGKILL the server and its engine process: no shutdown, like a crash."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        """SIGTERM the process group (engine included), SIGKILL after 30 s."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:  # the whole group is gone already
            self.proc.wait()
            return
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def tail(self, n: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""

    def lost_its_port(self) -> bool:
        """Whether the last start ended on a port someone else bound first."""
        with contextlib.suppress(OSError), open(self.log, "rb") as f:
            f.seek(self.log_start)
            return b"Address already in use" in f.read()
        return False


@contextlib.contextmanager
def serve(
    model_dir: Path,
    tmp_dir: Path,
    *flags: str,
    ready_timeout: float = 240.0,
    **kwargs,
) -> Iterator[Server]:
    """A started, ready :class:`Server` (skips the test without vLLM); stopped on exit.

    ``kwargs`` are :class:`Server`'s: ``port``, ``host`` (to bind), ``env`` (``None`` values
    remove a variable), ``max_model_len``.
    """
    pytest.importorskip("vllm")
    for attempt in range(1, PORT_ATTEMPTS + 1):
        server = Server(model_dir, tmp_dir, *flags, **kwargs)
        server.start()
        try:
            server.wait_ready(ready_timeout)
            break
        except pytest.fail.Exception:
            server.stop()
            # A port we picked, taken before the server bound it (free_port): pick another.
            if kwargs.get("port") or attempt == PORT_ATTEMPTS or not server.lost_its_port():
                raise
    try:
        yield server
    finally:
        server.stop()


def serve_off_loopback(
    model_dir: Path, tmp_dir: Path, *flags: str, admin_token: str | None = None, **kwargs
) -> contextlib.AbstractContextManager[Server]:
    """``serve`` bound to every interface, with exactly ``admin_token`` (none from ``$VF_ADMIN_TOKEN``)."""
    flags += ("--admin-token", admin_token) if admin_token else ()
    env = {"VF_ADMIN_TOKEN": None}
    return serve(model_dir, tmp_dir, *flags, host=ALL_INTERFACES, env=env, **kwargs)


def bound_unix_sockets(pid: int) -> set[Path]:
    """Paths of the Unix sockets that process ``pid`` and its descendants have bound (abstract ones left out)."""
    import psutil  # a vLLM dependency

    root = psutil.Process(pid)
    procs = [root, *root.children(recursive=True)]
    return {Path(c.laddr) for p in procs for c in p.net_connections(kind="unix") if c.laddr.startswith("/")}

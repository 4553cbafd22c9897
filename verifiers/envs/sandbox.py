"""Run untrusted Python (a model's tool call) in a separate, locked-down process.

``run_python(code)`` / ``await arun_python(code)`` return a :class:`SandboxResult`;
they never raise because of what the code did (timeouts, crashes, blocked
operations are values). Layers, outermost first; each one that is not
available on this machine is skipped and ``SandboxResult.layers`` lists those
that were active:

- **process** (always): ``python -I -B sandbox_child.py`` (:mod:`verifiers.envs.sandbox_child`:
  limits, landlock, seccomp, audit hook, then the code) in its own session and process group,
  with only a minimal environment (``PATH``, ``HOME``/``TMPDIR`` = the work
  dir, thread caps; nothing from the parent), stdin ``/dev/null``, cwd a fresh
  temporary directory that is removed afterwards. Resource limits set in the
  child (``resource.setrlimit``): ``RLIMIT_CPU`` (then ``SIGXCPU``/kill),
  ``RLIMIT_AS`` (memory), ``RLIMIT_NPROC`` (not enforced by Linux for uid 0),
  ``RLIMIT_FSIZE``, ``RLIMIT_NOFILE``, ``RLIMIT_CORE=0``. A wall-clock limit
  kills the whole process group; so does output beyond 8x ``max_output_bytes``
  (output past ``max_output_bytes`` is cut). If the host process dies, a
  watchdog thread in the child sees its stdin pipe close and exits.
- **namespaces** (``unshare``, probed once): a new network namespace (no
  interfaces but a down loopback), PID namespace with a private ``/proc``
  (the parent is invisible; every process in it dies with the sandbox), and a
  user namespace when not root.
- **landlock** (Linux >= 5.13, probed in the child): the file system is read-only
  except the work dir (plus ``/dev/null``) and readable only under the Python
  installation, system library dirs and the work dir; TCP bind/connect denied
  (ABI >= 4); signals outside the sandbox denied (ABI >= 6).
- **seccomp** (x86_64, aarch64): ``fork``/``vfork``/``clone`` without
  ``CLONE_THREAD``, ``execve``, ``socket``, ``ptrace``, signals to other
  processes, ``io_uring``, ``bpf``, namespace and mount calls fail with EPERM.
- **audit** (always available): a ``sys.addaudithook`` hook turns blocked operations into
  ``PermissionError`` (``ImportError`` for imports) *and* reports them, so
  ``SandboxResult.violations``/``error`` name the attempt even if the code
  catches the exception: sockets and network modules, process creation
  (``os.fork``, ``subprocess``, ``os.system``, ``os.exec*``, ``posix_spawn``,
  sub-interpreters), signals (``os.kill``, ``killpg``, ``pthread_kill``,
  ``pidfd_send_signal``), writes/renames/chmod outside the work dir (paths are
  resolved with symlinks; creating links is blocked), ``chdir`` out of it,
  reading other processes' ``/proc/<pid>``, ``ctypes`` memory/library access,
  ``gc`` object walks, raising rlimits, and importing sub-interpreter and
  C-API test modules.

What it cannot promise: the audit hook lives in the same interpreter as the
code, so a determined exploit (``ctypes`` pointer tricks, CPython bugs) can
switch it off; the OS layers are then the boundary, and where none is
available (old kernels, other OSes) only rlimits and the process boundary
remain. Reading world-readable files is allowed without landlock. For hostile
multi-tenant use, add a container or VM around the whole trainer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from verifiers.errors import ConfigError

LAYERS = ("namespaces", "landlock", "seccomp", "audit")
"""Optional isolation layers (``layers=`` picks a subset; rlimits and the process boundary always apply)."""

FLOOD_FACTOR = 8
"""Output beyond ``FLOOD_FACTOR * max_output_bytes`` on one stream stops the process."""


@dataclass(frozen=True)
class SandboxResult:
    """What happened to one run. ``error`` is None only for a clean exit (code 0, nothing blocked)."""

    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    timed_out: bool = False
    error: str | None = None
    truncated: bool = False
    violations: tuple[str, ...] = ()
    layers: tuple[str, ...] = ()
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_text(self) -> str:
        """The run as one text for a model: stdout, then stderr, then ``Error: ...``."""
        parts = [s.rstrip("\n") for s in (self.stdout, self.stderr) if s.strip()]
        if self.error:
            parts.append(f"Error: {self.error}")
        return "\n".join(parts) or "(no output)"


@dataclass(frozen=True)
class _Settings:
    timeout_s: float
    memory_mb: int
    max_output_bytes: int
    cpu_time_s: int
    max_processes: int
    max_file_mb: int
    max_open_files: int
    python: str
    env: dict[str, str] = field(default_factory=dict)
    layers: frozenset[str] = frozenset(LAYERS)


def _settings(
    timeout_s: float,
    memory_mb: int,
    max_output_bytes: int,
    cpu_time_s: float | None,
    max_processes: int,
    max_file_mb: int,
    max_open_files: int,
    python: str | None,
    env: Mapping[str, str] | None,
    layers: Iterable[str] | None,
) -> _Settings:
    for name, value, low in (
        ("timeout_s", timeout_s, 0.01),
        ("memory_mb", memory_mb, 32),
        ("max_output_bytes", max_output_bytes, 1),
        ("max_processes", max_processes, 1),
        ("max_file_mb", max_file_mb, 1),
        ("max_open_files", max_open_files, 16),
        ("cpu_time_s", timeout_s if cpu_time_s is None else cpu_time_s, 0.01),
    ):
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not value >= low
            or not math.isfinite(value)
        ):
            raise ConfigError(f"sandbox {name} must be a number >= {low:g}, got {value!r}")
    chosen = frozenset(LAYERS if layers is None else layers)
    unknown = sorted(chosen - set(LAYERS))
    if unknown:
        raise ConfigError(f"unknown sandbox layer(s) {unknown}", hint=f"choose from {', '.join(LAYERS)}")
    # Default CPU limit: one second past the wall clock, so code that spins one core is always
    # reported as a wall-clock timeout (with both at 2 s, which fired first was a race); the CPU
    # limit still stops code that burns several cores at once.
    cpu = math.floor(timeout_s) + 1 if cpu_time_s is None else cpu_time_s
    return _Settings(
        timeout_s=float(timeout_s),
        memory_mb=int(memory_mb),
        max_output_bytes=int(max_output_bytes),
        cpu_time_s=max(1, math.ceil(cpu)),
        max_processes=int(max_processes),
        max_file_mb=int(max_file_mb),
        max_open_files=int(max_open_files),
        python=python or sys.executable,
        env={str(k): str(v) for k, v in (env or {}).items()},
        layers=chosen,
    )


async def arun_python(
    code: str,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    max_output_bytes: int = 16384,
    *,
    cpu_time_s: float | None = None,
    max_processes: int = 64,
    max_file_mb: int = 16,
    max_open_files: int = 64,
    python: str | None = None,
    env: Mapping[str, str] | None = None,
    layers: Iterable[str] | None = None,
) -> SandboxResult:
    """Run ``code`` in the sandbox (see the module docstring) and return what happened.

    Args:
        code: Python source, run as ``__main__`` from ``main.py`` in the work dir.
        timeout_s: wall-clock limit; the process group is killed after it.
        memory_mb: address-space limit (``RLIMIT_AS``).
        max_output_bytes: bytes kept of stdout and of stderr each.
        cpu_time_s: CPU-seconds limit, rounded up (default: ``timeout_s`` rounded down, plus one,
            so a single busy core times out on the wall clock first).
        max_processes: ``RLIMIT_NPROC`` (threads count too; ignored by Linux for root).
        max_file_mb: largest file the code may write (``RLIMIT_FSIZE``).
        max_open_files: ``RLIMIT_NOFILE``.
        python: interpreter to run (default: this one, so its packages are importable).
        env: extra environment variables for the child (nothing else is inherited).
        layers: optional layers to use, a subset of :data:`LAYERS` (default: all available).

    Raises:
        ConfigError: a limit is not a valid number, or a layer name is unknown.
    """
    settings = _settings(
        timeout_s,
        memory_mb,
        max_output_bytes,
        cpu_time_s,
        max_processes,
        max_file_mb,
        max_open_files,
        python,
        env,
        layers,
    )
    start = time.monotonic()
    try:
        result = await _run(code, settings)
    except asyncio.CancelledError:
        raise
    except Exception as err:  # the sandbox itself failed (e.g. no interpreter): still a value
        result = SandboxResult(error=f"sandbox failed to run the code: {type(err).__name__}: {err}")
    return dataclasses.replace(result, duration_s=round(time.monotonic() - start, 4))


def run_python(
    code: str, timeout_s: float = 5.0, memory_mb: int = 512, max_output_bytes: int = 16384, **options: Any
) -> SandboxResult:
    """Blocking :func:`arun_python` (same arguments); safe to call from inside a running event loop."""
    coro = arun_python(code, timeout_s, memory_mb, max_output_bytes, **options)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    # A loop runs in this thread: block this thread on a private loop in another one.
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="vf-sandbox") as pool:
        return pool.submit(asyncio.run, coro).result()


# -- the child -------------------------------------------------------------------

CHILD_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_child.py")
"""The child process's program (standard library only, so any interpreter runs it)."""


def _child_command(settings: _Settings, tmp: str, chan: int) -> list[str]:
    config = {
        "tmp": tmp,
        "chan": chan,
        "layers": sorted(settings.layers - {"namespaces"}),
        "rlimits": [
            ["RLIMIT_CPU", settings.cpu_time_s, settings.cpu_time_s + 1],
            ["RLIMIT_AS", settings.memory_mb << 20, settings.memory_mb << 20],
            ["RLIMIT_NPROC", settings.max_processes, settings.max_processes],
            ["RLIMIT_FSIZE", settings.max_file_mb << 20, settings.max_file_mb << 20],
            ["RLIMIT_NOFILE", settings.max_open_files, settings.max_open_files],
            ["RLIMIT_CORE", 0, 0],
        ],
    }
    # -I keeps the script's folder (and the user's site-packages) off sys.path.
    return [settings.python, "-I", "-B", "-u", "-X", "utf8", CHILD_SCRIPT, json.dumps(config)]


def _child_env(settings: _Settings, tmp: str) -> dict[str, str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": tmp,
        "TMPDIR": tmp,
        "LANG": "C.UTF-8",
        # One thread per BLAS library and few malloc arenas: each would count
        # against RLIMIT_NPROC and reserve address space under RLIMIT_AS.
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MALLOC_ARENA_MAX": "2",
    }
    env.update(settings.env)
    return env


# -- namespaces ------------------------------------------------------------------

_NS_CANDIDATES = (
    (("--net", "--pid", "--fork", "--kill-child", "--mount-proc"), ("netns", "pidns", "procns")),
    (("--net", "--pid", "--fork", "--kill-child"), ("netns", "pidns")),
    (("--net",), ("netns",)),
)
_ns_cache: dict[tuple[str, int], tuple[list[str], tuple[str, ...]]] = {}
_ns_lock = threading.Lock()


def namespace_prefix(python: str) -> tuple[list[str], tuple[str, ...]]:
    """The ``unshare ...`` command prefix that works here for ``python``, and the layers it adds.

    Probed once per interpreter (each candidate runs ``python -c pass``), most
    isolating first; ``([], ())`` where ``unshare`` is missing or refused.
    """
    key = (python, os.geteuid())
    with _ns_lock:
        if key in _ns_cache:
            return _ns_cache[key]
        unshare = shutil.which("unshare")
        found: tuple[list[str], tuple[str, ...]] = ([], ())
        user = () if os.geteuid() == 0 else ("--user", "--map-root-user")
        for flags, names in _NS_CANDIDATES if unshare and sys.platform == "linux" else ():
            prefix = [unshare, *user, *flags, "--"]
            try:
                probe = subprocess.run(
                    [*prefix, python, "-I", "-c", "pass"],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    timeout=10,
                    start_new_session=True,
                )
            except (OSError, subprocess.SubprocessError):
                continue
            if probe.returncode == 0:
                found = (prefix, names + (("userns",) if user else ()))
                break
        _ns_cache[key] = found
        return found


# -- the parent side of one run --------------------------------------------------


class _Stream:
    """Reads one pipe to EOF, keeping the first ``keep`` bytes; ``flooded`` once past ``limit``.

    It goes on reading (and dropping) after a flood: asyncio's ``Process.wait()`` returns only
    once every pipe has reached EOF, and a pipe nobody reads stays full, so the killed flooder's
    run waited out the 5 s bound on that wait instead of ending at once."""

    def __init__(self, reader: asyncio.StreamReader, keep: int, limit: int, flood: asyncio.Event):
        self.reader, self.keep, self.limit, self.flood = reader, keep, limit, flood
        self.data = bytearray()
        self.total = 0

    async def pump(self) -> None:
        while True:
            chunk = await self.reader.read(65536)
            if not chunk:
                return
            room = self.keep - len(self.data)
            if room > 0:
                self.data += chunk[:room]
            self.total += len(chunk)
            if self.total > self.limit:
                self.flood.set()

    def text(self) -> str:
        text = self.data.decode("utf-8", errors="replace")
        if self.total > self.keep:
            text += f"\n[... output truncated: {self.total - self.keep}+ more bytes]\n"
        return text


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    # The group takes stragglers of the session; proc.kill() the leader in case
    # it left the group (os.setsid) before the audit hook was in place.
    for kill in (lambda: os.killpg(proc.pid, signal.SIGKILL), proc.kill):
        with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
            kill()


def _read_channel(fd: int) -> list[str]:
    os.set_blocking(fd, False)
    data = b""
    with contextlib.suppress(BlockingIOError, OSError):
        while len(data) < 65536:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
    return data.decode("utf-8", errors="replace").splitlines()


def _remove_tree(path: str) -> None:
    def retry(func, target, _exc):  # code may have chmod-ed its files read-only
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(target) or target, 0o700)
            os.chmod(target, 0o700)
            func(target)

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=retry)
    else:
        shutil.rmtree(path, onerror=retry)


async def _run(code: str, settings: _Settings) -> SandboxResult:
    tmp = tempfile.mkdtemp(prefix="vf-sandbox-")
    chan_r = chan_w = -1
    proc = None
    tasks: list[asyncio.Future] = []
    try:
        # The side channel: the child reports active layers, violations and limit hits on it.
        chan_r, chan_w = os.pipe()
        with open(os.path.join(tmp, "main.py"), "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(code)
        prefix, ns_layers = [], ()
        if "namespaces" in settings.layers:
            prefix, ns_layers = await asyncio.to_thread(namespace_prefix, settings.python)
        proc = await asyncio.create_subprocess_exec(
            *prefix,
            *_child_command(settings, tmp, chan_w),
            stdin=asyncio.subprocess.PIPE,  # never written: its EOF tells the child we are gone
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=tmp,
            env=_child_env(settings, tmp),
            pass_fds=(chan_w,),
            start_new_session=True,
        )
        os.close(chan_w)
        chan_w = -1
        flood = asyncio.Event()
        limit = settings.max_output_bytes * FLOOD_FACTOR
        streams = [_Stream(r, settings.max_output_bytes, limit, flood) for r in (proc.stdout, proc.stderr)]
        pumps = [asyncio.ensure_future(s.pump()) for s in streams]
        waiter = asyncio.ensure_future(proc.wait())
        flooded = asyncio.ensure_future(flood.wait())
        tasks = [*pumps, waiter, flooded]
        done, _ = await asyncio.wait(
            {waiter, flooded}, timeout=settings.timeout_s, return_when="FIRST_COMPLETED"
        )
        timed_out = not done
        flooded_out = flooded in done and waiter not in done
        flooded.cancel()
        _kill_group(proc)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(waiter, 5)
        # Whatever is still in the pipes arrives at EOF; a holder we could not kill must not hang us.
        await asyncio.wait(pumps, timeout=1.0)
        notes = _read_channel(chan_r)
        return _result(settings, proc.returncode, streams, notes, ns_layers, timed_out, flooded_out)
    finally:
        for task in tasks:
            task.cancel()
        if proc is not None:
            if proc.returncode is None:
                _kill_group(proc)
            if proc.stdin is not None:
                proc.stdin.close()
            # Close the process transport (and its pipes) now, on this running loop: asyncio closes
            # it only once every pipe has reached EOF, and a pipe still open here (the code killed
            # mid-write, a holder we could not kill) was otherwise closed by the transport's
            # __del__ after the loop had closed: "Event loop is closed", an unraisable exception.
            transport = getattr(proc, "_transport", None)  # asyncio has no public close for it
            if transport is not None:
                transport.close()
        for fd in (chan_r, chan_w):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        await asyncio.to_thread(_remove_tree, tmp)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def _result(
    settings: _Settings,
    code: int | None,
    streams: list[_Stream],
    notes: list[str],
    ns_layers: tuple[str, ...],
    timed_out: bool,
    flooded: bool,
) -> SandboxResult:
    layers = list(ns_layers) + [n[2:] for n in notes if n.startswith("L ")]
    violations = tuple(dict.fromkeys(n[2:] for n in notes if n.startswith("V ")))
    events = {n[2:] for n in notes if n.startswith("E ")}
    stdout, stderr = (s.text() for s in streams)
    if timed_out:
        error = f"timed out after {settings.timeout_s:g}s (wall clock); the process was killed"
    elif flooded:
        error = f"output limit exceeded (more than {settings.max_output_bytes * FLOOD_FACTOR} bytes); the process was killed"
    elif "cpu" in events or code in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
        error = f"CPU time limit exceeded ({settings.cpu_time_s}s)"
    elif "memory" in events:
        error = f"memory limit exceeded ({settings.memory_mb} MB)"
    elif violations:
        more = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
        error = f"blocked by the sandbox: {violations[0]}{more}"
    elif code is not None and code < 0:
        error = f"killed by signal {_signal_name(-code)}"
    elif code:
        last = next((line for line in reversed(stderr.splitlines()) if line.strip()), "")
        error = f"exited with code {code}" + (f": {last.strip()[:300]}" if last else "")
    else:
        error = None
    return SandboxResult(
        stdout=stdout,
        stderr=stderr,
        exit_code=code,
        timed_out=timed_out,
        error=error,
        truncated=any(s.total > s.keep for s in streams),
        violations=violations,
        layers=tuple(dict.fromkeys(["process", *layers])),
    )

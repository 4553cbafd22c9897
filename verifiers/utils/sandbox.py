"""Run untrusted Python (a model's tool call) in a separate, locked-down process.

``run_python(code)`` / ``await arun_python(code)`` return a :class:`SandboxResult`;
they never raise because of what the code did (timeouts, crashes, blocked
operations are values). Layers, outermost first; each one that is not
available on this machine is skipped and ``SandboxResult.layers`` lists those
that were active:

- **process** (always): ``python -I -B`` in its own session and process group,
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
import inspect
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
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
    cpu = timeout_s if cpu_time_s is None else cpu_time_s
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
        cpu_time_s: CPU-seconds limit (default: ``timeout_s``, rounded up).
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


def _child_main(cfg: dict) -> None:  # pragma: no cover - runs only inside the sandboxed process
    """The sandboxed process: limits, OS layers, audit hook, then the code. Self-contained (see ``_child_source``)."""
    import _posixsubprocess
    import _signal
    import builtins
    import ctypes
    import os
    import posix
    import resource
    import signal
    import site
    import stat
    import struct
    import sys
    import sysconfig
    import threading
    import traceback
    import types

    chan, tmp = cfg["chan"], os.path.realpath(cfg["tmp"])
    layers = set(cfg["layers"])
    write = posix.write

    def note(kind: str, text: str) -> None:
        # One line per note on the side channel: L(ayer), V(iolation), E(vent), W(arning).
        try:
            write(chan, (kind + " " + text.replace("\n", " ")[:300] + "\n").encode("utf-8", "replace"))
        except OSError:
            pass

    for name, soft, hard in cfg["rlimits"]:
        which = getattr(resource, name)
        try:
            current = resource.getrlimit(which)[1]
            if current != resource.RLIM_INFINITY:  # an unprivileged process cannot raise a hard limit
                soft, hard = min(soft, current), min(hard, current)
            resource.setrlimit(which, (soft, hard))
        except (ValueError, OSError) as err:
            note("W", f"{name}: {err}")

    def on_cpu_limit(signum, frame):
        note("E", "cpu")
        os._exit(152)

    signal.signal(signal.SIGXCPU, on_cpu_limit)
    # The parent's stdin pipe becomes the watchdog's; the code reads /dev/null.
    watch = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    ulong = ctypes.c_ulong

    def fail(what: str) -> OSError:
        errno = ctypes.get_errno()
        return OSError(errno, f"{what}: {os.strerror(errno)}")

    def read_roots() -> set[str]:
        roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, tmp}
        roots.update(site.getsitepackages() + list(sysconfig.get_paths().values()))
        roots.update(
            "/usr/lib /usr/lib64 /usr/lib32 /usr/share /lib /lib64 /lib32 /etc/ld.so.cache /etc/localtime "
            "/dev/null /dev/zero /dev/urandom /dev/random /proc/self /proc/cpuinfo /proc/meminfo "
            "/sys/devices/system/cpu".split()
        )
        return {os.path.realpath(r) for r in roots if r}

    def landlock() -> None:
        abi = libc.syscall(ulong(444), None, ulong(0), ulong(1))  # landlock_create_ruleset(VERSION)
        if abi < 1:
            raise fail("landlock unavailable")
        fs = sum(1 << bit for bit in range(1, 13))  # every file-system right but EXECUTE
        fs |= (1 << 13 if abi >= 2 else 0) | (1 << 14 if abi >= 3 else 0)  # REFER, TRUNCATE
        file_rights, read = (1 << 1) | (1 << 2) | (1 << 14), (1 << 2) | (1 << 3)
        attr = ctypes.create_string_buffer(struct.pack("QQQ", fs, 3 if abi >= 4 else 0, 3 if abi >= 6 else 0))
        rules = libc.syscall(ulong(444), attr, ulong(8 if abi < 4 else 16 if abi < 6 else 24), ulong(0))
        if rules < 0:
            raise fail("landlock_create_ruleset")

        def allow(path: str, rights: int) -> None:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                return
            try:
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    rights &= file_rights
                rule = ctypes.create_string_buffer(struct.pack("=Qi", rights & fs, fd))
                if libc.syscall(ulong(445), ulong(rules), ulong(1), rule, ulong(0)) != 0:
                    raise fail(f"landlock_add_rule {path}")
            finally:
                os.close(fd)

        roots = read_roots()
        allow(tmp, fs)
        allow(os.devnull, file_rights)
        for root in roots:
            allow(root, read)
        if libc.prctl(38, ulong(1), ulong(0), ulong(0), ulong(0)) != 0:  # PR_SET_NO_NEW_PRIVS
            raise fail("no_new_privs")
        if libc.syscall(ulong(446), ulong(rules), ulong(0)) != 0:
            raise fail("landlock_restrict_self")
        os.close(rules)
        # Unreadable entries (an editable install's source tree) would only make imports noisy.
        sys.path[:] = [
            p for p in sys.path if any((os.path.realpath(p) + "/").startswith(r + "/") for r in roots)
        ]

    def seccomp() -> None:
        machine = os.uname().machine
        if machine == "x86_64":
            arch, clone, clone3, kill, tgkill = 0xC000003E, 56, 435, 62, 234
            deny = "57 58 59 322 41 101 310 311 425 426 427 272 308 165 166 155 161 321 438 424 200 129 297 246 320 175 313 176 169 167 168 250 248 249 323 298"
        elif machine == "aarch64":
            arch, clone, clone3, kill, tgkill = 0xC00000B7, 220, 435, 129, 131
            deny = "221 281 198 117 270 271 425 426 427 97 268 40 39 41 51 280 438 424 130 138 240 104 294 105 273 106 142 224 225 219 217 218 282 241"
        else:
            raise OSError(f"no seccomp syscall table for {machine}")
        ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
        allow, eperm, enosys = 0x7FFF0000, 0x00050001, 0x00050026
        me = os.getpid()
        # (code, jump if true, jump if false, k): arch check, then the syscall number.
        prog = [(ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, eperm), (ld, 0, 0, 0)]
        if machine == "x86_64":
            prog += [(jge, 0, 1, 0x40000000), (ret, 0, 0, eperm)]  # the x32 ABI
        for nr in map(int, deny.split()):
            prog += [(jeq, 0, 1, nr), (ret, 0, 0, eperm)]
        prog += [(jeq, 0, 1, clone3), (ret, 0, 0, enosys)]  # libc then falls back to clone
        # clone only for threads; kill/tgkill only aimed at this process (args[0] at offset 16).
        for nr, test in ((clone, (jset, 0, 1, 0x10000)), (kill, (jeq, 0, 1, me)), (tgkill, (jeq, 0, 1, me))):
            prog += [(jeq, 0, 4, nr), (ld, 0, 0, 16), test, (ret, 0, 0, allow), (ret, 0, 0, eperm)]
        prog.append((ret, 0, 0, allow))
        code = ctypes.create_string_buffer(b"".join(struct.pack("=HBBI", *op) for op in prog))
        fprog = ctypes.create_string_buffer(struct.pack("@HP", len(prog), ctypes.addressof(code)))
        if libc.prctl(38, ulong(1), ulong(0), ulong(0), ulong(0)) != 0:
            raise fail("no_new_privs")
        if libc.prctl(22, ulong(2), fprog, ulong(0), ulong(0)) != 0:  # PR_SET_SECCOMP, FILTER
            raise fail("seccomp")

    for name, install in (("landlock", landlock), ("seccomp", seccomp)):
        if name in layers and sys.platform.startswith("linux"):  # raw syscall numbers: Linux only
            try:
                install()
                note("L", name)
            except Exception as err:
                note("W", f"{name}: {err}")

    def watchdog() -> None:
        try:
            os.read(watch, 1)
        except OSError:
            pass
        os._exit(137)  # the parent closed our stdin or died

    try:
        threading.Thread(target=watchdog, name="vf-sandbox-watchdog", daemon=True).start()
    except RuntimeError as err:  # RLIMIT_NPROC already reached by this uid
        note("W", f"watchdog: {err}")

    with open("main.py", encoding="utf-8", errors="replace") as f:
        source = f.read()
    main = types.ModuleType("__main__")
    main.__file__ = "main.py"
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    sys.argv = ["main.py"]
    try:
        own_proc = os.readlink("/proc/self")
    except OSError:
        own_proc = ""

    def make_hook():
        # Everything the hook calls is bound here: code can monkeypatch modules,
        # not these references. It never calls code's objects except __fspath__.
        lstat, readlink, getcwd, stat_, fspath = (
            posix.lstat,
            posix.readlink,
            posix.getcwd,
            posix.stat,
            posix.fspath,
        )
        str_, bytes_, int_, type_, len_ = str, bytes, int, type, len
        perm, imp = PermissionError, ImportError
        writing = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
        kind, link, directory = 0o170000, 0o120000, 0o040000
        tmp_slash = tmp + "/"
        procs, sigs, net = (
            "process creation is blocked",
            "signals to other processes are blocked",
            "network access is blocked",
        )
        blocked = dict.fromkeys(
            "os.fork os.forkpty os.posix_spawn os.spawn os.exec os.system subprocess.Popen os.startfile "
            "pty.spawn cpython.PyInterpreterState_New".split(),
            procs,
        )
        blocked.update(
            dict.fromkeys("os.kill os.killpg signal.pthread_kill signal.pidfd_send_signal".split(), sigs)
        )
        blocked.update(
            dict.fromkeys(
                "urllib.Request http.client.connect ftplib.connect smtplib.connect poplib.connect imaplib.open "
                "nntplib.connect telnetlib.Telnet.open webbrowser.open".split(),
                net,
            )
        )
        blocked.update(dict.fromkeys(["os.link", "os.symlink"], "creating links is blocked"))
        blocked.update(
            dict.fromkeys(["resource.setrlimit", "resource.prlimit"], "changing resource limits is blocked")
        )
        blocked.update(
            dict.fromkeys(
                ["gc.get_objects", "gc.get_referrers", "gc.get_referents"],
                "walking the interpreter's objects is blocked",
            )
        )
        path_events = dict.fromkeys(
            "os.mkdir os.rmdir os.remove os.chmod os.chown os.utime os.truncate os.chdir os.setxattr "
            "os.removexattr os.chflags os.lchflags".split(),
            (0,),
        )
        path_events["os.rename"] = (0, 1)
        # Sub-interpreters get no audit hook; C-API test modules poke memory; the
        # last three are loaded already, so an import means a fresh, unpatched copy.
        forbidden = frozenset(
            "_xxsubinterpreters _xxinterpchannels _interpreters _interpchannels _interpqueues "
            "concurrent.interpreters _testcapi _testinternalcapi _testmultiphase _testsinglephase "
            "_testimportmultiple _testbuffer _ctypes_test cffi _cffi_backend _posixsubprocess _signal _ctypes".split()
        )
        reported = [0]

        def deny(message, exc=perm):
            if reported[0] < 20:
                reported[0] += 1
                note("V", message)
            raise exc("sandbox: " + message)

        def resolve(path):
            """Absolute path with every symlink resolved (None if impossible)."""
            if type_(path) is not str_ and type_(path) is not bytes_:
                try:
                    path = fspath(path)
                except Exception:
                    return None
            if type_(path) is bytes_:
                path = path.decode("utf-8", "surrogateescape")
            if type_(path) is not str_:
                return None
            if not path.startswith("/"):
                path = getcwd() + "/" + path
            pending = path.split("/")
            pending.reverse()
            out, hops = "", 0
            while pending:
                part = pending.pop()
                if part == "" or part == ".":
                    continue
                if part == "..":
                    out = out[: out.rfind("/")] if out else ""
                    continue
                candidate = out + "/" + part
                try:
                    mode = lstat(candidate).st_mode
                except (OSError, ValueError):
                    out = candidate
                    continue
                if mode & kind != link:
                    out = candidate
                    continue
                hops += 1
                try:
                    target = readlink(candidate)
                except (OSError, ValueError):
                    return None
                if hops > 40:
                    return None
                if target.startswith("/"):
                    out = ""
                more = target.split("/")
                more.reverse()
                pending.extend(more)
            return out or "/"

        def inside(real):
            return real is not None and (real == tmp or real.startswith(tmp_slash))

        def hook(event, args):
            message = blocked.get(event)
            if message is not None:
                deny(message + " (" + event + ")")
            if event == "open":
                path = args[0]
                mode = args[1] if len_(args) > 1 else None
                flags = args[2] if len_(args) > 2 else 0
                if type_(path) is int_:
                    return
                real = resolve(path)
                if real is None:
                    deny("a path the sandbox cannot resolve was blocked")
                if type_(flags) is int_ and flags & writing:
                    if not inside(real) and real != "/dev/null":
                        deny("writing outside the sandbox directory is blocked: " + real)
                elif mode is None and not inside(real):
                    # os.open: a directory fd outside could anchor dir_fd-relative writes.
                    try:
                        is_dir = stat_(real).st_mode & kind == directory
                    except (OSError, ValueError):
                        is_dir = False
                    if is_dir:
                        deny("os.open of a directory outside the sandbox is blocked: " + real)
                if real.startswith("/proc/"):
                    first = real[6:].split("/", 1)[0]
                    if first.isdigit() and first != own_proc:
                        deny("reading other processes' /proc entries is blocked: " + real)
                return
            if event == "import":
                name = args[0]
                if type_(name) is str_ and (name in forbidden or name.split(".")[0] in forbidden):
                    deny("importing " + name + " is blocked", imp)
                return
            where = path_events.get(event)
            if where is not None:
                for i in where:
                    path = args[i] if i < len_(args) else None
                    if type_(path) is int_ and event != "os.chdir":
                        continue  # an fd the code opened, so already checked
                    real = resolve(path)
                    if not inside(real):
                        deny(event + " outside the sandbox directory is blocked: " + str_(real))
                return
            if event.startswith("socket."):
                deny(net + " (" + event + ")")
            if event.startswith("ctypes."):
                deny("ctypes memory and library access is blocked (" + event + ")")

        return hook

    if "audit" in layers:

        def no_processes(*args, **kwargs):
            note("V", "process creation is blocked (_posixsubprocess.fork_exec)")
            raise PermissionError("sandbox: process creation is blocked")

        def no_signals(*args, **kwargs):
            note("V", "signals to other processes are blocked (pidfd_send_signal)")
            raise PermissionError("sandbox: signals to other processes are blocked")

        # Entry points that raise no audit event of their own.
        _posixsubprocess.fork_exec = no_processes
        for module in (_signal, signal):
            if hasattr(module, "pidfd_send_signal"):
                module.pidfd_send_signal = no_signals
        sys.addaudithook(make_hook())
        note("L", "audit")

    status = 0
    try:
        exec(compile(source, "main.py", "exec"), main.__dict__)
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            status = exit_.code or 0
        else:
            print(exit_.code, file=sys.stderr)
            status = 1
    except MemoryError:
        note("E", "memory")
        print("MemoryError: the sandbox memory limit was reached", file=sys.stderr)
        status = 1
    except BaseException as err:  # the code's own failure: print it as Python would, minus our frames
        frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename != "<string>"]
        lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames)]
        sys.stderr.write("".join(lines + traceback.format_exception_only(type(err), err)))
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(status & 0xFF)


def _child_source() -> str:
    # The child runs _child_main's own source under `python -I -c`, so it needs
    # nothing importable but the standard library (any interpreter works).
    return textwrap.dedent(inspect.getsource(_child_main))


_CHILD_SOURCE: str | None = None


def _child_command(settings: _Settings, tmp: str, chan: int) -> list[str]:
    global _CHILD_SOURCE
    if _CHILD_SOURCE is None:
        _CHILD_SOURCE = _child_source()
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
    source = f"{_CHILD_SOURCE}\n_child_main({config!r})\n"
    return [settings.python, "-I", "-B", "-u", "-X", "utf8", "-c", source]


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
    """Reads one pipe to EOF, keeping the first ``keep`` bytes; ``flooded`` once past ``limit``."""

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
                return

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

"""The sandboxed process of :mod:`verifiers.envs.sandbox`: limits, OS layers, audit hook, then the code.

The parent runs ``python -I -B -u -X utf8 .../sandbox_child.py CONFIG`` in the work dir
(which holds ``main.py``); ``CONFIG`` is JSON: ``tmp`` the work dir, ``chan`` the side-channel
fd, ``layers`` the in-process layers (``landlock``, ``seccomp``, ``audit``), ``rlimits``
``[name, soft, hard]`` triples. Standard library only, so any interpreter the caller names
runs it; ``-I`` keeps this folder off ``sys.path`` (``verifiers/utils/logging.py`` would
shadow ``logging``). Nothing runs on import, so the tests check the pieces one by one.

Order matters: rlimits; landlock and seccomp (they need ``ctypes``, which the audit hook
blocks); the watchdog thread; the audit hook last, right before the code. The side
channel gets one line per note: ``L name`` (a layer is active), ``V text`` (a blocked
attempt), ``E cpu|memory`` (a limit was hit), ``W text`` (a warning).
"""

from __future__ import annotations

import _posixsubprocess
import _signal
import builtins
import ctypes
import json
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
from collections.abc import Callable, Iterable

Note = Callable[[str, str], None]
"""``note(kind, text)`` writes one line on the side channel."""

PROCS = "process creation is blocked"
SIGNALS = "signals to other processes are blocked"
NET = "network access is blocked"

BLOCKED_EVENTS: dict[str, str] = {
    event: reason
    for events, reason in (
        (
            "os.fork os.forkpty os.posix_spawn os.spawn os.exec os.system subprocess.Popen os.startfile "
            "pty.spawn cpython.PyInterpreterState_New",
            PROCS,
        ),
        ("os.kill os.killpg signal.pthread_kill signal.pidfd_send_signal", SIGNALS),
        (
            "urllib.Request http.client.connect ftplib.connect smtplib.connect poplib.connect imaplib.open "
            "nntplib.connect telnetlib.Telnet.open webbrowser.open",
            NET,
        ),
        ("os.link os.symlink", "creating links is blocked"),
        ("resource.setrlimit resource.prlimit", "changing resource limits is blocked"),
        ("gc.get_objects gc.get_referrers gc.get_referents", "walking the interpreter's objects is blocked"),
    )
    for event in events.split()
}
"""Audit events refused outright, with the reason reported for each."""

PATH_EVENTS: dict[str, tuple[int, ...]] = dict.fromkeys(
    "os.mkdir os.rmdir os.remove os.chmod os.chown os.utime os.truncate os.chdir os.setxattr "
    "os.removexattr os.chflags os.lchflags".split(),
    (0,),
) | {"os.rename": (0, 1)}
"""Audit events allowed only inside the work dir: the event and which of its arguments are paths."""

# Sub-interpreters get no audit hook; C-API test modules poke memory; the last
# three are loaded already, so an import means a fresh, unpatched copy.
FORBIDDEN_IMPORTS = frozenset(
    "_xxsubinterpreters _xxinterpchannels _interpreters _interpchannels _interpqueues "
    "concurrent.interpreters _testcapi _testinternalcapi _testmultiphase _testsinglephase "
    "_testimportmultiple _testbuffer _ctypes_test cffi _cffi_backend _posixsubprocess _signal _ctypes".split()
)

MAX_REPORTED = 20
"""Violations reported on the side channel per run (the rest are still refused)."""

# Linux syscall and prctl numbers (the landlock ones are the same on x86_64 and aarch64).
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS, SECCOMP_MODE_FILTER = 22, 38, 2

# seccomp, per machine: (audit arch, clone, clone3, kill, tgkill), then the syscalls refused outright.
SECCOMP_ARCH = {"x86_64": (0xC000003E, 56, 435, 62, 234), "aarch64": (0xC00000B7, 220, 435, 129, 131)}
SECCOMP_DENIED = {
    "x86_64": "57 58 59 322 41 101 310 311 425 426 427 272 308 165 166 155 161 321 438 424 200 129 297 246 "
    "320 175 313 176 169 167 168 250 248 249 323 298",
    "aarch64": "221 281 198 117 270 271 425 426 427 97 268 40 39 41 51 280 438 424 130 138 240 104 294 105 "
    "273 106 142 224 225 219 217 218 282 241",
}
BPF_LD, BPF_JEQ, BPF_JGE, BPF_JSET, BPF_RET = 0x20, 0x15, 0x35, 0x45, 0x06
SECCOMP_ALLOW, SECCOMP_EPERM, SECCOMP_ENOSYS = 0x7FFF0000, 0x00050001, 0x00050026
CLONE_THREAD = 0x10000


def make_note(chan: int) -> Note:
    write = posix.write

    def note(kind: str, text: str) -> None:
        try:
            write(chan, (kind + " " + text.replace("\n", " ")[:300] + "\n").encode("utf-8", "replace"))
        except OSError:
            pass

    return note


def apply_rlimits(rlimits: Iterable[tuple[str, int, int]], note: Note) -> None:
    for name, soft, hard in rlimits:
        which = getattr(resource, name)
        try:
            current = resource.getrlimit(which)[1]
            if current != resource.RLIM_INFINITY:  # an unprivileged process cannot raise a hard limit
                soft, hard = min(soft, current), min(hard, current)
            resource.setrlimit(which, (soft, hard))
        except (ValueError, OSError) as err:
            note("W", f"{name}: {err}")


def read_roots(tmp: str) -> set[str]:
    """What stays readable under landlock: the Python installation, system libraries, the work dir."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, tmp}
    roots.update(site.getsitepackages() + list(sysconfig.get_paths().values()))
    roots.update(
        "/usr/lib /usr/lib64 /usr/lib32 /usr/share /lib /lib64 /lib32 /etc/ld.so.cache /etc/localtime "
        "/dev/null /dev/zero /dev/urandom /dev/random /proc/self /proc/cpuinfo /proc/meminfo "
        "/sys/devices/system/cpu".split()
    )
    return {os.path.realpath(r) for r in roots if r}


def readable_paths(paths: Iterable[str], roots: set[str]) -> list[str]:
    """The entries of ``paths`` under one of ``roots`` (others would only make imports noisy)."""
    return [p for p in paths if any((os.path.realpath(p) + "/").startswith(r + "/") for r in roots)]


def _fail(what: str) -> OSError:
    errno = ctypes.get_errno()
    return OSError(errno, f"{what}: {os.strerror(errno)}")


def _no_new_privs(libc: ctypes.CDLL) -> None:
    ulong = ctypes.c_ulong
    if libc.prctl(PR_SET_NO_NEW_PRIVS, ulong(1), ulong(0), ulong(0), ulong(0)) != 0:
        raise _fail("no_new_privs")


def landlock_rights(abi: int) -> tuple[int, int, int]:
    """``(handled, file, read)`` file-system rights for landlock ABI ``abi``.

    ``handled``: every right but EXECUTE (plus REFER from ABI 2, TRUNCATE from 3);
    ``file``: those that apply to a regular file; ``read``: READ_FILE and READ_DIR.
    """
    handled = sum(1 << bit for bit in range(1, 13))
    handled |= (1 << 13 if abi >= 2 else 0) | (1 << 14 if abi >= 3 else 0)
    return handled, (1 << 1) | (1 << 2) | (1 << 14), (1 << 2) | (1 << 3)


def landlock_ruleset_attr(abi: int) -> tuple[bytes, int]:
    """``landlock_ruleset_attr`` and its size for ``abi``: TCP denied from ABI 4, outside signals from 6."""
    attr = struct.pack("QQQ", landlock_rights(abi)[0], 3 if abi >= 4 else 0, 3 if abi >= 6 else 0)
    return attr, 8 if abi < 4 else 16 if abi < 6 else 24


def install_landlock(libc: ctypes.CDLL, tmp: str) -> None:
    """Work dir and ``/dev/null`` writable, :func:`read_roots` readable, nothing else."""
    ulong = ctypes.c_ulong
    abi = libc.syscall(ulong(SYS_LANDLOCK_CREATE_RULESET), None, ulong(0), ulong(1))  # the version
    if abi < 1:
        raise _fail("landlock unavailable")
    handled, file_rights, read = landlock_rights(abi)
    attr, size = landlock_ruleset_attr(abi)
    rules = libc.syscall(
        ulong(SYS_LANDLOCK_CREATE_RULESET), ctypes.create_string_buffer(attr), ulong(size), ulong(0)
    )
    if rules < 0:
        raise _fail("landlock_create_ruleset")

    def allow(path: str, rights: int) -> None:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return
        try:
            if not stat.S_ISDIR(os.fstat(fd).st_mode):
                rights &= file_rights
            rule = ctypes.create_string_buffer(struct.pack("=Qi", rights & handled, fd))
            if libc.syscall(ulong(SYS_LANDLOCK_ADD_RULE), ulong(rules), ulong(1), rule, ulong(0)) != 0:
                raise _fail(f"landlock_add_rule {path}")
        finally:
            os.close(fd)

    roots = read_roots(tmp)
    allow(tmp, handled)
    allow(os.devnull, file_rights)
    for root in roots:
        allow(root, read)
    _no_new_privs(libc)
    if libc.syscall(ulong(SYS_LANDLOCK_RESTRICT_SELF), ulong(rules), ulong(0)) != 0:
        raise _fail("landlock_restrict_self")
    os.close(rules)
    sys.path[:] = readable_paths(sys.path, roots)


def seccomp_program(machine: str, pid: int) -> list[tuple[int, int, int, int]]:
    """The classic-BPF seccomp filter for ``machine``, as ``(code, jump if true, jump if false, k)``.

    Wrong architecture and the denied syscalls: EPERM; ``clone3``: ENOSYS (libc
    then falls back to ``clone``); ``clone`` only with ``CLONE_THREAD``; ``kill``
    and ``tgkill`` only aimed at ``pid``; everything else allowed.
    """
    if machine not in SECCOMP_ARCH:
        raise OSError(f"no seccomp syscall table for {machine}")
    arch, clone, clone3, kill, tgkill = SECCOMP_ARCH[machine]
    ld, jeq, ret, allow, eperm = BPF_LD, BPF_JEQ, BPF_RET, SECCOMP_ALLOW, SECCOMP_EPERM
    # seccomp_data: nr at offset 0, arch at 4, args[0] at 16.
    prog = [(ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, eperm), (ld, 0, 0, 0)]
    if machine == "x86_64":
        prog += [(BPF_JGE, 0, 1, 0x40000000), (ret, 0, 0, eperm)]  # the x32 ABI
    for nr in map(int, SECCOMP_DENIED[machine].split()):
        prog += [(jeq, 0, 1, nr), (ret, 0, 0, eperm)]
    prog += [(jeq, 0, 1, clone3), (ret, 0, 0, SECCOMP_ENOSYS)]
    for nr, test in (
        (clone, (BPF_JSET, 0, 1, CLONE_THREAD)),
        (kill, (jeq, 0, 1, pid)),
        (tgkill, (jeq, 0, 1, pid)),
    ):
        prog += [(jeq, 0, 4, nr), (ld, 0, 0, 16), test, (ret, 0, 0, allow), (ret, 0, 0, eperm)]
    prog.append((ret, 0, 0, allow))
    return prog


def install_seccomp(libc: ctypes.CDLL, prog: list[tuple[int, int, int, int]]) -> None:
    ulong = ctypes.c_ulong
    code = ctypes.create_string_buffer(b"".join(struct.pack("=HBBI", *op) for op in prog))
    fprog = ctypes.create_string_buffer(struct.pack("@HP", len(prog), ctypes.addressof(code)))
    _no_new_privs(libc)
    if libc.prctl(PR_SET_SECCOMP, ulong(SECCOMP_MODE_FILTER), fprog, ulong(0), ulong(0)) != 0:
        raise _fail("seccomp")


def make_resolver() -> Callable[[object], str | None]:
    """``resolve(path)``: the absolute path with every symlink resolved (None if impossible).

    Like ``os.path.realpath`` but built from references bound now, so code that
    monkeypatches ``os`` or ``posix`` later cannot change what it answers.
    """
    lstat, readlink, getcwd, fspath = posix.lstat, posix.readlink, posix.getcwd, posix.fspath
    str_, bytes_, type_ = str, bytes, type
    kind, link = 0o170000, 0o120000

    def resolve(path):
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

    return resolve


def make_hook(tmp: str, own_proc: str, note: Note) -> Callable[[str, tuple], None]:
    """The audit hook: raise ``PermissionError`` (``ImportError`` for imports) and note each blocked attempt.

    Everything the hook calls is bound here: code can monkeypatch modules and
    this module's globals, not these references. It never calls code's objects
    except ``__fspath__``.
    """
    stat_ = posix.stat
    str_, int_, type_, len_ = str, int, type, len
    perm, imp = PermissionError, ImportError
    writing = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    kind, directory = 0o170000, 0o040000
    tmp_slash = tmp + "/"
    net = NET
    blocked, path_events, forbidden = dict(BLOCKED_EVENTS), dict(PATH_EVENTS), FORBIDDEN_IMPORTS
    resolve = make_resolver()
    reported, most = [0], MAX_REPORTED

    def deny(message, exc=perm):
        if reported[0] < most:
            reported[0] += 1
            note("V", message)
        raise exc("sandbox: " + message)

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


def block_unaudited_entry_points(note: Note) -> None:
    """Replace the entry points that raise no audit event of their own (process start, pidfd signals)."""

    def no_processes(*args, **kwargs):
        note("V", PROCS + " (_posixsubprocess.fork_exec)")
        raise PermissionError("sandbox: " + PROCS)

    def no_signals(*args, **kwargs):
        note("V", SIGNALS + " (pidfd_send_signal)")
        raise PermissionError("sandbox: " + SIGNALS)

    _posixsubprocess.fork_exec = no_processes
    for module in (_signal, signal):
        if hasattr(module, "pidfd_send_signal"):
            module.pidfd_send_signal = no_signals


def start_watchdog(watch: int, note: Note) -> None:
    """Exit as soon as ``watch`` (the parent's stdin pipe) closes: the parent is gone or gave up."""

    def watchdog() -> None:
        try:
            os.read(watch, 1)
        except OSError:
            pass
        os._exit(137)

    try:
        threading.Thread(target=watchdog, name="vf-sandbox-watchdog", daemon=True).start()
    except RuntimeError as err:  # RLIMIT_NPROC already reached by this uid
        note("W", f"watchdog: {err}")


def exit_status(err: SystemExit) -> int:
    """The status ``sys.exit(code)`` asks for, printing a non-int code as Python does."""
    if err.code is None or isinstance(err.code, int):
        return err.code or 0
    print(err.code, file=sys.stderr)
    return 1


def print_code_traceback(err: BaseException) -> None:
    """Print ``err`` as Python would, minus this file's frames."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename != __file__]
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames)]
    sys.stderr.write("".join(lines + traceback.format_exception_only(type(err), err)))


def main(argv: list[str]) -> None:  # pragma: no cover - runs only inside the sandboxed process
    cfg = json.loads(argv[1])
    tmp, layers = os.path.realpath(cfg["tmp"]), set(cfg["layers"])
    note = make_note(cfg["chan"])
    apply_rlimits(cfg["rlimits"], note)

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
    for name, install in (
        ("landlock", lambda: install_landlock(libc, tmp)),
        ("seccomp", lambda: install_seccomp(libc, seccomp_program(os.uname().machine, os.getpid()))),
    ):
        if name in layers and sys.platform.startswith("linux"):  # raw syscall numbers: Linux only
            try:
                install()
                note("L", name)
            except Exception as err:
                note("W", f"{name}: {err}")
    start_watchdog(watch, note)

    with open("main.py", encoding="utf-8", errors="replace") as f:
        source = f.read()
    module = types.ModuleType("__main__")
    module.__file__ = "main.py"
    module.__builtins__ = builtins
    sys.modules["__main__"] = module
    sys.argv = ["main.py"]
    try:
        own_proc = os.readlink("/proc/self")
    except OSError:
        own_proc = ""
    if "audit" in layers:
        block_unaudited_entry_points(note)
        sys.addaudithook(make_hook(tmp, own_proc, note))
        note("L", "audit")

    status = 0
    try:
        exec(compile(source, "main.py", "exec"), module.__dict__)
    except SystemExit as err:
        status = exit_status(err)
    except MemoryError:
        note("E", "memory")
        print("MemoryError: the sandbox memory limit was reached", file=sys.stderr)
        status = 1
    except BaseException as err:  # the code's own failure
        print_code_traceback(err)
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(status & 0xFF)


if __name__ == "__main__":
    main(sys.argv)

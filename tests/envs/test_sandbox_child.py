"""The sandbox child's pieces (verifiers/envs/sandbox_child.py), checked in this process.

tests/utils/test_sandbox.py runs the whole child against escape attempts; these tests
pin down the parts one by one: the seccomp program (run on a small BPF
interpreter), the landlock rights, the path resolver and the audit hook.
"""

from __future__ import annotations

import dis
import os
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox targets Linux")

if sys.platform.startswith("linux"):
    from verifiers.utils import sandbox
    from verifiers.utils import sandbox_child as child

ME, OTHER = 4242, 1


def run_bpf(prog, nr: int, arch: int, arg0: int = 0) -> int:
    """Run a classic-BPF seccomp program on one syscall; return the action."""
    data = {0: nr, 4: arch, 16: arg0}
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = prog[pc]
        assert 0 <= pc + 1 + max(jt, jf) <= len(prog), "a jump leaves the program"
        if code == child.BPF_LD:
            acc, pc = data[k], pc + 1
        elif code == child.BPF_RET:
            return k
        else:
            taken = {
                child.BPF_JEQ: acc == k,
                child.BPF_JGE: acc >= k,
                child.BPF_JSET: bool(acc & k),
            }[code]
            pc += 1 + (jt if taken else jf)


@pytest.mark.parametrize("machine", sorted(child.SECCOMP_ARCH) if sys.platform.startswith("linux") else [])
def test_seccomp_program(machine):
    prog = child.seccomp_program(machine, ME)
    arch, clone, clone3, kill, tgkill = child.SECCOMP_ARCH[machine]
    allow, eperm = child.SECCOMP_ALLOW, child.SECCOMP_EPERM
    assert run_bpf(prog, 0, arch + 1) == eperm  # another architecture
    for nr in map(int, child.SECCOMP_DENIED[machine].split()):
        assert run_bpf(prog, nr, arch) == eperm, nr
    assert run_bpf(prog, clone3, arch) == child.SECCOMP_ENOSYS
    assert run_bpf(prog, clone, arch, child.CLONE_THREAD | 0x100) == allow  # a thread
    assert run_bpf(prog, clone, arch, 0x11) == eperm  # a process (fork)
    for nr in (kill, tgkill):
        assert run_bpf(prog, nr, arch, ME) == allow
        assert run_bpf(prog, nr, arch, OTHER) == eperm
    for nr in (0, 1, 3, 63):  # read, write, close, ...: allowed
        assert run_bpf(prog, nr, arch) == allow
    if machine == "x86_64":
        assert run_bpf(prog, 0x40000000 | 0, arch) == eperm  # the x32 ABI


def test_seccomp_unknown_machine_is_an_oserror():
    with pytest.raises(OSError, match="no seccomp syscall table for sparc"):
        child.seccomp_program("sparc", ME)


def test_landlock_rights_grow_with_the_abi():
    handled1, file_rights, read = child.landlock_rights(1)
    assert handled1 == sum(1 << bit for bit in range(1, 13))  # not EXECUTE (bit 0)
    assert child.landlock_rights(2)[0] == handled1 | 1 << 13  # REFER
    assert child.landlock_rights(3)[0] == handled1 | 1 << 13 | 1 << 14  # TRUNCATE
    assert read == (1 << 2) | (1 << 3) and file_rights & ~((1 << 1) | (1 << 2) | (1 << 14)) == 0
    sizes = {abi: child.landlock_ruleset_attr(abi)[1] for abi in (1, 3, 4, 5, 6)}
    assert sizes == {1: 8, 3: 8, 4: 16, 5: 16, 6: 24}
    assert child.landlock_ruleset_attr(6)[0][8:] == (3).to_bytes(8, sys.byteorder) * 2


def test_readable_paths_keeps_entries_under_the_roots(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    roots = {str(tmp_path / "a")}
    paths = [str(tmp_path / "a"), str(tmp_path / "a" / "b"), str(tmp_path), str(tmp_path / "ab")]
    assert child.readable_paths(paths, roots) == paths[:2]


def test_resolver_follows_links_like_realpath(tmp_path):
    resolve = child.make_resolver()
    (tmp_path / "dir").mkdir()
    (tmp_path / "up").symlink_to("dir/..")
    (tmp_path / "abs").symlink_to("/etc")
    (tmp_path / "loop").symlink_to("loop")
    for name in ("dir", "up/dir/x", "abs/passwd", "missing/../dir"):
        path = str(tmp_path / name)
        assert resolve(path) == os.path.realpath(path), name
    assert resolve(os.fsencode(tmp_path / "abs")) == os.path.realpath("/etc")
    assert resolve(tmp_path / "dir") == str(tmp_path / "dir")  # os.PathLike
    assert resolve(str(tmp_path / "loop")) is None
    assert resolve(42.0) is None
    assert resolve("/") == "/"


@pytest.fixture
def hook(tmp_path):
    notes: list[tuple[str, str]] = []
    work = tmp_path / "work"
    work.mkdir()
    hook = child.make_hook(str(work), str(os.getpid()), lambda kind, text: notes.append((kind, text)))
    hook.notes, hook.work, hook.outside = notes, work, tmp_path
    return hook


def test_hook_allows_the_work_dir_and_refuses_outside(hook):
    wr = os.O_WRONLY | os.O_CREAT
    hook("open", (str(hook.work / "f.txt"), "w", wr))
    hook("open", ("/dev/null", "w", wr))
    hook("open", ("/etc/hostname", "r", os.O_RDONLY))
    hook("open", (3, "w", wr))  # an fd: already checked when it was opened
    hook("os.mkdir", (str(hook.work / "sub"), 0o777, -1))
    hook("os.rename", (str(hook.work / "a"), str(hook.work / "b"), -1, -1))
    hook("import", ("json", None, [], [], 0))
    assert hook.notes == []
    (hook.work / "escape").symlink_to(hook.outside)
    refused = [
        ("open", (str(hook.outside / "f.txt"), "w", wr)),
        ("open", (str(hook.work / "escape" / "f.txt"), "a", os.O_WRONLY | os.O_APPEND)),
        ("open", (str(hook.outside), None, os.O_RDONLY)),  # os.open of a directory outside
        ("open", ("/proc/1/environ", "r", os.O_RDONLY)),
        ("os.rename", (str(hook.work / "a"), str(hook.outside / "b"), -1, -1)),
        ("os.chdir", ("/",)),
        ("os.system", (b"ls",)),
        ("socket.connect", (None, ("127.0.0.1", 80))),
        ("ctypes.dlopen", ("libc.so.6",)),
    ]
    for event, args in refused:
        with pytest.raises(PermissionError, match="sandbox: "):
            hook(event, args)
    with pytest.raises(ImportError, match="importing _ctypes is blocked"):
        hook("import", ("_ctypes", None, [], [], 0))
    assert [kind for kind, _ in hook.notes] == ["V"] * (len(refused) + 1)
    assert "writing outside the sandbox directory" in hook.notes[0][1]
    assert "network access is blocked (socket.connect)" in hook.notes[7][1]


def test_hook_reports_at_most_max_reported(hook):
    for _ in range(child.MAX_REPORTED + 5):
        with pytest.raises(PermissionError):
            hook("os.fork", ())
    assert len(hook.notes) == child.MAX_REPORTED


def test_hook_reads_no_module_globals_but_builtin_exceptions(hook):
    """Code can rebind this module's globals (through frames); the hook must not depend on them."""
    functions = [hook, *(c.cell_contents for c in hook.__closure__ if callable(c.cell_contents))]
    names = {"hook", "deny", "inside", "resolve"}
    assert names <= {f.__name__ for f in functions if hasattr(f, "__code__")}
    for function in functions:
        if getattr(function, "__name__", "") in names:
            loaded = {i.argval for i in dis.get_instructions(function) if i.opname == "LOAD_GLOBAL"}
            assert loaded <= {"Exception", "OSError", "ValueError"}, (function.__name__, loaded)


def test_exit_status_follows_sys_exit(capsys):
    assert child.exit_status(SystemExit()) == 0
    assert child.exit_status(SystemExit(3)) == 3
    assert child.exit_status(SystemExit("bye")) == 1
    assert capsys.readouterr().err == "bye\n"


def test_the_parent_runs_the_child_file_isolated():
    command = sandbox._child_command(sandbox._settings(1, 64, 10, None, 4, 1, 16, None, None, None), "/t", 5)
    assert command[1:3] == ["-I", "-B"] and command[-2] == child.__file__ == sandbox.CHILD_SCRIPT

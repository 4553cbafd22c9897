"""A disk that fills up or turns unwritable while a checkpoint is written (issue 15, item 5).

Every stage of a save fails in turn (a mocked write failure, fake server): the run ends
with one ``CheckpointError`` naming the folder, the cause and the fix; the half-written
``checkpoint-2`` is removed; ``checkpoint-1`` stays complete, ``resume_from_checkpoint=True``
picks it, and the resumed run trains step 2 from it. A real full tmpfs (mounted in a user
namespace, where ``unshare`` allows it) checks that the real errors of torch, safetensors
and ``open`` are recognised too.
"""

from __future__ import annotations

import builtins
import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("datasets")

from tests.doubles.trainer import RecordingClient, grpo_args, make_trainer  # noqa: E402
from verifiers.errors import CheckpointError  # noqa: E402
from verifiers.training.lifecycle import checkpoint as ckpt  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

# (file the failing write targets, how it fails): every file of a checkpoint-2 save, in order.
STAGES = {
    "model weights": "model.safetensors",
    "optimizer": "optimizer.pt",
    "scheduler": "scheduler.pt",
    "rng": "rng_state.pth",
    "trainer state": "trainer_state.json",
    "buffer": "grpo_buffer_rank0.pt",
    "generator state": "generator_state.pt",
    "complete mark": "checkpoint_complete.json",
}


def fail_writes(monkeypatch, target: str, exc: OSError) -> None:
    """Writes of ``checkpoint-2/<target>*`` raise ``exc`` (as the OS would: errno and file name)."""

    def hit(path) -> bool:
        if not isinstance(path, (str, os.PathLike)):
            return False
        p = Path(path)
        return p.parent.name == "checkpoint-2" and p.name.startswith(target)

    def error(path) -> OSError:
        return type(exc)(exc.errno, exc.strerror, os.fspath(path))

    real_save, real_open = torch.save, builtins.open

    def save(obj, f, *a, **kw):
        if hit(f):
            raise error(f)
        return real_save(obj, f, *a, **kw)

    def open_(file, mode="r", *a, **kw):
        if hit(file) and any(c in mode for c in "wax+"):
            raise error(file)
        return real_open(file, mode, *a, **kw)

    import transformers.modeling_utils as mu

    real_safe = mu.safe_save_file

    def safe_save(tensors, filename, *a, **kw):
        if hit(filename):
            raise error(filename)
        return real_safe(tensors, filename, *a, **kw)

    monkeypatch.setattr(torch, "save", save)
    monkeypatch.setattr(builtins, "open", open_)
    monkeypatch.setattr(mu, "safe_save_file", safe_save)


def disk_args(out: Path, **kw):
    # save_total_limit=1: a save that deleted checkpoint-1 before checkpoint-2 is whole would lose both.
    return grpo_args(
        out, max_steps=2, num_batches_ahead=1, cpu_phases="overlap", save_strategy="steps", save_steps=1,
        save_only_model=False, save_total_limit=1, **kw,
    )  # fmt: skip


def failing_run(
    tiny_model_dir, fake_server, tmp_path, monkeypatch, break_disk
) -> tuple[Path, CheckpointError]:
    """A 2-step run saving every step whose disk ``break_disk(monkeypatch)`` breaks: its error."""
    args = disk_args(tmp_path)
    trainer = make_trainer(tiny_model_dir, RecordingClient(fake_server), args)
    break_disk(monkeypatch)
    with pytest.raises(CheckpointError) as info:
        trainer.train()
    monkeypatch.undo()
    print(info.value)
    return Path(args.output_dir), info.value


def resume_and_check(tiny_model_dir, fake_server, args, expect: str) -> None:
    out = Path(args.output_dir)
    assert ckpt.last_complete_checkpoint(out) == str(out / expect)
    resumed = make_trainer(tiny_model_dir, RecordingClient(fake_server), args)
    resumed.train(resume_from_checkpoint=True)
    assert resumed.state.global_step == 2 and ckpt.is_complete(out / "checkpoint-2")


# Two stages in the default tier (one of Trainer's files, our mark); every stage in the slow tier.
FAST_STAGES = ("optimizer", "complete mark")


@pytest.mark.parametrize(
    "stage", [s if s in FAST_STAGES else pytest.param(s, marks=pytest.mark.slow) for s in STAGES]
)
def test_a_write_failure_at_any_stage_is_one_error_and_the_last_checkpoint_resumes(
    stage, tiny_model_dir, fake_server, tmp_path, monkeypatch
):
    target = STAGES[stage]
    out, error = failing_run(
        tiny_model_dir, fake_server, tmp_path, monkeypatch, lambda mp: fail_writes(mp, target, ENOSPC)
    )
    message = str(error)
    assert f"could not write checkpoint-2 in {out} ({STAGES[stage]}" in message
    assert "No space left on device (errno 28)" in message
    assert "the last complete checkpoint, checkpoint-1, is intact" in message
    assert "free space on that disk, or set output_dir to another disk or a lower save_total_limit" in message
    assert error.errno == errno.ENOSPC and "\n" not in message
    assert not (out / "checkpoint-2").exists()  # the half-written folder is gone (space back)
    assert ckpt.is_complete(out / "checkpoint-1")
    resume_and_check(tiny_model_dir, fake_server, disk_args(tmp_path), "checkpoint-1")


def test_a_failed_rotation_says_so_and_keeps_the_new_checkpoint(
    tiny_model_dir, fake_server, tmp_path, monkeypatch
):
    real_rmtree = shutil.rmtree

    def rmtree(path, *a, **kw):
        if Path(path).name == "deleting-checkpoint-1" and not kw.get("ignore_errors"):
            real_rmtree(Path(path) / "optimizer.pt", ignore_errors=True)  # half deleted, then refused
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))
        return real_rmtree(path, *a, **kw)

    out, error = failing_run(
        tiny_model_dir,
        fake_server,
        tmp_path,
        monkeypatch,
        lambda mp: mp.setattr(ckpt.shutil, "rmtree", rmtree),
    )
    message = str(error)
    assert f"could not delete old checkpoints (save_total_limit=1) in {out}" in message
    assert "Permission denied (errno 13); checkpoint-2 itself is complete" in message
    assert "make output_dir writable" in message
    # The half-deleted folder no longer looks like a checkpoint; the new one is whole.
    assert [p.name for _, p in ckpt.checkpoints(out)] == ["checkpoint-2"]
    assert ckpt.is_complete(out / "checkpoint-2")
    ckpt.rotate(out, 1)  # the next rotation sweeps the leftover
    assert not (out / "deleting-checkpoint-1").exists()


def test_torch_write_failure_without_errno_is_traced_to_the_disk(tmp_path, monkeypatch):
    # torch's zip writer reports a full disk only as "unexpected pos ...": a probe write finds the cause.
    folder = tmp_path / "checkpoint-3"
    folder.mkdir()
    exc = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")
    monkeypatch.setattr(ckpt, "_probe_write", lambda d: OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    err = ckpt.disk_error(exc, folder)
    assert err is not None and "could not write checkpoint-3" in str(err) and "errno 28" in str(err)
    assert "no earlier complete checkpoint" in str(err)
    assert ckpt.disk_error(RuntimeError("a bug, not the disk"), folder) is None  # re-raised as it is


REAL_DISK = """
import sys, torch
from safetensors.torch import save_file
from verifiers.training.lifecycle import checkpoint as ckpt
folder = sys.argv[1] + "/checkpoint-1"
for write in (
    lambda: ckpt.save_generator_state(folder, {"trained": 0, "next": 0, "producer": {"x": torch.zeros(400_000)},
                                               "pending": []}),
    lambda: save_file({"w": torch.zeros(400_000)}, folder + "/model.safetensors"),
    lambda: open(folder + "/trainer_state.json", "w").write("x" * 2_000_000),
):
    try:
        write()
        print("no error")
    except Exception as exc:
        print(ckpt.disk_error(exc, folder))
"""


def test_a_really_full_disk(tmp_path):
    """Real ENOSPC from a 1 MiB tmpfs (a user+mount namespace: no root needed where allowed)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    probe = (
        subprocess.run(["unshare", "-rm", "true"], capture_output=True) if shutil.which("unshare") else None
    )
    if probe is None or probe.returncode != 0:
        pytest.skip("unshare -rm (an unprivileged user namespace) is not available here")
    script = f'mount -t tmpfs -o size=1m none "{mnt}" && exec "{sys.executable}" -c "$0" "{mnt}"'
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, REAL_DISK], capture_output=True, text=True, env=env
    )
    print(run.stdout, run.stderr[-2000:])
    lines = run.stdout.splitlines()
    assert run.returncode == 0 and len(lines) == 3, run.stderr[-2000:]
    for line in lines:
        assert line.startswith(f"could not write checkpoint-1 in {mnt}"), line
        assert "No space left on device (errno 28)" in line and "free space on that disk" in line


@pytest.mark.parametrize(
    "code, fix",
    [
        (errno.ENOSPC, "free space on that disk"),
        (errno.EACCES, "make output_dir writable"),
        (errno.EROFS, "the file system is read-only: set output_dir to a writable disk"),
        (errno.EIO, "check that output_dir is on a writable disk with free space"),
    ],
)
def test_each_cause_names_its_fix(tmp_path, code, fix):
    (tmp_path / "checkpoint-4").mkdir()
    ckpt.mark_complete(tmp_path / "checkpoint-4", 4)
    exc = OSError(code, os.strerror(code), str(tmp_path / "checkpoint-5" / "scheduler.pt"))
    err = ckpt.disk_error(exc, tmp_path / "checkpoint-5")
    assert str(err) == (
        f"could not write checkpoint-5 in {tmp_path} (scheduler.pt): {os.strerror(code)} (errno {code}); "
        f"the last complete checkpoint, checkpoint-4, is intact: resume_from_checkpoint=True resumes it "
        f"({err.hint})"
    )
    assert err.hint.startswith(fix) and err.errno == code

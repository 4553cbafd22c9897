"""A checkpoint whose files changed after it was marked complete (issue 43, "nothing lost").

The mark, ``checkpoint_complete.json``, holds a manifest (every file's size and crc32).
A file truncated, removed or changed since (disk trouble, a bad copy, a half-synced
network file system) makes ``verify`` return a ``CheckpointProblem``; resuming with
``True`` then skips that checkpoint for the newest earlier intact one, in one line, and
moves it aside to ``corrupt-checkpoint-<step>``. A corrupt folder named explicitly is
refused with one ``ConfigError``; when every checkpoint is corrupt, resuming is refused
the same way (as it is when none is complete). Marks written before manifests existed
are trusted, as before. Folders are built in ``tmp_path``; no training.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

pytest.importorskip("torch")

from verifiers.errors import ConfigError  # noqa: E402
from verifiers.training.lifecycle import checkpoint as ckpt  # noqa: E402

LOGGER = "verifiers.training.lifecycle.checkpoint"
WEIGHTS = "model.safetensors"


def checkpoint(out: Path, step: int, *, mark: bool = True) -> Path:
    """``checkpoint-<step>`` with a weights file of 2 MiB (two of crc32's 1 MiB blocks), a
    second shard, and a DeepSpeed-style subfolder; marked complete unless ``mark=False``."""
    folder = out / f"checkpoint-{step}"
    (folder / f"global_step{step}").mkdir(parents=True)
    (folder / WEIGHTS).write_bytes(bytes(range(256)) * 8192)
    (folder / "model-00002-of-00002.safetensors").write_bytes(b"shard two" * 100)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (folder / f"global_step{step}" / "zero_pp_rank_0_mp_rank_00_optim_states.pt").write_bytes(b"o" * 5000)
    if mark:
        ckpt.mark_complete(folder, step)
    return folder


def truncate(path: Path, size: int) -> None:
    with open(path, "r+b") as fh:
        fh.truncate(size)


def flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0xFF]))


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING]


def test_the_mark_holds_every_files_size_and_crc32(tmp_path):
    folder = checkpoint(tmp_path, 5)
    mark = json.loads((folder / ckpt.COMPLETE_FILE).read_text())
    files = mark["manifest"]["files"]
    assert sorted(files) == [
        "global_step5/zero_pp_rank_0_mp_rank_00_optim_states.pt",
        "model-00002-of-00002.safetensors",
        WEIGHTS,
        "trainer_state.json",
    ]
    assert files[WEIGHTS]["size"] == 2 * 1024 * 1024 and isinstance(files[WEIGHTS]["crc32"], int)
    assert mark["global_step"] == 5 and WEIGHTS in mark["files"]  # what earlier versions wrote, kept
    assert ckpt.verify(folder) is None


@pytest.mark.parametrize(
    ("damage", "kind", "phrase"),
    [
        (lambda f: truncate(f / WEIGHTS, 1024 * 1024), "size", f"{WEIGHTS}: 1,048,576 bytes, expected 2,097,152"),
        (lambda f: (f / "model-00002-of-00002.safetensors").unlink(), "missing", "model-00002-of-00002.safetensors: missing"),
        (lambda f: flip_byte(f / WEIGHTS, 1_500_000), "checksum", f"{WEIGHTS}: content changed since it was saved"),
        (lambda f: truncate(f / "global_step40" / "zero_pp_rank_0_mp_rank_00_optim_states.pt", 0), "size", "global_step40/zero_pp_rank_0_mp_rank_00_optim_states.pt: 0 bytes, expected 5,000"),
        (lambda f: truncate(f / ckpt.COMPLETE_FILE, 20), "marker", f"{ckpt.COMPLETE_FILE} cannot be read (JSONDecodeError"),
    ],
    ids=["truncated", "missing-shard", "flipped-byte", "truncated-nested", "unparsable-mark"],
)  # fmt: skip
def test_resume_skips_a_corrupt_checkpoint_for_the_previous_one_in_one_line(
    tmp_path, caplog, damage, kind, phrase
):
    out = tmp_path / "out"
    checkpoint(out, 30)
    newest = checkpoint(out, 40)
    damage(newest)

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert ckpt.resolve_resume(out, True) == str(out / "checkpoint-30")
    [line] = warnings_of(caplog)
    moved = out / "corrupt-checkpoint-40"
    problem = ckpt.verify(moved)  # a typed value, not an exception
    assert isinstance(problem, ckpt.CheckpointProblem) and problem.kind is ckpt.Problem(kind)
    assert problem.folder == moved and phrase in str(problem)
    assert line.startswith(f"checkpoint-40 is corrupt ({phrase}")
    assert line.endswith(", moved to corrupt-checkpoint-40; resuming from checkpoint-30") and "\n" not in line
    # Moved aside: rotation and Trainer's get_last_checkpoint no longer see it, nor does a second resume.
    assert [p.name for _, p in ckpt.checkpoints(out)] == ["checkpoint-30"]
    assert (out / "corrupt-checkpoint-40" / ckpt.COMPLETE_FILE).is_file()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert ckpt.resolve_resume(out, True) == str(out / "checkpoint-30")
    assert warnings_of(caplog) == []


def test_the_example_line(tmp_path, caplog):
    out = tmp_path / "out"
    checkpoint(out, 30)
    truncate(checkpoint(out, 40) / WEIGHTS, 1024 * 1024)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        ckpt.resolve_resume(out, True)
    assert warnings_of(caplog) == [
        "checkpoint-40 is corrupt (model.safetensors: 1,048,576 bytes, expected 2,097,152), "
        "moved to corrupt-checkpoint-40; resuming from checkpoint-30"
    ]


def test_several_corrupt_checkpoints_are_skipped_in_one_line_and_half_written_ones_as_before(
    tmp_path, caplog
):
    out = tmp_path / "out"
    checkpoint(out, 10)
    truncate(checkpoint(out, 20) / WEIGHTS, 7)
    checkpoint(out, 25, mark=False)  # killed while saving
    (checkpoint(out, 30) / "trainer_state.json").unlink()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert ckpt.resolve_resume(out, True) == str(out / "checkpoint-10")
    corrupt = [line for line in warnings_of(caplog) if "was not completely written" not in line]
    assert corrupt == [
        "checkpoint-30 is corrupt (trainer_state.json: missing), moved to corrupt-checkpoint-30; "
        "checkpoint-20 is corrupt (model.safetensors: 7 bytes, expected 2,097,152), moved to "
        "corrupt-checkpoint-20; resuming from checkpoint-10"
    ]
    assert sorted(p.name for p in out.iterdir()) == [
        "checkpoint-10",
        "corrupt-checkpoint-20",
        "corrupt-checkpoint-30",
        "incomplete-checkpoint-25",
    ]


def test_a_mark_without_manifest_from_an_earlier_version_still_resumes(tmp_path, caplog):
    out = tmp_path / "out"
    old = checkpoint(out, 30, mark=False)
    # What verifiers wrote before manifests: the step and the top-level names only.
    (old / ckpt.COMPLETE_FILE).write_text(json.dumps({"global_step": 30, "files": sorted(os.listdir(old))}))
    truncate(old / WEIGHTS, 10)  # nothing to compare it with: trusted, as before
    assert ckpt.verify(old) is None
    truncate(checkpoint(out, 40) / WEIGHTS, 10)  # a newer one, with a manifest, is checked
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert ckpt.resolve_resume(out, True) == str(old)
    assert ckpt.resolve_resume(out, str(old)) == str(old)  # named explicitly, too


def test_a_corrupt_checkpoint_named_explicitly_is_refused_in_one_line(tmp_path):
    out = tmp_path / "out"
    checkpoint(out, 30)
    named = checkpoint(out, 40)
    truncate(named / WEIGHTS, 1024 * 1024)
    with pytest.raises(ConfigError) as info:
        ckpt.resolve_resume(out, str(named))
    message = str(info.value)
    assert (
        f"checkpoint {named} is corrupt (model.safetensors: 1,048,576 bytes, expected 2,097,152)" in message
    )
    assert "resume_from_checkpoint=True" in message and "\n" not in message
    assert [p.name for _, p in ckpt.checkpoints(out)] == ["checkpoint-30", "checkpoint-40"]  # nothing moved
    # An intact one named explicitly resumes; its mark's checksums are read.
    assert ckpt.resolve_resume(out, str(out / "checkpoint-30")) == str(out / "checkpoint-30")


def test_every_checkpoint_corrupt_refuses_to_resume_as_when_none_is_complete(tmp_path):
    # resume_from_checkpoint=True with nothing to resume is a ConfigError today (no checkpoint, or
    # none complete); all corrupt is the same: one line naming each, and nothing is moved.
    out = tmp_path / "out"
    truncate(checkpoint(out, 30) / WEIGHTS, 3)
    flip_byte(checkpoint(out, 40) / WEIGHTS, 0)
    with pytest.raises(ConfigError, match="no intact checkpoint") as info:
        ckpt.resolve_resume(out, True)
    message = str(info.value)
    assert "checkpoint-40 is corrupt (model.safetensors: content changed" in message
    assert "checkpoint-30 is corrupt (model.safetensors: 3 bytes, expected 2,097,152)" in message
    assert "\n" not in message
    assert [p.name for _, p in ckpt.checkpoints(out)] == ["checkpoint-30", "checkpoint-40"]


def test_last_complete_checkpoint_skips_a_truncated_one_without_reading_files(tmp_path, monkeypatch):
    out = tmp_path / "out"
    checkpoint(out, 30)
    truncate(checkpoint(out, 40) / WEIGHTS, 5)
    monkeypatch.setattr(ckpt, "_crc32", lambda path: pytest.fail(f"read {path}"))  # sizes only: a stat
    assert ckpt.last_complete_checkpoint(out) == str(out / "checkpoint-30")


def test_vf_rl_refuses_to_start_when_every_checkpoint_is_truncated(tmp_path):
    from verifiers.cli.run_config.schema import _check_resume

    out = tmp_path / "out"
    truncate(checkpoint(out, 30) / WEIGHTS, 5)
    with pytest.raises(ConfigError, match="none of checkpoint-30 is complete and intact"):
        _check_resume(True, str(out))


def test_rotation_never_deletes_the_newest_intact_checkpoint_for_a_truncated_one(tmp_path):
    out = tmp_path / "out"
    checkpoint(out, 10)
    truncate(checkpoint(out, 20) / WEIGHTS, 5)  # marked, but truncated since
    ckpt.rotate(out, 1)
    # Before, checkpoint-20 counted as the one to keep and checkpoint-10 was deleted.
    assert [p.name for _, p in ckpt.checkpoints(out)] == ["checkpoint-10", "checkpoint-20"]
    checkpoint(out, 30)
    ckpt.rotate(out, 1)
    assert [p.name for _, p in ckpt.checkpoints(out)] == ["checkpoint-30"]

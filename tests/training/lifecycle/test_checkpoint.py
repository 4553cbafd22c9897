"""Checkpoint completeness (verifiers/training/lifecycle/checkpoint.py): resuming picks the last
checkpoint whose ``checkpoint_complete.json`` mark exists and moves half-written later ones aside, and
rotation never deletes the last complete one. Tier 1 (folders built in ``tmp_path``; no training)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from verifiers.errors import ConfigError  # noqa: E402
from verifiers.training.lifecycle import checkpoint as ckpt  # noqa: E402


def fake_checkpoint(out: Path, step: int, complete: bool) -> Path:
    folder = out / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"weights")
    if complete:
        ckpt.mark_complete(folder, step)
    return folder


def test_resume_picks_the_last_complete_checkpoint_and_moves_half_written_ones_aside(tmp_path, caplog):
    out = tmp_path / "out"
    fake_checkpoint(out, 1, True)
    fake_checkpoint(out, 2, True)
    fake_checkpoint(out, 3, False)  # killed while saving
    assert json.loads((out / "checkpoint-2" / ckpt.COMPLETE_FILE).read_text())["global_step"] == 2
    assert ckpt.last_complete_checkpoint(out) == str(out / "checkpoint-2")
    assert ckpt.resolve_resume(out, True) == str(out / "checkpoint-2")
    assert (
        not (out / "checkpoint-3").exists()
        and (out / "incomplete-checkpoint-3" / "model.safetensors").is_file()
    )
    assert "checkpoint-3 was not completely written" in caplog.text
    assert ckpt.resolve_resume(out, None) is None


def test_resume_with_no_complete_checkpoint_says_so(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match="no checkpoint found"):
        ckpt.resolve_resume(out, True)
    fake_checkpoint(out, 4, False)
    with pytest.raises(ConfigError, match="no complete checkpoint .* checkpoint-4"):
        ckpt.resolve_resume(out, True)
    # Named explicitly, an unmarked folder is used (with a warning), and nothing is moved.
    assert ckpt.resolve_resume(out, str(out / "checkpoint-4")) == str(out / "checkpoint-4")
    assert (out / "checkpoint-4").is_dir()


def test_rotation_never_deletes_the_last_complete_checkpoint(tmp_path):
    out = tmp_path / "out"
    for step in (1, 2, 3):
        fake_checkpoint(out, step, True)
    fake_checkpoint(out, 4, False)  # being written
    ckpt.rotate(out, 1)
    assert [p.name for _, p in ckpt.checkpoints(out)] == ["checkpoint-3", "checkpoint-4"]
    ckpt.mark_complete(out / "checkpoint-4", 4)
    ckpt.rotate(out, 1)
    assert [p.name for _, p in ckpt.checkpoints(out)] == ["checkpoint-4"]

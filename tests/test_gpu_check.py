"""scripts/gpu_check.py: its registry and report, and its CUDA-free checks on CPU (the dry run CI runs).

The GPU run itself (``python scripts/gpu_check.py`` on a GPU machine) is in docs/gpu.md.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gc():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses resolve the module's annotations through it
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("gpu_check", None)


def fake_checks(gc):
    def ok(ctx):
        return "fine"

    def bad(ctx):
        raise AssertionError("values differ\nsecond line")

    def skip(ctx):
        raise gc.Skip("not here")

    return [
        gc.Check("a_pass", ok),
        gc.Check("b_fail", bad),
        gc.Check("c_skip", skip),
        gc.Check("d_cuda", ok, cuda=True),
        gc.Check("e_needs", ok, needs=("no_such_module_xyz",)),
    ]


def test_report_is_one_line_per_check_then_the_summary(gc, tmp_path):
    lines: list[str] = []
    counts = gc.run_checks(fake_checks(gc), gc.Context("cpu", tmp_path), has_cuda=False, out=lines.append)
    assert counts == {"passed": 1, "failed": 1, "skipped": 3}
    assert lines[0].startswith("[gpu_check] a_pass: passed (fine; ")
    assert lines[1].startswith(
        "[gpu_check] b_fail: failed (AssertionError: values differ; "
    )  # first line only
    assert lines[2] == "[gpu_check] c_skip: skipped (not here)"
    assert lines[3] == "[gpu_check] d_cuda: skipped (no CUDA)"
    assert lines[4] == "[gpu_check] e_needs: skipped (no no_such_module_xyz installed)"
    assert lines[-1] == "gpu_check passed=1 failed=1 skipped=3"
    assert all("\n" not in line for line in lines)


def test_cuda_checks_run_where_there_is_cuda(gc, tmp_path):
    lines: list[str] = []
    gc.run_checks(fake_checks(gc)[3:4], gc.Context("cuda", tmp_path), has_cuda=True, out=lines.append)
    assert lines[0].startswith("[gpu_check] d_cuda: passed (fine")


def test_registry_names_are_unique_and_cover_the_issue(gc):
    names = [c.name for c in gc.CHECKS]
    assert len(names) == len(set(names))
    for name in (
        "trainer_lora_bf16",
        "trainer_full_bf16",
        "fsdp2_one_process",
        "zero3_one_process",
        "sync_full_vs_checkpoint",
        "sync_fused_moe",
        "sync_merged_lora",
        "peft_adapter_roundtrip",
        "vllm_api_surface",
        "vllm_grpo_steps",
        "vllm_killed_server_frees_gpu",
        "throughput_vs_trl",
    ):
        assert name in names, name
    assert {c.name for c in gc.CHECKS if c.cuda} == {"vllm_grpo_steps", "vllm_killed_server_frees_gpu"}


def test_unknown_check_name_is_refused(gc):
    with pytest.raises(SystemExit, match="unknown check 'nope'"):
        gc.select("sync_fused_moe,nope")


@pytest.mark.parametrize("mode", ["ipc", "merged", "lora"])
def test_gpu_run_configs_pass_vf_trains_schema(gc, tmp_path, mode):
    """The vf-train config each sync mode's GPU run uses is valid here, before any GPU time is spent."""
    from verifiers.cli.run_config import load as tc

    path = tmp_path / "run.toml"
    path.write_text(
        gc.grpo_toml(mode, "/models/tiny", 8123, tmp_path / "out", bf16=False)
    )  # bf16 needs a GPU
    config = tc.load_config(path)
    rl = config.rl_config()
    assert rl.max_steps == 3 and config.inference.port == 8123
    assert rl.use_lora == (mode != "ipc")
    if mode != "ipc":
        assert rl.grpo_args["lora_sync"] == ("adapter" if mode == "lora" else "merged")
    assert rl.grpo_args["mask_truncated_completions"] is False  # the random model's replies all truncate
    rl.to_grpo_config(world_size=1)  # every GRPOConfig rule too, as vf-train checks at start


def test_dry_run_of_the_sync_checks(gc, tmp_path, capsys):
    """What each sync sends, against the checkpoint (plain, fused-expert MoE, merged LoRA) and the
    adapter round trip: they need no CUDA, so CI runs them."""
    only = "sync_full_vs_checkpoint,sync_fused_moe,sync_merged_lora,peft_adapter_roundtrip"
    rc = gc.main(["--dry-run", "--only", only, "--keep", str(tmp_path)])
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 0, out
    assert out[-1] == "gpu_check passed=4 failed=0 skipped=0"
    assert any("sync_fused_moe: passed (4 fused expert tensors" in line for line in out)


def test_a_failed_check_makes_the_exit_status_1(gc, monkeypatch, tmp_path, capsys):
    def broken(ctx):
        raise RuntimeError("boom")

    monkeypatch.setattr(gc, "CHECKS", [gc.Check("broken", broken)])
    assert gc.main(["--dry-run", "--keep", str(tmp_path)]) == 1
    assert capsys.readouterr().out.strip().splitlines()[-1] == "gpu_check passed=0 failed=1 skipped=0"


def step(ratio=1.0, entropy=10.8, **extra):
    return {"importance_ratio/mean": ratio, "entropy": entropy, "reward": 0.25, "time/sync_s": 0.4,
            "errors/reward_fn": 0.0, "rollout_errors": 0.0, **extra}  # fmt: skip


def test_step_rows_are_the_training_steps_of_the_metrics_file(gc, tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(
        '{"step": 1, "importance_ratio/mean": 1.0004, "time/sync_s": 0.12}\n{"step": 1, "eval/reward": 0.5}\n'
        '{"train_loss": 0.1}\n'
    )
    assert gc.step_rows(metrics) == [{"step": 1, "importance_ratio/mean": 1.0004, "time/sync_s": 0.12}]
    with pytest.raises(AssertionError, match="no metrics file"):
        gc.step_rows(tmp_path / "missing.jsonl")


def test_a_gpu_run_passes_only_when_its_steps_trained_real_tokens(gc):
    assert gc.judge_steps([step(1.0004), step(0.99), step(1.02)], steps=3) == (
        "3 steps, step-0 ratio 1.000400, entropy 10.80, rewards [0.25, 0.25, 0.25], sync 0.40 s max"
    )
    # What the first H100 run logged (2026-11-26): every completion truncated and masked, so no loss
    # token; the loss then reports ratio exactly 1 and entropy 0, which proves nothing.
    with pytest.raises(AssertionError, match=r"step 1: no loss tokens \(entropy 0.0\)"):
        gc.judge_steps([step(entropy=0.0)] * 3, steps=3)
    # ... and its reward function failed on every rollout (rapidfuzz missing there).
    with pytest.raises(AssertionError, match=r"step 2: \{'errors/reward_fn': 16.0\}"):
        gc.judge_steps([step(), step(**{"errors/reward_fn": 16.0}), step()], steps=3)
    with pytest.raises(AssertionError, match="step-0 importance ratio 1.002000, not within 0.001 of 1"):
        gc.judge_steps([step(1.002), step(), step()], steps=3)
    with pytest.raises(AssertionError, match="2 steps logged, not 3"):
        gc.judge_steps([step(), step()], steps=3)

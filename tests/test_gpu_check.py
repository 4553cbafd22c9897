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
        "vllm_learns",
        "vllm_learns_plan",
        "vllm_killed_server_frees_gpu",
        "throughput_vs_trl",
    ):
        assert name in names, name
    assert {c.name for c in gc.CHECKS if c.cuda} == {"vllm_learns", "vllm_killed_server_frees_gpu"}


def test_unknown_check_name_is_refused(gc):
    with pytest.raises(SystemExit, match="unknown check 'nope'"):
        gc.select("sync_fused_moe,nope")


@pytest.mark.parametrize("name", ["adapter", "merged", "ipc", "shm"])
def test_learning_run_configs_pass_vf_trains_schema(gc, tmp_path, name):
    """The vf-train config of each learning run is valid here, before any GPU time is spent."""
    from verifiers.cli.run_config import load as tc

    mode = next(m for m in gc.LEARN_MODES if m.name == name)
    path = tmp_path / "run.toml"
    path.write_text(
        gc.learn_toml(mode, "/models/smollm2", 8123, tmp_path / "out", bf16=False)
    )  # bf16 needs a GPU
    config = tc.load_config(path)
    rl = config.rl_config()
    assert rl.max_steps == 12 and config.inference.port == 8123 and config.envs[0].id == "arithmetic"
    assert rl.use_lora == (name in ("adapter", "merged"))
    assert rl.num_batches_ahead == (1 if name == "shm" else 0)
    if rl.use_lora:
        assert rl.grpo_args["lora_sync"] == name
    rl.to_grpo_config(world_size=1)  # every GRPOConfig rule too, as vf-train checks at start


def test_one_server_serves_every_mode_with_cuda_graphs(gc):
    cmd = gc.learn_server_cmd("/m", 8123, cuda=True)
    assert "--enforce-eager" not in cmd
    for flag in ("--enable-lora", "--max-lora-rank"):
        assert flag in cmd
    assert cmd[cmd.index("--weight-transfer") + 1] == "ipc" and cmd[cmd.index("--dtype") + 1] == "bfloat16"
    # Without a C compiler torch.compile cannot build Triton's launchers: graphs without compiling.
    bare = gc.learn_server_cmd("/m", 8123, cuda=True, compiler=False)
    assert bare[-2:] == list(gc.NO_COMPILE_GRAPHS) and "--enforce-eager" not in bare


def test_each_run_gets_its_transport_and_the_task_on_its_path(gc):
    inherited = {"VF_WEIGHT_TRANSPORT": "http", "PYTHONPATH": "/elsewhere"}
    by_name = {m.name: gc.learn_env(m, inherited) for m in gc.LEARN_MODES}
    assert by_name["shm"]["VF_WEIGHT_TRANSPORT"] == "shm"
    assert by_name["ipc"]["VF_WEIGHT_TRANSPORT"] == by_name["merged"]["VF_WEIGHT_TRANSPORT"] == "ipc"
    assert "VF_WEIGHT_TRANSPORT" not in by_name["adapter"]  # an inherited one is not kept
    path = by_name["adapter"]["PYTHONPATH"].split(":")
    assert path[0].endswith("environments/arithmetic") and path[-1] == "/elsewhere"


def test_learning_modes_are_chosen_by_name(gc):
    assert [m.name for m in gc.learn_modes("shm, adapter")] == ["adapter", "shm"]
    assert gc.learn_modes(None) == gc.LEARN_MODES
    with pytest.raises(SystemExit, match="unknown learning mode 'lora'"):
        gc.learn_modes("lora")


def test_learn_model_refuses_a_folder_without_weights(gc, tmp_path):
    (tmp_path / "config.json").write_text("{}")
    ctx = gc.Context("cpu", tmp_path, model=str(tmp_path))
    with pytest.raises(AssertionError, match="no model.safetensors, tokenizer.json"):
        gc.learn_model(ctx)


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


def step(ratio=1.0, entropy=1.2, reward=0.25, **extra):
    return {"importance_ratio/mean": ratio, "entropy": entropy, "reward": reward, "time/sync_s": 0.4,
            "errors/reward_fn": 0.0, "rollout_errors": 0.0, **extra}  # fmt: skip


def mode(gc, name):
    return next(m for m in gc.LEARN_MODES if m.name == name)


def rising(n=12, ratio=1.003):
    """A run whose reward rises 0.05 a step: first 4 steps 0.275, last 4 0.675."""
    return [step(ratio, reward=0.2 + 0.05 * i) for i in range(n)]


def test_step_rows_are_the_training_steps_of_the_metrics_file(gc, tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(
        '{"step": 1, "importance_ratio/mean": 1.0004, "time/sync_s": 0.12}\n{"step": 1, "eval/reward": 0.5}\n'
        '{"train_loss": 0.1}\n'
    )
    assert gc.step_rows(metrics) == [{"step": 1, "importance_ratio/mean": 1.0004, "time/sync_s": 0.12}]
    with pytest.raises(AssertionError, match="no metrics file"):
        gc.step_rows(tmp_path / "missing.jsonl")


def test_a_learning_run_passes_when_it_trained_agreed_and_learned(gc):
    assert gc.judge_learning(rising(), mode(gc, "adapter")) == (
        "12 steps, max |ratio-1| 0.0030 (ahead 0), reward 0.28 -> 0.68 (+0.40), sync 0.40 s mean, 0.40 s max"
    )
    assert gc.reward_gain([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]) == pytest.approx((0.25, 0.65, 0.4))


def test_a_learning_run_fails_on_what_the_first_h100_run_showed(gc):
    # 2026-11-26: every completion truncated and masked, so no loss token; the loss then reports
    # ratio exactly 1 and entropy 0, which proves nothing ...
    with pytest.raises(AssertionError, match=r"step 1: no loss tokens \(entropy 0.0\)"):
        gc.judge_learning([step(entropy=0.0)] * 12, mode(gc, "ipc"))
    # ... and its reward function failed on every rollout (rapidfuzz missing there).
    rows = rising()
    rows[1] = {**rows[1], "errors/reward_fn": 16.0}
    with pytest.raises(AssertionError, match=r"step 2: \{'errors/reward_fn': 16.0\}"):
        gc.judge_learning(rows, mode(gc, "adapter"))


def test_the_ratio_is_judged_at_every_step_when_nothing_is_generated_ahead(gc):
    rows = rising()
    rows[8] = {**rows[8], "importance_ratio/mean": 0.985}  # a late step, not only the first
    with pytest.raises(AssertionError, match="step 9: importance ratio 0.9850, not within 0.01 of 1"):
        gc.judge_learning(rows, mode(gc, "ipc"))
    # One batch ahead the ratio compares two policy versions: reported, not judged.
    assert "max |ratio-1| 0.0150 (ahead 1)" in gc.judge_learning(rows, mode(gc, "shm"))


def test_lora_runs_must_raise_the_reward_and_full_runs_need_not(gc):
    flat = [step(reward=0.3) for _ in range(12)]
    with pytest.raises(AssertionError, match=r"reward gain \+0.000 .* below 0.1"):
        gc.judge_learning(flat, mode(gc, "merged"))
    assert "(+0.00)" in gc.judge_learning(flat, mode(gc, "ipc"))
    with pytest.raises(AssertionError, match="11 steps logged, not 12"):
        gc.judge_learning(rising(11), mode(gc, "adapter"))


def server_lines():
    """The two INFO lines a run's syncs leave in vf-vllm's log, formatted by the server's own code."""
    state = (ROOT / "verifiers/inference/server/state.py").read_text()
    server = (ROOT / "verifiers/inference/server/routes.py").read_text()
    assert 'logger.info("weight update %s (v%d) %s", u.update_id, u.version, reason)' in state
    assert 'logger.info("adapter %s (v%d) loaded in %.2f s", name, st.lora_versions[name], seconds)' in server
    head = "12:00:01 INFO verifiers.inference.server: "

    def commit(v, why="committed"):
        return head + "weight update %s (v%d) %s" % (f"id{v}", v, why)  # noqa: UP031 - logging's own format

    def adapter(v):
        return head + "adapter %s (v%d) loaded in %.2f s" % ("vf-lora", v, 0.04 * v)  # noqa: UP031

    return commit, adapter


def test_server_log_counting_reads_the_servers_own_lines(gc):
    commit, adapter = server_lines()
    text = "\n".join([commit(1), "vllm noise", adapter(1), commit(2, "failed to receive: gone"), adapter(2)])
    commits, adapters, dropped = gc.server_syncs(text)
    assert commits == [1] and adapters == [(1, 0.04), (2, 0.08)]
    assert dropped == ["weight update id2 (v2) failed to receive: gone"]


def test_one_commit_or_adapter_load_per_sync(gc):
    commit, adapter = server_lines()
    merged, full, lora = mode(gc, "merged"), mode(gc, "ipc"), mode(gc, "adapter")
    # 13 syncs: one at the start, one per step. Merged on a fresh server: 13 commits.
    log = "\n".join(commit(v) for v in range(1, 14))
    assert gc.judge_server_log(log, merged, 13, version_before=0) == "13 commits (v1-v13)"
    # A full run after it: versions go on from 14.
    log2 = "\n".join(commit(v) for v in range(14, 27))
    assert gc.judge_server_log(log2, full, 13, version_before=13) == "13 commits (v14-v26)"
    with pytest.raises(AssertionError, match="not consecutive from v14"):
        gc.judge_server_log(log, full, 13, version_before=13)
    # A full run on a fresh server: its first sync finds the checkpoint unchanged and sends nothing.
    assert gc.expected_server_lines(full, 13, version_before=0) == (12, 0)
    # An adapter run: one load per sync, plus the base sent back once where another run's weights are.
    loads = "\n".join(adapter(v) for v in range(1, 14))
    assert gc.judge_server_log(loads, lora, 13, 0) == "13 adapter loads (0.52 s max)"
    assert gc.judge_server_log(commit(27) + "\n" + loads, lora, 13, 26).endswith("base sent back in 1 commit")
    with pytest.raises(AssertionError, match="0 commits and 13 adapter loads for 13 syncs, not 1 and 13"):
        gc.judge_server_log(loads, lora, 13, 26)
    with pytest.raises(AssertionError, match="12 commits and 0 adapter loads for 13 syncs, not 13 and 0"):
        gc.judge_server_log("\n".join(commit(v) for v in range(1, 13)), merged, 13, 0)
    with pytest.raises(
        AssertionError, match=r"weight update id5 \(v5\) was not committed within its timeout"
    ):
        gc.judge_server_log(
            log.replace("(v5) committed", "(v5) was not committed within its timeout"), merged, 13, 0
        )


def test_dry_run_of_the_learning_plan(gc, tmp_path, capsys):
    """The learning check's every CUDA-free part (the real SmolLM2 folder, configs, judges) passes here."""
    rc = gc.main(["--dry-run", "--only", "vllm_learns_plan,vllm_learns", "--keep", str(tmp_path)])
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 0, out
    assert out[-1] == "gpu_check passed=1 failed=0 skipped=1"
    assert "vllm_learns: skipped (no CUDA)" in out[-2]

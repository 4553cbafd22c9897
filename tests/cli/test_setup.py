"""vf-setup (verifiers/cli/setup.py): the example configs it writes parse and match the committed copies,
existing files are kept unless forced, the prime-rl configs it translates, and bad input in one line.
Tier 1 (files written in ``tmp_path``, nothing started)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.doubles.cli_errors import one_error  # noqa: E402
from verifiers.cli import setup as setup_cli  # noqa: E402
from verifiers.cli.run_config import load as tc  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "vf-rl"


pytestmark = pytest.mark.usefixtures("one_process")  # tests/cli/conftest.py


def test_setup_writes_example_configs_that_parse(tmp_path, capsys):
    out = tmp_path / "cfgs"
    assert setup_cli.main(["--dir", str(out)]) == 0
    written = sorted(p.stem for p in out.glob("*.toml"))
    assert written == sorted(setup_cli.example_configs())
    assert len(written) == 12  # reverse-text has a GPU (the guide's), a one-GPU and a CPU recipe
    for path in out.glob("*.toml"):
        tc.load_config(path)
    assert f"wrote {out / 'reverse-text.toml'}" in capsys.readouterr().out


def test_setup_keeps_existing_files_unless_forced(tmp_path, capsys):
    out = tmp_path / "cfgs"
    setup_cli.main(["--dir", str(out)])
    target = out / "reverse-text.toml"
    target.write_text("# mine\n")
    setup_cli.main(["--dir", str(out)])
    text = capsys.readouterr().out
    assert (
        f"kept {target} (exists; --force overwrites it)" in text
        and f"unchanged {out / 'wordle.toml'}" in text
    )
    assert target.read_text() == "# mine\n"
    setup_cli.main(["--dir", str(out), "--force"])
    assert target.read_text() == setup_cli.example_configs()["reverse-text"]


def test_committed_configs_match_the_package_copies():
    committed = {p.stem: p.read_text() for p in (ROOT / "configs" / "vf-rl").glob("*.toml")}
    assert committed == setup_cli.example_configs()


def test_setup_list(capsys):
    assert setup_cli.main(["--list"]) == 0
    assert "reverse-text" in capsys.readouterr().out.split()


def test_prime_rl_config_content(tmp_path):
    assert setup_cli.main(["--prime-rl", "reverse-text-cpu", "--dir", str(tmp_path)]) == 0  # SmolLM2's recipe
    text = (tmp_path / "reverse-text-cpu.toml").read_text()
    assert text.startswith("# prime-rl config for reverse-text")
    cfg = tc.tomllib.loads(text)
    assert cfg["max_steps"] == 20
    assert cfg["model"] == {"name": "HuggingFaceTB/SmolLM2-135M-Instruct"}
    orch = cfg["orchestrator"]
    assert (orch["batch_size"], orch["rollouts_per_example"], orch["seq_len"]) == (32, 8, 512)
    assert orch["lora_name"] == "reverse-text-r8"
    assert orch["sampling"] == {"max_tokens": 40, "temperature": 1.0}
    assert orch["env"] == [
        {
            "id": "reverse-text",
            "name": "reverse-text",
            "args": {"num_train_examples": 400, "num_eval_examples": 20},
        }
    ]
    assert (cfg["inference_gpu_ids"], cfg["trainer_gpu_ids"]) == ([0], [1])  # prime-rl needs GPUs
    assert (orch["mask_truncated_completions"], orch["zero_truncated_completions"]) == (True, False)
    assert orch["buffer"] == {"type": "online-difficulty", "oversampling_factor": 2.0}
    assert cfg["trainer"]["model"]["experimental"]["lora"] == {
        "rank": 8,
        "alpha": 16,
        "dropout": 0.0,
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
    }
    assert cfg["trainer"]["optim"] == {"lr": 5e-4, "weight_decay": 0.0, "max_norm": 1.0}
    inference_model = {"enforce_eager": True, "max_model_len": 1024}
    assert cfg["inference"] == {"enable_lora": True, "max_lora_rank": 8, "model": inference_model}
    assert "ckpt" in cfg


def test_prime_rl_model_override_and_full_finetuning(tmp_path):
    example = setup_cli.example_configs()["gsm8k"].replace(
        "lora_rank = 16", "use_lora = false\nlora_rank = 16"
    )
    cfg = tc.tomllib.loads(setup_cli.prime_rl_toml(example, model="Qwen/Qwen3-0.6B"))
    assert cfg["model"]["name"] == "Qwen/Qwen3-0.6B"
    assert "model" not in cfg["trainer"] and "lora_name" not in cfg["orchestrator"]
    assert cfg["inference"] == {"model": {"max_model_len": 4096}}  # no LoRA flags


def test_setup_bad_input(capsys):
    line = one_error(capsys, setup_cli.main(["--prime-rl", "nope"]))
    assert line.startswith("error: no bundled example for environment 'nope' (use one of: alphabet-sort")
    assert "unrecognized arguments" in one_error(capsys, setup_cli.main(["--bogus"]))


@pytest.mark.parametrize(
    "gpus, recipe", [(0, "reverse-text-cpu.toml"), (1, "reverse-text-1gpu.toml"), (2, "reverse-text.toml")]
)
def test_vf_setup_points_at_the_recipe_this_machine_fits(gpus, recipe, tmp_path):
    from verifiers.cli.setup import closing_line

    line = closing_line(tmp_path, gpus)
    assert line.startswith(f"run one with: vf-rl @ {tmp_path / recipe}  (")
    assert (CONFIGS / recipe).is_file()

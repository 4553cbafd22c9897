"""GPU and CPU recipes in configs/vf-rl, and vf-rl's refusal to run a GPU config on CPU.

The guides' GPU recipes (reverse-text, wiki-search) ship as written; a config that asks
for GPUs stops with one line where CUDA has fewer devices (never a silent CPU run), and
a CPU config on a GPU machine says in one line that it trains on CPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from verifiers.cli.rl import plan as rl_cli
from verifiers.cli.run_config import load as tc

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = ROOT / "configs" / "vf-rl"


def one_error(capsys, rc: int) -> str:
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


# name -> (model, inference gpus, trainer gpus, batch_size, max_seq_len): the guides' numbers
GPU_RECIPES = {
    "reverse-text": ("PrimeIntellect/Qwen3-0.6B-Reverse-Text-SFT", 1, 1, 128, 512),
    "reverse-text-1gpu": ("PrimeIntellect/Qwen3-0.6B-Reverse-Text-SFT", 1, 1, 128, 512),
    "wiki-search": ("Qwen/Qwen3-4B-Instruct-2507", 1, 1, 1024, 4096),
}


@pytest.mark.parametrize("name", sorted(GPU_RECIPES))
def test_gpu_recipes_are_the_guides(name):
    model, inf, tr, batch, seq = GPU_RECIPES[name]
    config = tc.load_config([CONFIGS / f"{name}.toml"])
    assert (config.model, config.inference.gpus, config.trainer.gpus) == (model, inf, tr)
    rl = config.rl_config()
    assert (rl.batch_size, rl.max_seq_len) == (batch, seq)
    assert config.envs[0].id == f"primeintellect/{name.removesuffix('-1gpu')}"


def test_cpu_recipe_is_named_so_and_runs_on_cpu():
    config = tc.load_config([CONFIGS / "reverse-text-cpu.toml"])
    assert (config.inference.gpus, config.trainer.gpus) == (0, 0)
    assert "CPU recipe" in (CONFIGS / "reverse-text-cpu.toml").read_text().splitlines()[0]
    assert "GPU recipe" in (CONFIGS / "reverse-text.toml").read_text().splitlines()[0]


def test_the_configs_folder_is_the_package_data():
    """One copy: configs/vf-rl is a link to the package data vf-setup writes (and a wheel ships)."""
    packaged = ROOT / "verifiers" / "configs" / "vf-rl"
    assert CONFIGS.is_symlink() and CONFIGS.resolve() == packaged.resolve()
    assert sorted(p.name for p in packaged.glob("*.toml")) and not packaged.is_symlink()


@pytest.mark.parametrize("visible", ["", "0,1", "0"])
def test_gpu_config_without_cuda_is_refused_in_one_line(capsys, monkeypatch, visible):
    """CUDA_VISIBLE_DEVICES listing ids on a machine without CUDA must not pass for GPUs."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setattr(rl_cli, "cuda_device_count", lambda: 0)
    monkeypatch.chdir(ROOT)
    line = one_error(capsys, rl_cli.main(["@", str(CONFIGS / "reverse-text.toml")]))
    assert line == (
        "error: the config asks for 2 GPU(s) (inference.gpus = 1, trainer.gpus = 1) but 0 CUDA device(s) "
        "are visible; it never falls back to CPU (use a CPU recipe (gpus = 0, e.g. "
        "configs/vf-rl/reverse-text-cpu.toml))"
    )


def test_gpu_config_with_too_few_devices_names_the_count(capsys, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,4,5")
    monkeypatch.setattr(rl_cli, "cuda_device_count", lambda: 1)  # CUDA sees one of the three listed
    monkeypatch.chdir(ROOT)
    over = ["--inference.gpus", "2"]  # 1 + 1 on one GPU would share it (test_shared_gpu.py)
    line = one_error(capsys, rl_cli.main(["@", str(CONFIGS / "reverse-text.toml"), *over]))
    assert "asks for 3 GPU(s)" in line and "but 1 CUDA device(s) are visible" in line
    assert line.endswith("(lower the gpus counts)")


def test_visible_gpus_keeps_the_listed_ids(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3,5")
    monkeypatch.setattr(rl_cli, "cuda_device_count", lambda: 3)
    config = tc.load_config([CONFIGS / "reverse-text.toml"], [("trainer.gpus", "2")])
    layout = rl_cli.layout_for(config, rl_cli.visible_ids(rl_cli.cuda_device_count()), dry=False)
    assert layout.gpu_ids == ["2", "3", "5"]


def test_cuda_device_count_is_zero_without_a_driver(monkeypatch):
    monkeypatch.setattr(rl_cli.os.path, "exists", lambda p: False)
    monkeypatch.setattr(rl_cli.shutil, "which", lambda name: None)
    assert rl_cli.cuda_device_count() == 0


@pytest.mark.parametrize("count, says", [(0, False), (2, True)])
def test_cpu_config_on_a_gpu_machine_says_it_trains_on_cpu(count, says):
    config = tc.load_config([CONFIGS / "reverse-text-cpu.toml"])
    line = rl_cli.cpu_on_gpu_line(config, count)
    if not says:
        assert line is None
        return
    assert line == (
        "vf-rl: this config trains on CPU (inference.gpus = 0, trainer.gpus = 0) although 2 CUDA device(s) "
        "are visible; set gpus under [inference] and [trainer] to use them (e.g. configs/vf-rl/reverse-text.toml)"
    )
    assert rl_cli.cpu_on_gpu_line(tc.load_config([CONFIGS / "reverse-text.toml"]), count) is None


@pytest.mark.parametrize("name", ["reverse-text", "reverse-text-cpu", "wiki-search"])
def test_recipes_dry_run(name, capsys, monkeypatch):
    """vf-rl's own plan (--dry-run) for each recipe: GPU ones get a GPU each side."""
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert rl_cli.main(["@", str(CONFIGS / f"{name}.toml"), "--dry-run"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    if name.endswith("-cpu"):
        assert "inference: CUDA_VISIBLE_DEVICES= " in out and "trainer: CUDA_VISIBLE_DEVICES= " in out
    else:
        assert "inference: CUDA_VISIBLE_DEVICES=0 " in out and "trainer: CUDA_VISIBLE_DEVICES=1 " in out

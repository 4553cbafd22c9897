"""The CPU compute dtype: bf16 where its matmul is clearly faster, else fp32 (utils/compute_dtype.py),
and what follows from it: bf16 AUTO in the training configs and vf-vllm's --dtype on CPU."""

from __future__ import annotations

import time

import pytest

from verifiers.errors import ConfigError
from verifiers.training.config import fields as fields_mod
from verifiers.training.config.presets import bf16_auto
from verifiers.utils import compute_dtype as cd


@pytest.fixture(autouse=True)
def _fresh_choice():
    cd.cpu_compute_dtype.cache_clear()
    yield
    cd.cpu_compute_dtype.cache_clear()


@pytest.mark.parametrize(
    ("fp32", "bf16", "want"),
    [
        (189e9, 1085e9, "bfloat16"),  # Intel Xeon with AMX (this project's machines)
        (300e9, 600e9, "bfloat16"),  # AVX-512 BF16: about 2x
        (300e9, 449e9, "float32"),  # under 1.5x: not clearly faster
        (300e9, 450e9, "bfloat16"),  # the threshold itself
        (300e9, 40e9, "float32"),  # emulated bf16, slower than fp32
    ],
)
def test_decide_takes_bf16_only_when_clearly_faster(fp32, bf16, want):
    choice = cd.decide(fp32, bf16)
    assert choice.dtype == want and choice.bf16 is (want == "bfloat16")
    assert f"{bf16 / fp32:.2f}x" in choice.line() and "\n" not in choice.line()


@pytest.mark.parametrize(
    ("value", "want"), [("bf16", "bfloat16"), ("BFloat16", "bfloat16"), ("fp32", "float32")]
)
def test_env_fixes_the_choice_without_measuring(monkeypatch, value, want):
    monkeypatch.setenv(cd.ENV, value)
    monkeypatch.setattr(cd, "matmul_rate", lambda *a, **k: pytest.fail("measured despite VF_CPU_DTYPE"))
    choice = cd.cpu_compute_dtype()
    assert choice.dtype == want and choice.fp32_flops is None and cd.ENV in choice.reason


def test_env_auto_measures_once_per_process(monkeypatch):
    monkeypatch.setenv(cd.ENV, "auto")
    calls = []
    monkeypatch.setattr(
        cd, "matmul_rate", lambda name, **k: calls.append(name) or (1e12 if name == "bfloat16" else 2e11)
    )
    assert cd.cpu_compute_dtype().bf16 and cd.cpu_compute_dtype().bf16
    assert calls == ["float32", "bfloat16", "float32", "bfloat16"]  # two rounds, taking turns, once


def test_a_slow_first_turn_of_one_dtype_does_not_decide(monkeypatch):
    """bf16 at half speed in its first turn (AMX's first milliseconds on a Xeon, measured) gives a
    ratio under the threshold; the best of two turns gives the machine's."""
    rates = {"float32": [2e11, 2e11], "bfloat16": [2.8e11, 1e12]}
    monkeypatch.setattr(cd, "matmul_rate", lambda name, **k: rates[name].pop(0))
    assert cd.measured_rates() == (2e11, 1e12)


def test_matmul_rate_runs_for_its_minimum_time():
    t0 = time.perf_counter()
    cd.matmul_rate("float32", n=64, repeats=1, min_seconds=0.05)
    assert time.perf_counter() - t0 >= 0.05


def test_bad_env_value_is_one_line():
    with pytest.raises(ConfigError, match="VF_CPU_DTYPE='half' is not a dtype") as info:
        cd.from_env("half")
    assert "bfloat16, float32 or auto" in info.value.hint


def test_matmul_rate_measures_both_dtypes():
    assert cd.matmul_rate("float32", n=128, repeats=2) > 1e6
    assert cd.matmul_rate("bfloat16", n=128, repeats=2) > 1e6


def test_bf16_auto_follows_gpu_then_cpu():
    fast, slow = cd.decide(2e11, 1e12), cd.decide(3e11, 3e11)
    assert bf16_auto(True, True, False, fast).bf16 and not bf16_auto(True, True, False, fast).use_cpu
    no_bf16_gpu = bf16_auto(True, False, False, fast)
    assert not no_bf16_gpu.bf16 and no_bf16_gpu.warn
    cpu = bf16_auto(False, False, False, fast)
    assert cpu.bf16 and cpu.use_cpu and "fp32 master weights" in cpu.line and not cpu.warn
    assert not bf16_auto(False, False, False, slow).bf16
    assert not bf16_auto(False, False, True, fast).bf16  # DeepSpeed on CPU keeps fp32


@pytest.mark.parametrize(("env", "bf16"), [("bfloat16", True), ("float32", False)])
def test_grpo_defaults_and_rlconfig_resolve_auto_on_cpu(monkeypatch, env, bf16):
    import torch

    import verifiers as vf

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(fields_mod, "_installed", lambda module: False)
    monkeypatch.setenv(cd.ENV, env)
    args = vf.grpo_defaults("r", report_to="none")
    assert args.bf16 is bf16 and args.use_cpu is bf16
    rl = vf.RLConfig(output_dir="/tmp/vf-dtype-test").to_grpo_config(world_size=1)
    assert rl.bf16 is bf16
    # Asked for by name, it holds either way: False stays fp32, True trains in CPU bf16 autocast.
    assert vf.grpo_defaults("r", report_to="none", bf16=False).bf16 is False
    assert vf.grpo_defaults("r", report_to="none", bf16=True).bf16 is True


@pytest.mark.parametrize(
    ("env", "flags", "want"),
    [
        ("bfloat16", [], "bfloat16"),
        ("float32", [], "float32"),
        ("bfloat16", ["--dtype", "float32"], "float32"),  # the user's --dtype wins
    ],
)
def test_vf_vllm_serves_the_cpu_dtype_unless_told(monkeypatch, capsys, env, flags, want):
    from verifiers.inference.server.main import parse_args

    monkeypatch.setenv(cd.ENV, env)
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0")  # leave this process's binding alone
    args, _ = parse_args(["m", *flags])
    assert str(args.dtype) == want
    said = capsys.readouterr().err
    assert ("vf-vllm: serving in" in said) is (not flags)


def test_the_run_header_names_the_precision_and_why(monkeypatch):
    from types import SimpleNamespace

    import torch

    from verifiers.training.rl.trainer import _describe_precision

    cpu = torch.device("cpu")
    monkeypatch.setenv(cd.ENV, "bfloat16")
    line = _describe_precision(SimpleNamespace(device=cpu, bf16=True, fp16=False))
    assert line.startswith("Precision: bf16 autocast on CPU, fp32 master weights") and "VF_CPU_DTYPE" in line
    assert "though this CPU computes bf16 faster" in _describe_precision(
        SimpleNamespace(device=cpu, bf16=False, fp16=False)
    )
    cd.cpu_compute_dtype.cache_clear()
    monkeypatch.setenv(cd.ENV, "float32")
    assert _describe_precision(SimpleNamespace(device=cpu, bf16=False, fp16=False)).startswith(
        "Precision: fp32; CPU"
    )
    gpu = SimpleNamespace(device=torch.device("cuda"), bf16=True, fp16=False)
    assert _describe_precision(gpu) == "Precision: bf16 autocast on GPU, fp32 master weights and log-softmax"

"""Exit statuses of launched runs (issue 26): a finished run of any layout exits 0; a failed run
exits non-zero with its one-line cause.

Each case launches ``tests/drivers/dist_train.py`` (tiny model, 2 steps, the fake OpenAI server)
on CPU over gloo and checks the launcher's exit status and what every rank printed:

================  ===================================  =========================================
layout            ``accelerate launch``                ``torchrun`` (``python -m torch.distributed.run``)
================  ===================================  =========================================
one process       ``--num_processes 1``                ``--nproc_per_node 1``
DDP, 2            ``--multi_gpu`` + ACCELERATE_USE_CPU ``--nproc_per_node 2``
ZeRO-3, 2         ``configs/zero3-cpu.yaml``           ZERO3_ENV (tests/doubles/launch.py)
FSDP, 2           skipped: no FSDP without GPUs        skipped: the same
================  ===================================  =========================================

On a GPU machine (marked ``gpu``; skipped without CUDA) the same run is launched as users launch
it there, in bf16: one process, FSDP2 (``configs/fsdp.yaml``) and ZeRO-3 (``configs/zero3.yaml``)
on as many GPUs as there are (two at most; FSDP and ZeRO-3 run as their own engines on one GPU),
DDP on two, each under both launchers, plus a failed FSDP run. Each finished rank must report the
engine the config asks for (accelerate's ``distributed_type``), never a silent fallback. On one
H100 (2026-11-26): 8 passed, DDP skipped.

Why each launch looks the way it does on a machine without CUDA (read from accelerate 1.15's
``state.py`` and transformers 5's ``TrainingArguments._setup_devices``):

- DDP under plain torchrun: without ``ACCELERATE_USE_CPU`` accelerate would find no accelerator
  and record the run as ``DistributedType.NO`` although the gloo group is up (no DDP wrapper, and
  the first broadcast returned ``None`` on rank 1, a ``TypeError``), so ``GRPOConfig`` sets
  ``use_cpu`` itself when several processes start without CUDA or DeepSpeed
  (``config/collective.py``); an FSDP launch or ``GRPOConfig(deepspeed=...)`` there stops in one line.
- ZeRO-3 under torchrun takes the variables ``accelerate launch`` exports for
  ``configs/zero3-cpu.yaml`` (``ACCELERATE_USE_DEEPSPEED`` and friends). ``GRPOConfig(deepspeed=
  "ds.json")`` does not work there: transformers' DeepSpeed branch hands accelerate no backend,
  and with no accelerator and no backend accelerate counts one process, so DeepSpeed fails
  its ``train_batch_size`` assertion (4 != 4 * 1 * 2).
- FSDP: accelerate selects ``DistributedType.FSDP`` only on top of an accelerator's
  multi-device type (MULTI_GPU, MULTI_NPU, ...), never MULTI_CPU; an FSDP config on CPU ends
  as ``DistributedType.NO`` with the ``TypeError`` above (``use_cpu``: plain DDP, FSDP ignored).

vf-rl's exit statuses are covered elsewhere: a finished vf-rl run (server + trainer) exits 0 in
``tests/cli/test_cli_real_runs.py::test_vf_rl_plain_cpu_config_starts_its_server_and_trains``
and ``tests/cli/rl/test_rl_supervision.py::test_vf_rl_run_survives_its_server_killed_mid_run``;
a failed trainer gives vf-rl its status and one ``error: training failed with exit status N``
line in ``tests/cli/rl/test_rl_launcher.py::test_launcher_exit_status_follows_a_failed_trainer``;
a bad config exits 2 with one line and no traceback in
``tests/cli/rl/test_rl_cli.py::test_vf_rl_subprocess_error_has_no_traceback``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from tests.doubles.launch import ROOT, command, run  # noqa: E402

pytestmark = pytest.mark.slow

SCRIPT = ROOT / "tests" / "drivers" / "dist_train.py"
STEPS = 2
LIMIT_S = 300  # one launch on a busy 2-core machine (a ZeRO-3 one takes ~35 s)

FSDP_ON_CPU = (
    "FSDP needs GPUs: accelerate sets DistributedType.FSDP only over an accelerator's multi-device "
    "type, never MULTI_CPU (accelerate/state.py); on CPU an FSDP config runs as DistributedType.NO "
    "(rank 1's first broadcast gets None) or, with use_cpu, as plain DDP"
)


def launch(
    layout: str,
    launcher: str,
    model: Path,
    url: str,
    out: Path,
    *args: str,
    device: str = "cpu",
    world: int = 0,
) -> tuple[int, str, int]:
    """Run ``dist_train.py``; (exit status, output, process count). Prints the time it took."""
    world = world or (1 if layout == "single" else 2)
    cmd, env = command(layout, launcher, world, device=device)
    script = [
        str(SCRIPT),
        "--fake",
        url,
        "--model",
        str(model),
        "--out",
        str(out),
        "--steps",
        str(STEPS),
        *args,
    ]
    what = f"{layout} under {launcher}" + (f" on {world} GPU(s)" if device == "cuda" else "")
    rc, text, seconds = run([*cmd, *script], env, LIMIT_S, what)
    print(f"{what}: exit {rc} after {seconds:.1f} s")
    return rc, text, world


LAUNCHERS = ("accelerate", "torchrun")


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("layout", ["single", "ddp", "zero3", "fsdp"])
def test_a_finished_run_exits_0(layout, launcher, tiny_model_dir, fake_url, tmp_path):
    if layout == "fsdp":
        pytest.skip(FSDP_ON_CPU)
    rc, text, world = launch(layout, launcher, tiny_model_dir, fake_url, tmp_path)
    assert rc == 0, f"{layout} under {launcher}: exit {rc}\n{text[-6000:]}"
    for r in range(world):
        assert f"dist_train rank {r}/{world}: done, {STEPS} steps" in text, text[-3000:]
        rec = json.loads((tmp_path / f"rank{r}.json").read_text())
        assert (rec["world_size"], rec["global_step"], rec["zero3"]) == (world, STEPS, layout == "zero3")
        if layout == "zero3":  # really sharded, not a silent fallback to one whole copy per rank
            assert rec["local_numel"] < rec["model_numel"], rec
    assert "terminate called" not in text and "Exception ignored" not in text, text[-3000:]


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_failed_run_exits_non_zero_with_its_cause(launcher, tiny_model_dir, fake_url, tmp_path):
    # An exception on rank 1 as step 2 begins: the launcher stops rank 0 and exits non-zero, and
    # the output names the cause in one line.
    rc, text, _ = launch("ddp", launcher, tiny_model_dir, fake_url, tmp_path, "--crash-rank", "1")
    assert rc != 0, text[-3000:]
    cause = r"^(\[rank1\]: )?RuntimeError: injected failure on rank 1 at step 2$"
    assert re.search(cause, text, re.M), text[-4000:]
    assert "dist_train rank 1/2: done" not in text


# -- on GPUs: the users' own launches (configs/zero3.yaml, configs/fsdp.yaml, bf16) ----------------

DISTRIBUTED_TYPE = {"single": "NO", "ddp": "MULTI_GPU", "zero3": "DEEPSPEED", "fsdp": "FSDP"}


def gpus(layout: str) -> int:
    """How many processes a GPU case starts: one per GPU, two at most; FSDP and ZeRO-3 also run
    (as their own engines, on a 1-rank group) on a machine with one GPU, DDP does not."""
    import torch

    count = torch.cuda.device_count()
    if layout == "ddp" and count < 2:
        pytest.skip("DDP needs 2 GPUs; this machine has 1")
    return 1 if layout == "single" else min(2, count)


@pytest.mark.gpu
@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("layout", ["single", "ddp", "zero3", "fsdp"])
def test_a_finished_run_on_gpus_exits_0(layout, launcher, tiny_model_dir, fake_url, tmp_path):
    world = gpus(layout)
    rc, text, _ = launch(
        layout, launcher, tiny_model_dir, fake_url, tmp_path, "--bf16", device="cuda", world=world
    )
    assert rc == 0, f"{layout} under {launcher}: exit {rc}\n{text[-6000:]}"
    for r in range(world):
        assert f"dist_train rank {r}/{world}: done, {STEPS} steps" in text, text[-3000:]
        rec = json.loads((tmp_path / f"rank{r}.json").read_text())
        assert (rec["world_size"], rec["global_step"], rec["zero3"]) == (world, STEPS, layout == "zero3")
        # accelerate names a one-process run's device "cuda", a distributed one's "cuda:<rank>".
        assert rec["device"] in ("cuda", f"cuda:{r}"), rec["device"]
        # The engine the config asks for, never a silent fallback (torchrun with one process is
        # accelerate's MULTI_GPU over a 1-rank group).
        expected = DISTRIBUTED_TYPE[layout]
        if layout == "single" and launcher == "torchrun":
            expected = "MULTI_GPU"
        assert rec["distributed_type"] == expected, rec["distributed_type"]
        assert rec["sync_mode"]
    assert "terminate called" not in text and "Exception ignored" not in text, text[-3000:]


@pytest.mark.gpu
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_failed_run_on_a_gpu_exits_non_zero_with_its_cause(launcher, tiny_model_dir, fake_url, tmp_path):
    rc, text, _ = launch(
        "fsdp", launcher, tiny_model_dir, fake_url, tmp_path, "--bf16", "--crash-rank", "0",
        device="cuda", world=1,
    )  # fmt: skip
    assert rc != 0, text[-3000:]
    cause = r"^(\[rank0\]: )?RuntimeError: injected failure on rank 0 at step 2$"
    assert re.search(cause, text, re.M), text[-4000:]
    assert "dist_train rank 0/1: done" not in text

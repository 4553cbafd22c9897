"""Launching a driver script (``tests/drivers/``) the way users launch training, on CPU.

Stands in for a user's ``accelerate launch`` / ``torchrun`` command line (``finish`` waits for a
launched run and fails the test with its logs). Used by the default and slow tiers' launched
runs (tests/training/: test_distributed.py, lifecycle/, test_soak.py).

``command(layout, launcher)`` gives the argv prefix and extra environment of one launch:

===========  ==================================  ===========================================
layout       ``accelerate`` (``accelerate launch``)  ``torchrun`` (``python -m torch.distributed.run``)
===========  ==================================  ===========================================
``single``   ``--num_processes 1``               ``--nproc_per_node 1``
``ddp``      ``--multi_gpu`` + ACCELERATE_USE_CPU  ``--nproc_per_node 2`` (GRPOConfig picks DDP on CPU)
``zero3``    ``configs/zero3-cpu.yaml``          ``ZERO3_ENV``, what accelerate exports for it
===========  ==================================  ===========================================

On a GPU machine (``device="cuda"``) the launches are the users' own: ``single`` and ``ddp``
without ACCELERATE_USE_CPU, ``zero3`` with ``configs/zero3.yaml`` (bf16), ``fsdp`` with
``configs/fsdp.yaml`` (FSDP2, bf16), torchrun with what accelerate exports for those configs
(``ZERO3_GPU_ENV``, ``FSDP_GPU_ENV``). ``processes`` there is how many GPUs the run takes.

``launcher=None`` runs the script as a plain ``python`` process (one process, no launcher).
``run`` starts it with a clean environment and ends it within a time limit: on a timeout the
launcher gets SIGTERM, and torchrun SIGKILLs its workers (their own sessions, out of our reach)
5 s later (``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``), so no hung rank outlives the test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.doubles.vllm_server import free_port

ROOT = Path(__file__).resolve().parents[2]
ZERO3_CPU = ROOT / "configs" / "zero3-cpu.yaml"
# What `accelerate launch --config_file configs/zero3-cpu.yaml` exports to its workers.
ZERO3_ENV = {
    "ACCELERATE_USE_DEEPSPEED": "true",
    "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3",
    "ACCELERATE_DEEPSPEED_ZERO3_INIT": "true",
    "ACCELERATE_MIXED_PRECISION": "no",
}
ZERO3_GPU = ROOT / "configs" / "zero3.yaml"
FSDP_GPU = ROOT / "configs" / "fsdp.yaml"
# What `accelerate launch --config_file configs/zero3.yaml` / `configs/fsdp.yaml` export to their workers.
ZERO3_GPU_ENV = {**ZERO3_ENV, "ACCELERATE_MIXED_PRECISION": "bf16"}
FSDP_GPU_ENV = {
    "ACCELERATE_USE_FSDP": "true",
    "FSDP_VERSION": "2",
    "FSDP_AUTO_WRAP_POLICY": "TRANSFORMER_BASED_WRAP",
    "FSDP_RESHARD_AFTER_FORWARD": "true",
    "FSDP_OFFLOAD_PARAMS": "false",
    "FSDP_STATE_DICT_TYPE": "SHARDED_STATE_DICT",
    "FSDP_CPU_RAM_EFFICIENT_LOADING": "true",
    "ACCELERATE_MIXED_PRECISION": "bf16",
}
# Set by a launch when it needs them, never inherited: ACCELERATE_USE_CPU would make accelerate
# ignore DeepSpeed, and a ZeRO-3 or FSDP variable would turn a DDP launch into a sharded one.
LAUNCH_VARIABLES = ("ACCELERATE_USE_CPU", *ZERO3_GPU_ENV, *FSDP_GPU_ENV)


# What torchrun's workers need to run as accelerate would start them, per device and layout.
TORCHRUN_ENV = {"cpu": {"zero3": ZERO3_ENV}, "cuda": {"zero3": ZERO3_GPU_ENV, "fsdp": FSDP_GPU_ENV}}


def command(
    layout: str, launcher: str | None = "accelerate", processes: int | None = None, device: str = "cpu"
) -> tuple[list[str], dict[str, str]]:
    """(argv up to the script, extra environment) of one launch; ``processes`` overrides the layout's
    count (1 for ``single``, else 2)."""
    world = processes or (1 if layout == "single" else 2)
    if layout == "zero3":
        pytest.importorskip("deepspeed")
    env: dict[str, str] = {}
    if launcher is None:
        assert world == 1 and layout == "single", "a plain python process is one process"
        return [sys.executable], env
    if launcher == "accelerate":
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--main_process_port", str(free_port())]
        cmd += ["--log_dir", os.devnull]  # as vf-rl launches: no /tmp/torchelastic_* folder a launch
        if device == "cuda":
            cmd += _accelerate_gpu_args(layout, world)
        elif layout == "zero3":
            cmd += ["--config_file", str(ZERO3_CPU)]  # 2 processes
            if processes is not None:
                cmd += ["--num_processes", str(processes)]
        else:
            multi = ["--multi_gpu"] if world > 1 else []
            cmd += [*multi, "--num_processes", str(world), "--num_machines", "1", "--mixed_precision", "no",
                    "--dynamo_backend", "no"]  # fmt: skip
            if layout == "ddp":
                env["ACCELERATE_USE_CPU"] = "1"  # `--cpu` would start one process
    elif launcher == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(world),
               "--master_port", str(free_port()), "--log-dir", os.devnull]  # fmt: skip
        env.update(TORCHRUN_ENV[device].get(layout, {}))
    else:
        raise ValueError(f"unknown launcher {launcher!r}")
    return cmd, env


def _accelerate_gpu_args(layout: str, world: int) -> list[str]:
    """``accelerate launch`` on ``world`` GPUs, configured as docs/training.md tells users to."""
    if layout in ("zero3", "fsdp"):
        args = ["--config_file", str(ZERO3_GPU if layout == "zero3" else FSDP_GPU)]
    else:
        args = ["--multi_gpu"] if world > 1 else []
        args += ["--num_machines", "1", "--mixed_precision", "bf16", "--dynamo_backend", "no"]
    return [*args, "--num_processes", str(world)]


def run(argv: list[str], extra_env: dict[str, str], limit_s: float, what: str) -> tuple[int, str, float]:
    """Run ``argv`` from the repository root; (exit status, stdout and stderr together, seconds).
    Fails the test, with the output's tail, if it has not ended within ``limit_s``."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    for name in LAUNCH_VARIABLES:
        env.pop(name, None)
    env.update(extra_env)
    env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = "5"
    start = time.monotonic()
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        text, _ = proc.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            text, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            text, _ = proc.communicate()
        pytest.fail(f"{what} did not end within {limit_s:.0f} s:\n{(text or '')[-4000:]}")
    return proc.returncode, text, time.monotonic() - start


def finish(proc: subprocess.Popen, run: Path, timeout: float = 300) -> None:
    try:
        rc = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        rc = "timeout"
    if rc != 0:
        logs = "".join(p.read_text(errors="replace")[-3000:] for p in sorted(run.glob("*.log")))
        pytest.fail(f"training run failed ({rc}):\n{logs}")

"""The config side of training across processes: the collective timeout a run needs, and gloo on CPUs.

``training/processes.py`` explains the waits: the other processes wait for the main one in
short collectives, so ``ddp_timeout`` only has to outlast what the main process does alone
between two of them (one weight push, one generation batch, a checkpoint write).
``GRPOConfig`` derives and checks ``ddp_timeout`` from these; nothing here touches a process
group (``processes.start_training_processes`` applies the value where training starts).
"""

from __future__ import annotations

import math
from typing import Any

from verifiers.errors import ConfigError

COLLECTIVE_MARGIN_S = 30  # above the longest lone wait: heartbeats, the rest of the step, slow hosts
CHECKPOINT_WRITE_S = 1800  # TrainingArguments' default ddp_timeout: a large model's checkpoint write


def min_collective_timeout(args: Any) -> int:
    """The shortest ``ddp_timeout`` that outlasts the longest wait the main process does alone."""
    lone = max(args.sync_weights_timeout, args.async_generation_timeout)
    return math.ceil(lone) + COLLECTIVE_MARGIN_S


def collective_timeout(args: Any) -> int:
    """The derived ``ddp_timeout``: ``min_collective_timeout``, at least ``CHECKPOINT_WRITE_S``."""
    return max(CHECKPOINT_WRITE_S, min_collective_timeout(args))


def env_flag(name: str) -> bool:
    """An accelerate launcher variable set to a true value (``1``/``true``/``yes``)."""
    import os

    return os.environ.get(name, "").lower() in ("1", "true", "yes")


def deepspeed_launched(kwargs: dict[str, Any]) -> bool:
    """DeepSpeed asked for: a ``deepspeed`` config among a config's keyword arguments, or accelerate's launcher."""
    return bool(kwargs.get("deepspeed")) or env_flag("ACCELERATE_USE_DEEPSPEED")


def cpu_distributed_backend(args: Any) -> None:
    """Several processes on a machine without CUDA (``accelerate launch`` or ``torchrun``): gloo, as DDP
    on CPU (``use_cpu``) unless DeepSpeed is launched; FSDP refused (accelerate runs it on CUDA only).

    DeepSpeed does not pick it by itself (it then fails a ``train_batch_size``
    assertion), and ``use_cpu`` / ``ACCELERATE_USE_CPU=1`` make accelerate skip
    DeepSpeed altogether, which would leave a ZeRO-3-partitioned model untrained.
    """
    import os

    import torch

    if env_flag("ACCELERATE_USE_DEEPSPEED") and (args.use_cpu or env_flag("ACCELERATE_USE_CPU")):
        raise ConfigError(
            "use_cpu=True (or ACCELERATE_USE_CPU=1) makes accelerate ignore the DeepSpeed config",
            hint="on a CPU-only machine launch DeepSpeed without use_cpu / ACCELERATE_USE_CPU "
            "(gloo is then chosen automatically), e.g. accelerate launch --config_file "
            "configs/zero3-cpu.yaml train.py",
        )
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or torch.cuda.is_available():
        return
    deepspeed = env_flag("ACCELERATE_USE_DEEPSPEED")
    if env_flag("ACCELERATE_USE_FSDP") or args.fsdp:
        # accelerate runs FSDP only over CUDA devices: on CPU the ranks would not form one run.
        raise ConfigError(
            "FSDP needs CUDA devices: this machine has none",
            hint="on CPU train with DDP (torchrun --nproc_per_node N ..., or accelerate launch --multi_gpu "
            "with ACCELERATE_USE_CPU=1) or ZeRO-3 (accelerate launch --config_file configs/zero3-cpu.yaml)",
        )
    if args.deepspeed and not deepspeed:
        # Without accelerate's launcher variables, accelerate counts one process on a CPU machine and
        # DeepSpeed then fails on train_batch_size.
        raise ConfigError(
            f"deepspeed={args.deepspeed!r} with several processes on a CPU-only machine needs accelerate's launcher",
            hint="accelerate launch --config_file configs/zero3-cpu.yaml train.py",
        )
    if not deepspeed:
        # Several processes without CUDA (torchrun, or accelerate launch without --cpu): the ranks
        # train as one DDP run on CPU, as ACCELERATE_USE_CPU=1 would ask; without it accelerate takes
        # each process for a run of its own.
        args.use_cpu = True
    if args.ddp_backend is None:
        args.ddp_backend = "gloo"

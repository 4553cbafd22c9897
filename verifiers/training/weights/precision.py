"""The trained weights' dtypes, set once before training: fp32 master weights, and a frozen base
stored in the autocast dtype.

- ``keep_fp32_master_weights``: trainable bf16/fp16 parameters upcast to fp32, unless DeepSpeed
  keeps fp32 masters of its own (then only a warning where it cannot).
- ``frozen_linears_in_autocast_dtype``: under bf16/fp16 autocast, the frozen weights of the
  body's Linear layers (a LoRA base) stored in that dtype.

``engine`` is the engine that owns the parameters: ``"deepspeed"``, ``"fsdp"`` or None.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from verifiers.utils.logging import warn_once

logger = logging.getLogger("verifiers.training.trainer")  # the trainer's lines, as before this module


def deepspeed_mixed_precision(args: Any, accelerator: Any) -> bool:
    """Whether DeepSpeed trains with bf16/fp16 on (then its optimizer keeps fp32 master weights)."""
    config = accelerator.state.deepspeed_plugin.deepspeed_config
    for key, on in (("bf16", args.bf16), ("fp16", args.fp16)):
        enabled = (config.get(key) or {}).get("enabled", False)
        if enabled is True or (enabled == "auto" and on):
            return True
    return False


def keep_fp32_master_weights(
    model: Any, args: Any, accelerator: Any, *, engine: str | None, log: bool
) -> None:
    """Upcast trainable bf16/fp16 parameters to fp32 (compute stays bf16 under ``args.bf16``'s
    autocast), unless DeepSpeed keeps fp32 masters of its own.

    An AdamW step moves a weight by about ``lr`` (1e-6 to 1e-5 here); a bf16 weight of size
    0.02 has a spacing of 1.2e-4, so most updates round back to the old value and the run
    silently stops learning. DeepSpeed with bf16/fp16 on keeps fp32 partitions; FSDP2 under
    mixed precision upcasts as done here (accelerate's ``fsdp2_prepare_model``); PEFT keeps its
    adapters in fp32 already (``autocast_adapter_dtype``), but not ``modules_to_save``.
    ``log``: this is the main process (it says what it did)."""
    half = (torch.bfloat16, torch.float16)
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad and p.dtype in half]
    if not trainable:
        return
    if engine == "deepspeed":
        if not deepspeed_mixed_precision(args, accelerator):
            warn_once(
                logger,
                "bf16-weights-under-deepspeed",
                "%d trainable parameters are %s and DeepSpeed runs without bf16/fp16, so it keeps no "
                "fp32 master copy: most updates round away; set bf16=True (or load the model in fp32)",
                len(trainable),
                trainable[0][1].dtype,
            )
        return
    dtype = trainable[0][1].dtype
    for _, p in trainable:
        p.data = p.data.to(torch.float32)
    if log:
        compute = "bf16 autocast" if args.bf16 else ("fp16 autocast" if args.fp16 else "fp32")
        logger.info(
            "full fine-tuning keeps fp32 master weights: %d trainable %s parameters upcast to fp32 "
            "(compute: %s; %s updates round away below lr ~1e-4); LoRA or ZeRO-3 use less memory",
            len(trainable),
            str(dtype).removeprefix("torch."),
            compute,
            str(dtype).removeprefix("torch."),
        )


def frozen_linears_in_autocast_dtype(model: Any, args: Any, *, engine: str | None, log: bool) -> None:
    """Under bf16/fp16 autocast, store the frozen weights of the body's Linear layers (a LoRA
    base) of ``model`` (unwrapped) in that dtype, once.

    Autocast casts a weight at every matmul and keeps the cast only for leaves that require
    grad, so a frozen fp32 base (how a model loads on CPU) is cast again in every forward and
    backward. Stored in the compute dtype, each matmul reads the values autocast's cast gave
    (the same rounding), so results do not change; on CPU (SmolLM2 + LoRA, 700 tokens,
    forward + backward) 2.24 s became 1.95 s, and the base takes half the memory. Left
    alone: trainable weights (fp32 masters), the input and output embeddings (a lookup or
    the chunked head reads them outside a Linear's forward), and DeepSpeed/FSDP models
    (their engines own the parameters)."""
    half = torch.bfloat16 if args.bf16 else (torch.float16 if args.fp16 else None)
    if half is None or engine is not None:
        return
    skip = {
        id(m.weight) for m in (model.get_input_embeddings(), model.get_output_embeddings()) if m is not None
    }
    cast = 0
    for module in model.modules():
        if type(module) is not torch.nn.Linear or id(module.weight) in skip:
            continue
        for p in (module.weight, module.bias):
            if p is not None and not p.requires_grad and p.dtype == torch.float32:
                p.data = p.data.to(half)
                cast += 1
    if cast:
        # A model loaded from safetensors on CPU keeps its tensors in the file's memory map,
        # which stays mapped (and resident) while any of them lives: the embeddings and norms
        # kept the whole fp32 file, so casting the Linears *added* their bf16 copies (SmolLM2:
        # +296 MB). Own storage for the rest releases the map (the step's peak: -330 MB).
        for t in [*(p for p in model.parameters() if not p.requires_grad), *model.buffers()]:
            if t.dtype != half:
                t.data = t.data.clone()
    if cast and log:
        logger.info("%d frozen Linear tensors stored in %s (the autocast dtype they compute in)", cast, half)

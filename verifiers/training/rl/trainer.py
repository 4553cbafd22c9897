"""``RLTrainer``: a ``GRPOTrainer`` configured by an ``RLConfig`` (see rl.py for the config)."""

from __future__ import annotations

import os
import time
from typing import Any

from transformers import PrinterCallback, ProgressCallback

from verifiers.errors import ConfigError
from verifiers.training.rl.config import RLConfig
from verifiers.training.rl.output import say, show_choices
from verifiers.training.trainer import GRPOTrainer
from verifiers.training.weights.sync import is_peft_model


class RLTrainer(GRPOTrainer):
    """``GRPOTrainer`` configured by an ``RLConfig``: ``RLTrainer(model, env, args=RLConfig(...))``.

    ``model`` is a model or a name (hub id, folder, ``"smollm2"``); given a name, the
    tokenizer is loaded with it unless ``processing_class`` is passed. LoRA is applied
    from ``args`` (unless the model already is a PEFT model).
    """

    def __init__(
        self,
        model: Any,
        env: Any,
        args: RLConfig | None = None,
        processing_class: Any = None,
        callbacks: list | None = None,
        client: Any = None,
    ):
        args = RLConfig() if args is None else args
        if not isinstance(args, RLConfig):
            raise ConfigError(
                f"args must be an RLConfig, got {type(args).__name__}",
                hint="use vf.GRPOTrainer for a GRPOConfig",
            )
        grpo_args = args.to_grpo_config()
        model, processing_class = _load_model(model, processing_class)
        peft_config = None if is_peft_model(model) else args.lora_config()
        for var, value in args.wandb_environment().items():
            os.environ.setdefault(var, value)
        super().__init__(
            model=model,
            processing_class=processing_class,
            env=env,
            args=grpo_args,
            peft_config=peft_config,
            callbacks=[*args.callbacks(), *(callbacks or [])],
            client=client,
        )
        self.rl_args = args
        # The step line replaces the raw log dicts and the progress bar.
        self.remove_callback(PrinterCallback)
        self.remove_callback(ProgressCallback)
        show_choices()  # the schedule (cpu_phases) and LoRA sync chosen at start, in the run log
        say(_describe_model(self.model, args if peft_config is not None else None))
        say(_describe_precision(self.args))

    def train(self, resume_from_checkpoint: str | bool | None = None, trial=None, **kwargs):
        """Train as ``GRPOTrainer`` does (which first waits for the server), with start-up lines."""
        a = self.rl_args
        say(
            f"Inference server: http://{a.vllm_server_host}:{a.vllm_server_port} "
            f"(waiting up to {a.vllm_server_timeout:.0f} s for it to be ready)"
        )
        say(f"Training {self.args.max_steps} steps; outputs in {self.args.output_dir}")
        return super().train(resume_from_checkpoint=resume_from_checkpoint, trial=trial, **kwargs)


def _load_model(model: Any, processing_class: Any) -> tuple[Any, Any]:
    """``(model, tokenizer)``: load by name when given one, else the tokenizer of the model's name."""
    from verifiers.models import get_model, get_tokenizer

    if isinstance(model, (str, os.PathLike)):
        name = os.fspath(model)
        say(f"Loading model {name}")
        started = time.perf_counter()
        loaded = get_model(name)
        processing_class = processing_class if processing_class is not None else get_tokenizer(name)
        say(f"Loaded model {name} in {time.perf_counter() - started:.1f} s")
        return loaded, processing_class
    if processing_class is None:
        name = getattr(getattr(model, "config", None), "_name_or_path", None)
        if not name:
            raise ConfigError(
                "processing_class is required when model is a model object without a name",
                hint="pass processing_class=tokenizer, or pass the model's name instead",
            )
        processing_class = get_tokenizer(name)
    return model, processing_class


def _describe_precision(args: Any) -> str:
    """One line: the compute dtype, and on a CPU why (utils/compute_dtype.py's choice)."""
    cpu = args.device.type == "cpu"
    choice = None
    if cpu:
        from verifiers.utils.compute_dtype import cpu_compute_dtype

        choice = cpu_compute_dtype()
    if args.bf16 or args.fp16:
        half = "bf16" if args.bf16 else "fp16"
        why = f"; {choice.line()}" if choice is not None else ""
        return f"Precision: {half} autocast on {'CPU' if cpu else 'GPU'}, fp32 master weights and log-softmax{why}"
    if choice is not None and choice.bf16:
        return f"Precision: fp32 (bf16=False, though this CPU computes bf16 faster: {choice.reason})"
    return f"Precision: fp32{f'; {choice.line()}' if choice is not None else ''}"


def _describe_model(model: Any, lora_from: RLConfig | None) -> str:
    """One line: parameter counts and what trains (``lora_from``: the config whose LoRA was applied)."""
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if lora_from is not None:
        what = f"LoRA r={lora_from.lora_rank} alpha={lora_from.lora_alpha} on {', '.join(lora_from.target_modules)}"
    else:
        what = "the model's own LoRA adapter" if is_peft_model(model) else "full fine-tuning"
    return f"Model: {total / 1e6:.1f}M parameters, {trainable / 1e6:.2f}M trainable ({what})"

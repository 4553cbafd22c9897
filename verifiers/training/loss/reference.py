"""The reference model of the KL term (``beta > 0``): one object, its log-probs and its sync.

``Reference(policy, accelerator, args, ...)`` picks its form once:

- PEFT: no copy; the reference is the policy with its adapter disabled.
- ZeRO-3: a frozen copy of the policy as its own DeepSpeed engine, sharded like the policy
  (``zero3_reference``; every rank builds it, and each forward is then collective).
- Otherwise: a frozen copy of the policy (``make_reference``) on the training device.

``logprobs(ids, attn, start)`` scores a micro-batch (the trainer calls it on every rank for
each of its micro-batches, so under ZeRO-3 the collective forwards pair up);
``after_step(step)`` mixes the copy toward the policy every ``ref_model_sync_steps`` steps when
``sync_ref_model`` (TR-DPO, ``mix_into_reference``), gathered like the weight sync.
With ``beta = 0`` it holds no copy and is never asked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from verifiers.errors import ConfigError
from verifiers.training.loss.logprobs import eval_logprobs
from verifiers.training.shards import GatherFn, no_gather, param_shape, zero3_gather


class Reference:
    """The KL term's reference (see the module): ``model`` is the frozen copy, or None (PEFT: the
    adapter-disabled policy; ``beta = 0``: none).

    ``policy`` returns the policy as trained now (``Trainer`` may wrap it after this is built);
    ``unwrap`` is the trainer's ``accelerator.unwrap_model``; ``gather`` gathers the policy's and
    the copy's shards when mixing (``zero3_gather`` under ZeRO-3).
    """

    def __init__(
        self,
        policy: Callable[[], Any],
        accelerator: Any,
        args: Any,
        *,
        peft: bool,
        zero3: bool,
        unwrap: Callable[[Any], Any],
        gather: GatherFn = no_gather,
    ):
        self._policy, self._accelerator, self._args = policy, accelerator, args
        self._unwrap, self._gather = unwrap, gather
        self.model: torch.nn.Module | None = None
        if args.beta > 0 and not peft:  # with PEFT: the adapter-disabled model
            model = unwrap(policy())
            if zero3:
                ds_config = accelerator.state.deepspeed_plugin.deepspeed_config
                self.model = zero3_reference(model, ds_config)
            else:
                self.model = make_reference(model).to(args.device)

    def logprobs(self, ids: torch.Tensor, attn: torch.Tensor, start: int) -> torch.Tensor:
        """The reference's log-probs of ``ids[:, start:]`` (on the CPU, like ``eval_logprobs``)."""
        args = self._args
        if self.model is not None:
            # The policy's forward runs under accelerate's autocast (prepare_model); the reference,
            # an unprepared copy of its fp32 master weights, must compute in the same precision.
            with self._accelerator.autocast():
                return eval_logprobs(self.model, ids, attn, start, args.temperature, args.device)
        policy = self._policy()
        with self._unwrap(policy).disable_adapter():  # PEFT: reference = base model
            return eval_logprobs(policy, ids, attn, start, args.temperature, args.device)

    def after_step(self, step: int) -> None:
        """After optimizer step ``step``: mix the copy toward the policy when it is due."""
        a = self._args
        if self.model is not None and a.sync_ref_model and step % a.ref_model_sync_steps == 0:
            # Under ZeRO-3 both models are gathered a few tensors at a time: every rank gets here.
            unwrap = self._accelerator.unwrap_model
            mix_into_reference(
                unwrap(self.model), unwrap(self._policy()), a.ref_model_mixup_alpha, gather=self._gather
            )


def make_reference(model: torch.nn.Module) -> torch.nn.Module:
    """A frozen copy of ``model`` for the KL term (without PEFT; with PEFT the reference is the
    adapter-disabled model itself)."""
    import copy

    ref = copy.deepcopy(model).eval()
    ref.requires_grad_(False)
    return ref


def is_partitioned(model: torch.nn.Module) -> bool:
    """Whether ``model``'s parameters are ZeRO-3 shards (loaded under ``deepspeed.zero.Init``)."""
    return any(hasattr(p, "ds_id") for p in model.parameters())


def inference_config(ds_config: dict[str, Any], hidden_size: int | None) -> dict[str, Any]:
    """The policy's DeepSpeed config for an engine that only runs forward passes.

    Optimizer, scheduler and optimizer offload are dropped (DeepSpeed would build an
    optimizer, or a scheduler with nothing to drive). ZeRO-3 bucket sizes the config
    leaves at ``"auto"`` get the values transformers gives the policy from the hidden size
    (it fills them only when the policy's engine is made, in ``train``).
    """
    import copy

    config = copy.deepcopy(ds_config)
    config.pop("optimizer", None)
    config.pop("scheduler", None)
    zero = config.setdefault("zero_optimization", {})
    zero.pop("offload_optimizer", None)
    if hidden_size:
        sizes = {
            "reduce_bucket_size": hidden_size * hidden_size,
            "stage3_prefetch_bucket_size": int(0.9 * hidden_size * hidden_size),
            "stage3_param_persistence_threshold": 10 * hidden_size,
        }
        zero.update({k: v for k, v in sizes.items() if zero.get(k) == "auto"})
    return config


def zero3_reference(model: torch.nn.Module, ds_config: dict[str, Any]) -> torch.nn.Module:
    """The reference for the KL term under ZeRO-3: a frozen copy of ``model`` as its own DeepSpeed
    engine, sharded like the policy (``inference_config``). Call it on every rank.

    Its forward is collective, like the policy's: every rank must run the same number of them.
    A policy loaded under ``zero.Init`` (its parameters already shards) is not copied whole:
    the copy is built sharded from ``model.config`` and filled a few gathered tensors at a time.
    """
    if not is_partitioned(model):
        ref = make_reference(model)
    else:
        if not (hasattr(model, "config") and hasattr(type(model), "_from_config")):
            raise ConfigError(
                f"beta > 0 under ZeRO-3 with a {type(model).__name__} loaded under zero.Init: its "
                "sharded reference can only be built for a transformers model",
                hint="load the model before creating GRPOConfig (then it is copied whole), or set beta=0",
            )
        dtype = next(model.parameters()).dtype
        # transformers builds it under zero.Init while the training arguments' DeepSpeed config is
        # alive (as the policy was): sharded from the start, never whole on one rank.
        ref = type(model)._from_config(model.config, dtype=dtype).eval()
        ref.requires_grad_(False)
        mix_into_reference(ref, model, 1.0, gather=zero3_gather)
        buffers = dict(model.named_buffers())
        with torch.no_grad():
            for name, b in ref.named_buffers():  # not sharded by ZeRO-3
                if name in buffers and buffers[name].shape == b.shape:
                    b.copy_(buffers[name])
    import deepspeed  # only reached under ZeRO-3

    hidden = getattr(getattr(model, "config", None), "hidden_size", None)
    engine, *_ = deepspeed.initialize(model=ref, config=inference_config(ds_config, hidden))
    engine.eval()
    return engine


@torch.no_grad()
def mix_into_reference(
    ref: torch.nn.Module,
    policy: torch.nn.Module,
    alpha: float,
    *,
    gather: GatherFn = no_gather,
    max_tensors_per_gather: int = 8,
) -> None:
    """``ref = alpha * policy + (1 - alpha) * ref``, parameter by parameter (TR-DPO style reference sync).

    Under ZeRO-3 (``gather=zero3_gather``) every rank must call it: up to ``max_tensors_per_gather``
    parameters of each model are gathered at once, mixed, and the reference's re-sharded.
    ``alpha=1`` copies the policy exactly.
    """
    current = dict(policy.named_parameters())
    pairs = []
    for name, p in ref.named_parameters():
        q = current.get(name)
        if q is None or param_shape(q) != param_shape(p):
            raise ValueError(f"reference parameter {name} {param_shape(p)} has no match in the policy")
        pairs.append((p, q))
    for i in range(0, len(pairs), max_tensors_per_gather):
        chunk = pairs[i : i + max_tensors_per_gather]
        with gather([q for _, q in chunk]), gather([p for p, _ in chunk], modify=True):
            for p, q in chunk:
                if alpha == 1.0:
                    p.copy_(q.detach())
                else:
                    p.mul_(1 - alpha).add_(q.detach().to(p.dtype), alpha=alpha)

"""Weight sync: push the trainer's weights to the vLLM server after an optimizer step.

Three modes:

- ``full``: every parameter, under its Hugging Face name (vLLM maps HF names).
- ``lora``: only the PEFT adapter (``client.update_lora``); the server must run
  with LoRA enabled.
- ``merged``: a PEFT model sent as full weights with the adapter folded in
  (``W + scale * B @ A`` computed per layer, the model itself untouched); after
  the first sync only the layers the adapter changes (and trainable tensors). Used
  when the server rejects adapters: a user who started ``vf-vllm`` plainly and
  trains with ``peft_config`` still trains, after one warning.

Under DeepSpeed ZeRO-3 parameters are sharded: they are gathered a few at a time
(``max_tensors_per_gather``) so no rank ever holds much more than one group of
full tensors; tensors are sent in requests of at most ``max_bytes_per_request``.
Under FSDP2 parameters are ``DTensor`` shards: every rank all-gathers each tensor
(``full_tensor``) in the same order, and only the main process keeps it.
Every rank calls :meth:`WeightSyncer.sync` (gathers are collective); only the
main process talks to the server.

Also here: the frozen reference model of the KL term (``make_reference``; under
ZeRO-3 ``zero3_reference``, its own sharded DeepSpeed engine) and its periodic
sync toward the policy (``mix_into_reference``), gathered the same way.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass
from typing import Any

import torch

from verifiers.errors import ConfigError, ServerError, WeightSyncError
from verifiers.utils.logging import warn_once

logger = logging.getLogger("verifiers.training.sync")

GatherFn = Callable[..., ContextManager[Any]]  # (params, modify=False) -> context


@dataclass
class SyncResult:
    """What one sync did: mode, wall time, tensors and bytes sent (0 on non-main ranks)."""

    mode: str
    seconds: float
    num_tensors: int
    num_bytes: int


@dataclass
class _Unit:
    """One tensor to send: the parameters it needs gathered and how to compute it once they are."""

    name: str
    params: list[torch.nn.Parameter]
    compute: Callable[[], torch.Tensor]


def zero3_gather(params: list[torch.nn.Parameter], modify: bool = False) -> ContextManager[Any]:
    """Gather ZeRO-3-partitioned ``params`` on every rank for the duration of the block.

    With ``modify`` the block may change them: on exit rank 0's values are broadcast and
    each rank keeps its shard of them (without it, changes are dropped with the gathered copy).
    """
    import deepspeed  # only reached under ZeRO-3

    return deepspeed.zero.GatheredParameters(params, modifier_rank=0 if modify else None)


def no_gather(params: list[torch.nn.Parameter], modify: bool = False) -> ContextManager[Any]:
    return contextlib.nullcontext()


def full_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor: an FSDP2 ``DTensor`` (this rank's shard) is all-gathered, so every rank
    must call this for the same tensors in the same order; a plain tensor is returned as is."""
    full = getattr(tensor, "full_tensor", None)
    return full() if callable(full) else tensor


def is_peft_model(model: Any) -> bool:
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


def _module_of(name: str) -> str:
    """``model.layers.0.self_attn.q_proj.weight`` -> ``model.layers.0.self_attn`` (fused siblings share it)."""
    return name.rsplit(".", 2)[0]


def _hf_name(peft_name: str, adapter: str) -> str | None:
    """PEFT parameter name -> the base model's HF name; None for adapter-only parameters."""
    if "lora_" in peft_name or ".original_module." in peft_name:
        return None
    name = peft_name.removeprefix("base_model.model.")
    name = name.replace(".base_layer.", ".").replace(f".modules_to_save.{adapter}.", ".")
    return name


class WeightSyncer:
    """Sends the model's weights (or adapter) to ``client`` after each optimizer step.

    ``client`` needs ``update_weights(list[(name, tensor)])``, ``reset_prefix_cache()``
    and, for adapters, ``update_lora(...)`` (see ``adapter_payload``). ``broadcast``
    shares the main process's fallback decision with the other ranks.
    """

    def __init__(
        self,
        client: Any,
        model: torch.nn.Module,
        *,
        is_main_process: bool = True,
        gather: GatherFn = no_gather,
        broadcast: Callable[[Any], Any] = lambda x: x,
        max_tensors_per_gather: int = 8,
        max_bytes_per_request: int = 2**30,
        use_lora: bool | None = None,
        adapter_name: str = "default",
        lora_name: str = "vf-lora",
        has_base: bool = False,
    ):
        if max_tensors_per_gather < 1:
            raise WeightSyncError(
                "setup", f"max_tensors_per_gather must be >= 1, got {max_tensors_per_gather}"
            )
        self.client, self.model = client, model
        self.is_main, self.gather, self.broadcast = is_main_process, gather, broadcast
        self.max_tensors, self.max_bytes = max_tensors_per_gather, max_bytes_per_request
        self.adapter_name, self.lora_name = adapter_name, lora_name
        peft = is_peft_model(model)
        self.mode = "lora" if (peft if use_lora is None else use_lora) else ("merged" if peft else "full")
        self._lora_confirmed = False
        self.version = 0
        self.has_base = has_base  # the server holds our frozen weights already (serves_our_base)

    # ---- public ----
    def sync(self) -> SyncResult:
        start = time.perf_counter()
        sent = (0, 0)
        if self.mode == "lora":
            ok, sent = self._try_lora()
            if not ok:
                self.mode = "merged"
        if self.mode != "lora":
            # After the first sync (or from the first, when the server loaded the same checkpoint
            # and nobody changed it) a PEFT model's frozen weights are on the server already: they
            # never change, and a restarted server loads them from the same folder. Only the merged
            # LoRA layers and trainable tensors travel: SmolLM2 + LoRA on q/k/v/o, 106 of 540 MB,
            # which also spares both processes a copy of the whole model.
            sent = self._send_full(self._units(changed_only=self.version > 0 or self.has_base))
        if self.is_main:
            self._call("reset_prefix_cache", self.client.reset_prefix_cache)
        self.version += 1
        result = SyncResult(self.mode, time.perf_counter() - start, *sent)
        logger.debug(
            "weight sync %d (%s): %d tensors, %.1f MB in %.3f s", self.version, *vars(result).values()
        )
        return result

    # ---- full / merged ----
    def _units(self, changed_only: bool = False) -> list[_Unit]:
        if not is_peft_model(self.model):
            return [_Unit(n, [p], lambda p=p: p.data) for n, p in self.model.named_parameters()]
        adapter = self.adapter_name
        lora_layers = {
            name.removeprefix("base_model.model."): module
            for name, module in self.model.named_modules()
            if hasattr(module, "get_delta_weight") and adapter in getattr(module, "lora_A", {})
        }
        units = []
        for peft_name, p in self.model.named_parameters():
            name = _hf_name(peft_name, adapter)
            if name is None:
                continue
            layer = lora_layers.get(name.rsplit(".", 1)[0]) if name.endswith(".weight") else None
            if layer is None:
                if p.requires_grad or not changed_only:
                    units.append(_Unit(name, [p], lambda p=p: p.data))
                continue
            if getattr(layer, "use_dora", {}).get(adapter, False):
                raise WeightSyncError(
                    "merge", f"{name}: DoRA adapters cannot be merged for sync; use plain LoRA"
                )
            a, b = layer.lora_A[adapter].weight, layer.lora_B[adapter].weight
            units.append(
                _Unit(
                    name,
                    [p, a, b],
                    lambda p=p, layer=layer: p.data + layer.get_delta_weight(adapter).to(p.dtype),
                )
            )
        return units

    def _gathered(self, units: list[_Unit]) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield ``(name, tensor)`` for each unit, gathering at most ``max_tensors`` parameters at once."""
        group: list[_Unit] = []
        count = 0

        def flush() -> Iterator[tuple[str, torch.Tensor]]:
            params = [p for u in group for p in u.params]
            with self.gather(params):
                for u in group:
                    tensor = full_tensor(u.compute())  # on every rank: under FSDP2 it is collective
                    # Copy: the gathered storage is released when the block exits.
                    yield u.name, (tensor.detach().clone() if self.is_main else None)

        for unit in units:
            if group and count + len(unit.params) > self.max_tensors:
                yield from flush()
                group, count = [], 0
            group.append(unit)
            count += len(unit.params)
        if group:
            yield from flush()

    def _send_full(self, units: list[_Unit]) -> tuple[int, int]:
        """Send in updates of about ``max_bytes`` each; one update is one server transaction."""
        batch: list[tuple[str, torch.Tensor]] = []
        nbytes = total_tensors = total_bytes = 0

        def flush() -> None:
            nonlocal batch, nbytes, total_tensors, total_bytes
            if batch:
                self._call("update_weights", self.client.update_weights, batch)
                total_tensors, total_bytes = total_tensors + len(batch), total_bytes + nbytes
                batch, nbytes = [], 0

        for name, tensor in self._gathered(units):
            if not self.is_main:
                continue
            # Split only between modules: the server fuses q/k/v (and gate/up) of one module
            # and needs all of them in the same update.
            if nbytes >= self.max_bytes and _module_of(name) != _module_of(batch[-1][0]):
                flush()
            batch.append((name, tensor))
            nbytes += tensor.numel() * tensor.element_size()
        flush()
        return total_tensors, total_bytes

    # ---- adapter ----
    def adapter_payload(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """The adapter's tensors under PEFT's saved names (adapter name dropped) and its config."""
        adapter = self.adapter_name
        items = [
            (name.replace(f".{adapter}", ""), p)
            for name, p in self.model.named_parameters()
            if "lora_" in name and f".{adapter}." in name
        ]
        tensors: dict[str, torch.Tensor] = {}
        # Gathered in groups too: under ZeRO-3 the adapter is sharded like the rest.
        for i in range(0, len(items), self.max_tensors):
            chunk = items[i : i + self.max_tensors]
            with self.gather([p for _, p in chunk]):
                for key, p in chunk:
                    tensor = full_tensor(p.data)  # on every rank, like _gathered
                    if self.is_main:
                        tensors[key] = tensor.detach().clone()
        config = {
            k: sorted(v) if isinstance(v, set) else v
            for k, v in self.model.peft_config[adapter].to_dict().items()
        }
        return tensors, config

    def _try_lora(self) -> tuple[bool, tuple[int, int]]:
        tensors, config = self.adapter_payload()
        ok, error = True, None
        if self.is_main:
            try:
                self.client.update_lora(tensors, name=self.lora_name, config=config)
            except ServerError as e:
                if self._lora_confirmed:
                    raise
                ok, error = False, e
        ok = bool(self.broadcast(ok))
        if not ok:
            warn_once(
                logger,
                "lora-sync-fallback",
                "the vLLM server did not accept the LoRA adapter (%s); falling back to syncing merged "
                "full weights each step (slower). Start vf-vllm with --enable-lora to sync only the adapter.",
                error,
            )
            return False, (0, 0)
        self._lora_confirmed = True
        nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
        return True, (len(tensors), nbytes)

    def _call(self, stage: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except WeightSyncError:
            raise
        except ServerError as e:
            raise WeightSyncError(stage, str(e)) from e


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


def _shape(p: torch.nn.Parameter) -> tuple[int, ...]:
    return tuple(getattr(p, "ds_shape", p.shape))  # a ZeRO-3 shard's full shape


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
        if q is None or _shape(q) != _shape(p):
            raise ValueError(f"reference parameter {name} {_shape(p)} has no match in the policy")
        pairs.append((p, q))
    for i in range(0, len(pairs), max_tensors_per_gather):
        chunk = pairs[i : i + max_tensors_per_gather]
        with gather([q for _, q in chunk]), gather([p for p, _ in chunk], modify=True):
            for p, q in chunk:
                if alpha == 1.0:
                    p.copy_(q.detach())
                else:
                    p.mul_(1 - alpha).add_(q.detach().to(p.dtype), alpha=alpha)

"""Weight sync: push the trainer's weights to the vLLM server after an optimizer step.

Three modes:

- ``full``: every parameter, under its Hugging Face name (vLLM maps HF names).
- ``lora``: only the PEFT adapter (``client.update_lora``); the server must run
  with LoRA enabled. An adapter with ``modules_to_save`` (a trained lm_head) is
  synced ``merged`` instead, after one warning: vLLM adapters cannot carry it.
- ``merged``: a PEFT model sent as full weights with the adapter folded in
  (``W + scale * B @ A`` computed per layer, the model itself untouched); after
  the first sync only the layers the adapter changes (and trainable tensors). Used
  when the server rejects adapters: a user who started ``vf-vllm`` plainly and
  trains with ``peft_config`` still trains, after one warning. vLLM reloads whole
  modules and fuses q/k/v and gate/up, so an adapted ``q_proj`` travels with its bias
  and with ``k_proj``/``v_proj`` as they are (``names.reload_closure``).

An adapter applies to whatever the server holds: when it holds another run's weights
(``weight_version > 0``) the frozen base is sent back first, as one full update.
A tied model (``tie_word_embeddings``) whose head the trainer no longer shares with
its embedding (PEFT ``modules_to_save`` of ``lm_head`` or ``embed_tokens``) is refused
at setup: vLLM serves the tied head and never loads ``lm_head.weight``.

A full or merged sync is one server transaction: the name, shape and dtype of every
tensor are announced at begin (known without gathering), then the tensors stream a
layer at a time; the client stages files of about ``max_bytes_per_request``, cut
between layers, all loaded while generation is paused, and commits once. Tensors go
under the checkpoint's names (weight_names.py: wrapper prefixes stripped,
transformers 5's fused MoE experts and renames reverted) and in the server's dtype.
A full fine-tune's first sync to a server that loaded the same checkpoint sends only
the layers that differ from it.

Under DeepSpeed ZeRO-3 parameters are sharded: they are gathered a few at a time
(``max_tensors_per_gather``) so no rank ever holds much more than one layer of
full tensors. Under FSDP2 parameters are ``DTensor`` shards: every rank all-gathers
each tensor (``full_tensor``) in the same order, and only the main process keeps it.
Every rank calls :meth:`WeightSyncer.sync` (gathers are collective); only the
main process talks to the server.

The gathers themselves (``zero3_gather``, ``full_tensor``) are ``training/shards.py``'s; the
reference model of the KL term, gathered the same way, is ``loss/reference.py``'s.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass
from typing import Any

import torch

from verifiers.errors import ConfigError, ServerError, WeightSyncError
from verifiers.inference.names import (
    check_name,
    clean_name,
    conversions,
    fused_groups,
    layer_of,
    reload_closure,
    to_checkpoint,
)
from verifiers.training.shards import GatherFn, full_tensor, no_gather, param_shape
from verifiers.utils.logging import warn_once

logger = logging.getLogger("verifiers.training.weights.sync")


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
    shape: tuple[int, ...]  # the full tensor's, known without gathering
    dtype: torch.dtype


def is_peft_model(model: Any) -> bool:
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


def _hf_name(peft_name: str, adapter: str) -> str | None:
    """PEFT parameter name -> the base model's HF name; None for adapter-only parameters."""
    if "lora_" in peft_name or ".original_module." in peft_name:
        return None
    name = peft_name.removeprefix("base_model.model.")
    name = name.replace(".base_layer.", ".").replace(f".modules_to_save.{adapter}.", ".")
    return name


def unwrap_compiled(model: Any) -> Any:
    """The module ``torch.compile`` wrapped (``OptimizedModule._orig_mod``), else ``model``."""
    while isinstance(getattr(model, "_orig_mod", None), torch.nn.Module):
        model = model._orig_mod
    return model


_SERVING_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def serving_dtype(health: Mapping[str, Any] | None, model: Any) -> torch.dtype | None:
    """The dtype the server computes in, which a sync sends (half the bytes of fp32 master weights,
    as FSDP2 mixed precision keeps them): ``health["dtype"]`` when the server reports it, else a
    16-bit dtype named by the checkpoint's ``config.json`` (vLLM's ``--dtype auto``; it downcasts
    float32 checkpoints on its own, so float32 there says nothing), else None (sent as they are).
    Not ``model.config.dtype``: transformers sets that to the dtype the trainer loaded in."""
    named = str((health or {}).get("dtype") or "").removeprefix("torch.")
    if named in _SERVING_DTYPES:
        return _SERVING_DTYPES[named]
    import json
    import os

    base = model.get_base_model() if hasattr(model, "get_base_model") else unwrap_compiled(model)
    path = getattr(getattr(base, "config", None), "_name_or_path", None)
    try:
        with open(os.path.join(str(path), "config.json")) as fh:
            config = json.load(fh)
    except (OSError, ValueError, TypeError):
        return None
    named = str(config.get("dtype") or config.get("torch_dtype") or "")
    return _SERVING_DTYPES[named] if named in ("bfloat16", "float16") else None


def wait_for_producers(tensors: Iterable[Any]) -> None:
    """Block until the work that wrote ``tensors`` (gathers, copies, ``optimizer.step``, all queued on
    the current CUDA stream of their device) has finished, so a consumer on another stream (vLLM's
    NCCL packer, IPC) never reads them half-written. CPU tensors: nothing to wait for."""
    devices = {t.device for t in tensors if getattr(t, "is_cuda", False)}
    for device in devices:
        torch.cuda.current_stream(device).synchronize()


def on_device_of(tensors: Iterable[Any]) -> ContextManager[Any]:
    """Make the CUDA device of ``tensors`` current for the block: a sender thread starts on device 0,
    and NCCL/IPC calls from it would use device 0's streams for a model on another GPU. Enter it at
    the top of the thread that sends (``with on_device_of(tensors.values()): sender.send(...)``)."""
    device = next((t.device for t in tensors if getattr(t, "is_cuda", False)), None)
    return torch.cuda.device(device) if device is not None else contextlib.nullcontext()


class WeightSyncer:
    """Sends the model's weights (or adapter) to ``client`` after each optimizer step.

    ``client`` needs ``update_weights(pairs, params=...)`` (a stream of ``(name, tensor)``
    pairs, whole layers in order, and ``params``, the ``{name, shape, dtype}`` of all of them
    announced up front: one server transaction per sync), ``reset_prefix_cache()`` and, for
    adapters, ``update_lora(...)`` (see ``adapter_payload``). ``broadcast`` shares the main
    process's decisions with the other ranks. ``serving_dtype`` (see :func:`serving_dtype`):
    floating tensors are sent in it.
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
        base_changed: bool = False,
        serving_dtype: torch.dtype | None = None,
    ):
        if max_tensors_per_gather < 1:
            raise WeightSyncError(
                "setup", f"max_tensors_per_gather must be >= 1, got {max_tensors_per_gather}"
            )
        model = unwrap_compiled(model)  # accelerate's unwrap_model keeps torch.compile's wrapper
        self.client, self.model = client, model
        self.is_main, self.gather, self.broadcast = is_main_process, gather, broadcast
        self.max_tensors, self.max_bytes = max_tensors_per_gather, max_bytes_per_request
        self.adapter_name, self.lora_name = adapter_name, lora_name
        self.dtype = serving_dtype
        peft = is_peft_model(model)
        self.mode = "lora" if (peft if use_lora is None else use_lora) else ("merged" if peft else "full")
        if self.mode == "lora":
            saved = getattr(model.peft_config.get(adapter_name), "modules_to_save", None)
            if saved:  # vLLM's adapters carry lora_A/lora_B only: a trained lm_head would never arrive
                logger.warning(
                    "the adapter trains modules_to_save=%s, which a vLLM LoRA adapter cannot carry: "
                    "syncing merged full weights instead (drop modules_to_save to sync only the adapter)",
                    sorted(saved),
                )
                self.mode = "merged"
        self._lora_confirmed = False
        self.version = 0
        self.has_base = has_base  # the server holds our frozen weights already (serves_our_base)
        # The server holds another run's weights (a full or merged update): an adapter would apply
        # to them, so the first adapter sync sends the frozen base back first.
        self.base_changed = base_changed and not has_base
        base = model.get_base_model() if peft else model
        self._base = unwrap_compiled(base)
        check_tied_head(self._base, model, adapter_name, merged=self.mode != "lora")
        self._convert = conversions(self._base)  # transformers 5 renamed/fused: send checkpoint names
        self._fused = fused_groups(self._base)  # None: unknown here, whole layers are sent

    # ---- public ----
    def sync(self) -> SyncResult:
        start = time.perf_counter()
        sent = (0, 0)
        if self.mode == "lora" and self.base_changed:
            # Once, before the first adapter: the server's weights are another run's.
            logger.info("the server holds weights another run sent: sending the base model back first")
            sent = self._send_full(self._layers(self._units(merge=False)))
            self.base_changed, self.has_base = False, True
        if self.mode == "lora":
            ok, more = self._try_lora()
            sent = (sent[0] + more[0], sent[1] + more[1])
            if not ok:
                check_tied_head(self._base, self.model, self.adapter_name)  # merged from now on
                self.mode = "merged"
        if self.mode != "lora":
            # After the first sync (or from the first, when the server loaded the same checkpoint
            # and nobody changed it) a PEFT model's frozen weights are on the server already: they
            # never change, and a restarted server loads them from the same folder. Only the merged
            # LoRA layers and trainable tensors travel (with the rest of their modules and fused
            # groups): SmolLM2 + LoRA on q/k/v/o, 106 of 540 MB, which also spares both processes
            # a copy of the whole model.
            layers = self._layers(self._units(changed_only=self.version > 0 or self.has_base))
            if self.mode == "full" and self.has_base and self.version == 0:
                # Full fine-tuning: what the server loaded is what we loaded, unless the weights
                # changed since (a resumed run, a model edited in memory): send only what differs.
                unchanged = self._unchanged_layers(layers)
                layers = [(key, units) for key, units in layers if key not in unchanged]
            more = self._send_full(layers)
            sent = (sent[0] + more[0], sent[1] + more[1])
        if self.is_main:
            self._call("reset_prefix_cache", self.client.reset_prefix_cache)
        self.version += 1
        result = SyncResult(self.mode, time.perf_counter() - start, *sent)
        logger.debug(
            "weight sync %d (%s): %d tensors, %.1f MB in %.3f s", self.version, *vars(result).values()
        )
        return result

    # ---- full / merged ----
    def _named(self) -> list[tuple[str, torch.nn.Parameter]]:
        """``named_parameters`` without wrapper prefixes (torch.compile, activation checkpointing)."""
        return [(check_name(n), p) for n, p in self.model.named_parameters()]

    def _units(self, changed_only: bool = False, merge: bool = True) -> list[_Unit]:
        """What a full or merged sync sends: every tensor under its HF name, a PEFT model's adapted
        weights merged (without ``merge``: the frozen base). ``changed_only``: only what training
        changes (adapted weights, trainable tensors) with the rest of their modules and fused
        groups, which vLLM reloads together (``names.reload_closure``)."""
        if not is_peft_model(self.model):
            return [_Unit(n, [p], lambda p=p: p.data, param_shape(p), p.dtype) for n, p in self._named()]
        adapter = self.adapter_name
        lora_layers = {
            clean_name(name).removeprefix("base_model.model."): module
            for name, module in self.model.named_modules()
            if hasattr(module, "get_delta_weight") and _lora_params(module, adapter)
        }
        units, changed = [], set()
        for peft_name, p in self._named():
            name = _hf_name(peft_name, adapter)
            if name is None:
                continue
            layer = lora_layers.get(name.rsplit(".", 1)[0]) if name.endswith(".weight") and merge else None
            if layer is None:
                if p.requires_grad:
                    changed.add(name)
                units.append(_Unit(name, [p], lambda p=p: p.data, param_shape(p), p.dtype))
                continue
            if getattr(layer, "use_dora", {}).get(adapter, False):
                raise WeightSyncError(
                    "merge", f"{name}: DoRA adapters cannot be merged for sync; use plain LoRA"
                )
            changed.add(name)
            units.append(
                _Unit(
                    name,
                    [p, *_lora_params(layer, adapter)],
                    # Added in fp32, rounded once: a bf16 base (frozen weights stored in the autocast
                    # dtype) plus a delta rounded to bf16 first would round twice.
                    lambda p=p, layer=layer: (p.data.float() + layer.get_delta_weight(adapter).float()).to(
                        p.dtype
                    ),
                    param_shape(p),
                    p.dtype,
                )
            )
        if changed_only:
            keep = reload_closure(changed, [u.name for u in units], self._fused)
            units = [u for u in units if u.name in keep]
        return units

    @staticmethod
    def _layers(units: list[_Unit]) -> list[tuple[str, list[_Unit]]]:
        """Units grouped by layer (``weight_names.layer_of``), in first-seen order: a layer is
        gathered, converted and sent whole (vLLM fuses q/k/v, gate/up and an MoE layer's experts)."""
        layers: dict[str, list[_Unit]] = {}
        for unit in units:
            layers.setdefault(layer_of(unit.name), []).append(unit)
        return list(layers.items())

    def _out_dtype(self, dtype: torch.dtype) -> torch.dtype:
        return self.dtype if self.dtype is not None and dtype.is_floating_point else dtype

    def _checkpoint(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return to_checkpoint(self._base, tensors) if self._convert else tensors

    def _announce(self, layers: list[tuple[str, list[_Unit]]]) -> list[dict[str, Any]]:
        """The ``{name, shape, dtype}`` of everything the sync sends, under the checkpoint's names:
        known before any gather (ZeRO-3 shards keep their full shape in ``ds_shape``; the converted
        names and shapes come from meta tensors)."""
        params = []
        for _, units in layers:
            meta = {
                u.name: torch.empty(u.shape, dtype=self._out_dtype(u.dtype), device="meta") for u in units
            }
            params += [
                {"name": n, "shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")}
                for n, t in self._checkpoint(meta).items()
            ]
        return params

    def _gathered(
        self, layers: list[tuple[str, list[_Unit]]]
    ) -> Iterator[tuple[str, dict[str, torch.Tensor] | None]]:
        """``(layer, {checkpoint name: tensor})`` per layer (None on other ranks than the main one),
        gathering at most ``max_tensors`` parameters at once (every rank: gathers are collective)."""
        for key, units in layers:
            out: dict[str, torch.Tensor] = {}
            group: list[_Unit] = []
            count = 0
            for i, unit in enumerate(units):
                group.append(unit)
                count += len(unit.params)
                following = units[i + 1] if i + 1 < len(units) else None
                if following is not None and count + len(following.params) <= self.max_tensors:
                    continue
                with self.gather([p for u in group for p in u.params]):
                    for u in group:
                        tensor = full_tensor(u.compute())  # on every rank: under FSDP2 it is collective
                        if self.is_main:
                            out[u.name] = self._outlive_gather(tensor, u)
                group, count = [], 0
            if not self.is_main:
                yield key, None
                continue
            # The copies were queued on this device's current stream (after optimizer.step): the
            # transport may read them from another one.
            wait_for_producers(out.values())
            yield key, self._checkpoint(out)

    def _outlive_gather(self, tensor: torch.Tensor, unit: _Unit) -> torch.Tensor:
        """``tensor`` in the serving dtype, valid after the gather's block: a copy only where needed.
        A ZeRO-3 gathered parameter's storage is released when the block exits, so it is copied;
        a merged weight or an FSDP2 all-gathered tensor is a temporary of its own, and a plain
        parameter already in the serving dtype is shared as it is (a bf16 model without ZeRO sent
        no extra copy of itself: the transport reads it before the next optimizer step)."""
        tensor = tensor.detach()
        dtype = self._out_dtype(tensor.dtype)
        if dtype != tensor.dtype:
            return tensor.to(dtype)  # a new tensor already
        gathered = self.gather is not no_gather and any(_same_storage(tensor, p) for p in unit.params)
        return tensor.clone() if gathered else tensor

    def _stream(
        self, layers: list[tuple[str, list[_Unit]]], totals: list[int]
    ) -> Iterator[tuple[str, torch.Tensor]]:
        for _, tensors in self._gathered(layers):
            for name, tensor in (tensors or {}).items():
                totals[0] += 1
                totals[1] += tensor.numel() * tensor.element_size()
                yield name, tensor

    def _send_full(self, layers: list[tuple[str, list[_Unit]]]) -> tuple[int, int]:
        """One server transaction for the whole sync: every tensor's name, shape and dtype announced
        at begin, then the tensors streamed a layer at a time (the client stages files of about
        ``max_bytes``, cut between layers), all loaded while generation is paused, one commit.
        The main process holds at most about one file's worth of tensors at a time."""
        totals = [0, 0]
        if not layers:
            return 0, 0
        stream = self._stream(layers, totals)
        try:
            if self.is_main:
                self._call(
                    "update_weights",
                    self.client.update_weights,
                    stream,
                    params=self._announce(layers),
                    max_file_bytes=self.max_bytes,
                )
        finally:
            # The other ranks gather every layer: so must this one, even when the client stopped
            # early (an error, or a lost server the multi-process latch skips).
            for _ in stream:
                pass
        return totals[0], totals[1]

    def _unchanged_layers(self, layers: list[tuple[str, list[_Unit]]]) -> set[str]:
        """Layers whose every tensor equals the checkpoint the server loaded (read from the model's
        local folder; nothing when it is not one). Collective: every rank gathers each layer once."""
        files = _checkpoint_files(self._base) if self.is_main else []
        readable = bool(self.broadcast(bool(files)))
        if not readable:
            return set()
        from safetensors import safe_open

        unchanged: set[str] = set()
        with contextlib.ExitStack() as stack:
            where: dict[str, Any] = {}
            for path in files:
                handle = stack.enter_context(safe_open(str(path), framework="pt"))
                where.update(dict.fromkeys(handle.keys(), handle))
            for key, tensors in self._gathered(layers):
                if tensors is None:
                    continue
                same = all(
                    name in where and _equal_as(tensor, where[name].get_tensor(name))
                    for name, tensor in tensors.items()
                )
                if same:
                    unchanged.add(key)
        return set(self.broadcast(sorted(unchanged)))

    # ---- adapter ----
    def adapter_payload(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """The adapter's tensors under PEFT's saved names (adapter name dropped) and its config."""
        adapter = self.adapter_name
        items = [
            (name.replace(f".{adapter}", ""), p)
            for name, p in self._named()
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

    def _call(self, stage: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except WeightSyncError:
            raise
        except ServerError as e:
            raise WeightSyncError(stage, str(e)) from e


def check_tied_head(base: Any, model: Any, adapter: str = "default", merged: bool = True) -> None:
    """Refuse (``ConfigError``) a model whose config ties ``lm_head`` to ``embed_tokens``
    (``tie_word_embeddings``, what vLLM builds from) while in the trainer they differ: PEFT's
    ``modules_to_save`` of either one trains a copy of its own, and (``merged``: sent folded into
    the weights) a LoRA on only one of them changes one side. vLLM's tied models never load
    ``lm_head.weight``, so trainer and server would sample from different heads."""
    config = getattr(base, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if not getattr(text, "tie_word_embeddings", False):
        return
    try:
        head, embed = base.get_output_embeddings(), base.get_input_embeddings()
    except (AttributeError, NotImplementedError):
        return
    if head is None or embed is None:
        return
    adapted = [bool(_lora_params(m, adapter)) for m in (embed, head)]
    peft_config = getattr(model, "peft_config", {}).get(adapter)
    if getattr(head, "weight", None) is not getattr(embed, "weight", None):
        saved = sorted(getattr(peft_config, "modules_to_save", None) or [])
        what = f"modules_to_save={saved}" if saved else "its lm_head (no longer the embedding's tensor)"
    elif merged and adapted[0] != adapted[1]:
        what = f"a LoRA on {'embed_tokens' if adapted[0] else 'lm_head'} alone (target_modules)"
    else:
        return
    raise ConfigError(
        f"the model ties lm_head to embed_tokens (tie_word_embeddings) but trains {what} apart: "
        "vLLM serves the tied head and never loads lm_head.weight, so it would sample from another head",
        hint="set ensure_weight_tying=True in the LoraConfig (PEFT then trains both as one), or drop "
        "lm_head/embed_tokens from modules_to_save and target_modules",
    )


def _lora_params(layer: Any, adapter: str) -> list[torch.nn.Parameter]:
    """The A and B of ``adapter`` in a PEFT LoRA layer (an embedding's are ``lora_embedding_A/B``
    parameters, a linear layer's ``lora_A/B`` modules); empty when it has none."""
    if adapter in (getattr(layer, "lora_A", None) or {}):
        return [layer.lora_A[adapter].weight, layer.lora_B[adapter].weight]
    if adapter in (getattr(layer, "lora_embedding_A", None) or {}):
        return [layer.lora_embedding_A[adapter], layer.lora_embedding_B[adapter]]
    return []


def _same_storage(tensor: torch.Tensor, p: torch.Tensor) -> bool:
    """Whether ``tensor`` lives in ``p``'s storage (returned by ``compute`` as ``p.data``)."""
    try:
        return tensor.untyped_storage().data_ptr() == p.data.untyped_storage().data_ptr()
    except (RuntimeError, AttributeError):  # a tensor without storage of its own: assume shared
        return True


def _checkpoint_files(model: Any) -> list[Any]:
    """The safetensors files of the local folder ``model`` was loaded from (empty: not a folder)."""
    from pathlib import Path

    path = getattr(getattr(model, "config", None), "_name_or_path", None)
    folder = Path(str(path)) if path else None
    if folder is None or not folder.is_dir():
        return []
    return sorted(folder.glob("*.safetensors"))


def _equal_as(ours: torch.Tensor, theirs: torch.Tensor) -> bool:
    """Whether ``ours`` is ``theirs`` once cast to its dtype (a model loaded in fp32 from a bf16
    checkpoint, untouched, casts back exactly)."""
    return ours.shape == theirs.shape and torch.equal(ours.to(device="cpu", dtype=theirs.dtype), theirs)

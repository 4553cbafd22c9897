"""vLLM worker extension that loads trainer weights into a running vf-vllm server.

vf-vllm starts vLLM with ``--worker-extension-cls
verifiers.inference.server.worker.WeightSyncExtension``; vLLM mixes this class into
every worker, and the API server reaches its methods through the engine's
``collective_rpc``. Only plain values (strings, lists, dicts) cross that
boundary: tensors travel through a file (CPU transport) or NCCL (GPU transport,
vLLM's own ``init_weight_transfer_engine`` / ``update_weights`` worker methods,
which need no extension).

Methods (all prefixed ``vf_`` so they cannot clash with vLLM's own):

* ``vf_weight_spec() -> dict``: the checkpoint-format parameters the model
  accepts (``{"params": {name: [shape, dtype]}, "fused": {...}, "tied": bool}``),
  read from the checkpoint's safetensors headers (no tensor is read), used by
  the server to validate an update before any data moves.
* ``vf_load_safetensors(path) -> dict``: load a safetensors file through
  vLLM's in-place ``reload_weights`` (layerwise reload: each layer is re-processed
  for its kernels once all its weights arrived), then refresh tied output layers.
* ``vf_repack_tied() -> int``: refresh the kernels of layers that share their
  weight with another module (after an NCCL update; see below).
* ``vf_end_weight_update(reload_checkpoint) -> dict``: close a GPU update that
  will not be committed (abort, deadline, failed receive): end vLLM's layerwise
  reload so no layer stays on the meta device, then, when weights may have
  arrived, reload the served checkpoint from disk (a half-received update is
  neither the old nor the new model).
* ``vf_receive_ipc(update_info) -> int``: the receive of an IPC update; the CUDA
  IPC handles arrive JSON-encoded (:func:`verifiers.inference.ipc_handles.decode_handles`,
  no pickle) and go to vLLM's ``update_weights`` worker method.
* ``vf_device_uuid() -> str | None``: the physical GPU this worker runs on (its
  UUID as ``torch.cuda.get_device_properties(i).uuid`` prints it), so a trainer
  can tell whether it shares that GPU (then NCCL is impossible and IPC is used).

:func:`validate_params` checks an update's names and shapes against that spec
(it runs in the API server, before any data moves).

Why the refresh: on CPU, vLLM packs each linear layer's weight for oneDNN when
the model loads. A tied ``lm_head`` shares the embedding's weight but keeps its
own packed copy, and a reload re-processes the embedding, not the ``lm_head``
(no checkpoint tensor names it), so it would keep sampling from the old weights.
The ``lm_head`` takes over the embedding's freshly packed kernel instead.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import time
from typing import Any

from verifiers.errors import nearest

logger = logging.getLogger("verifiers.inference.server.worker")


def read_safetensors_headers(files: list[str]) -> dict[str, list[Any]]:
    """``{name: [shape, dtype]}`` from safetensors headers (reads the header only)."""
    import struct

    params: dict[str, list[Any]] = {}
    for path in files:
        with open(path, "rb") as fh:
            (length,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(length))
        for name, info in header.items():
            if name == "__metadata__":
                continue
            params[name] = [list(info["shape"]), str(info["dtype"])]
    return params


def _checkpoint_files(model_config: Any) -> list[str]:
    """Safetensors files of the served checkpoint: a local folder, else the hub cache."""
    path = model_config.model
    if not os.path.isdir(path):
        try:  # a hub id that vLLM already fetched: look in the local cache only
            from huggingface_hub import snapshot_download

            path = snapshot_download(
                path,
                revision=model_config.revision,
                allow_patterns=["*.safetensors", "*.json"],
                local_files_only=True,
            )
        except Exception:  # noqa: BLE001 - no local copy: the caller falls back
            return []
    return sorted(f for f in glob.glob(os.path.join(path, "*.safetensors")) if "consolidated" not in f)


def _meta_model_params(hf_config: Any) -> dict[str, list[Any]]:
    """Fallback when the checkpoint is not safetensors: a transformers model on the meta device."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config)
    return {n: [list(t.shape), str(t.dtype).removeprefix("torch.")] for n, t in model.state_dict().items()}


FLOAT_DTYPES = {"float32", "float16", "bfloat16", "float64", "F32", "F16", "BF16", "F64"}


def validate_params(spec: dict[str, Any], params: list[dict[str, Any]]) -> list[str]:
    """Problems with an update's ``[{"name", "shape", "dtype"}]`` against ``vf_weight_spec()``.

    Beyond unknown names and wrong shapes: vLLM reloads a layer once all its
    tensors arrived (a layer left half-loaded would run on uninitialised memory),
    so a checkpoint module must come whole (weight and bias), and modules vLLM
    fuses into one layer (``q_proj``/``k_proj``/``v_proj``) together.
    """
    known: dict[str, list[Any]] = spec["params"]
    problems: list[str] = []
    names: set[str] = set()
    for i, p in enumerate(params):
        if (
            not isinstance(p, dict)
            or not isinstance(p.get("name"), str)
            or not isinstance(p.get("shape"), list)
        ):
            problems.append(f"params[{i}] is {p!r}; each entry must be an object {{name, shape, dtype}}")
            continue
        name, shape, dtype = p["name"], p["shape"], str(p.get("dtype", ""))
        if name in names:
            problems.append(f"duplicate parameter {name!r}")
        names.add(name)
        if name not in known:
            close = nearest(name, known)
            hint = f"did you mean {close!r}?" if close else "send model.named_parameters() names"
            problems.append(f"unknown parameter {name!r}: the served checkpoint has no such tensor ({hint})")
        elif [int(s) for s in shape] != [int(s) for s in known[name][0]]:
            problems.append(f"{name!r} has shape {shape}, the served model expects {known[name][0]}")
        if dtype and dtype not in FLOAT_DTYPES:
            problems.append(f"{name!r} has dtype {dtype}; send floating-point weights")
    if problems:
        return problems
    modules: dict[str, set[str]] = {}
    for name in known:
        modules.setdefault(name.rpartition(".")[0], set()).add(name)
    fused_of = {member: members for members in spec.get("fused", {}).values() for member in members}
    missing: set[str] = set()
    for name in names:
        module = name.rpartition(".")[0]
        missing |= modules.get(module, set()) - names
        parent, _, leaf = module.rpartition(".")
        for sibling in fused_of.get(leaf, ()):
            missing |= modules.get(f"{parent}.{sibling}" if parent else sibling, set()) - names
    if spec.get("tied"):
        missing.discard("lm_head.weight")
    if missing:
        shown = ", ".join(sorted(missing)[:5]) + (" ..." if len(missing) > 5 else "")
        problems.append(
            f"partial update of {len(missing)} tensors' layers: also send {shown} "
            "(vLLM reloads whole layers, and fuses q/k/v and gate/up)"
        )
    return problems


class WeightSyncExtension:
    """Mixed into vLLM's worker class; ``self`` is the worker (it has ``model_runner``)."""

    def vf_weight_spec(self) -> dict[str, Any]:
        model = self.model_runner.get_model()  # type: ignore[attr-defined]
        model_config = self.vllm_config.model_config  # type: ignore[attr-defined]
        hf_config = model_config.hf_config
        files = _checkpoint_files(model_config)
        params = read_safetensors_headers(files) if files else {}
        source = "safetensors" if params else "transformers-meta"
        if not params:
            params = _meta_model_params(hf_config)
        text_config = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
        tied = bool(getattr(text_config, "tie_word_embeddings", False))
        # A trainer's named_parameters() of a tied model may name the shared weight
        # lm_head.weight; vLLM's loaders skip it for tied models, so accept it.
        embed = next((n for n in params if n.endswith("embed_tokens.weight")), None)
        if tied and embed and "lm_head.weight" not in params:
            params["lm_head.weight"] = list(params[embed])
        # Checkpoint modules that vLLM fuses into one layer (q/k/v -> qkv_proj):
        # an update must carry all of them or none, see server validation.
        fused = dict(getattr(type(model), "packed_modules_mapping", {}) or {})
        return {"params": params, "fused": fused, "tied": tied, "source": source}

    def vf_load_safetensors(self, path: str) -> dict[str, Any]:
        """Load every tensor of ``path`` into the model in place; returns counts and timing."""
        from safetensors import safe_open

        t0, cpu0 = time.perf_counter(), time.process_time()
        count = 0

        def tensors():
            nonlocal count
            # safe_open memory-maps the file: each tensor is read as the loader copies it.
            with safe_open(path, framework="pt", device="cpu") as fh:
                for name in fh.keys():  # noqa: SIM118 - safe_open has no __iter__
                    count += 1
                    yield name, fh.get_tensor(name)

        kernels = self._vf_cpu_kernels()
        try:
            self.reload_weights(weights_iterator=tensors(), is_checkpoint_format=True)  # type: ignore[attr-defined]
        except BaseException:
            # reload_weights raised between vLLM's initialize_layerwise_reload and its
            # finalize: close the reload so no layer is left on the meta device.
            try:
                self._vf_finalize_reload()
            except Exception as e:  # noqa: BLE001 - the load's own error is the one to report
                logger.error("closing the failed reload failed too: %s", e)
            raise
        refreshed = self._vf_refresh_tied(kernels)
        return {
            "loaded": count,
            "tied_refreshed": refreshed,
            "seconds": time.perf_counter() - t0,
            "cpu_seconds": time.process_time() - cpu0,
        }

    def vf_repack_tied(self) -> int:
        """Re-pack the CPU kernels of every layer that shares its weight (after an NCCL update)."""
        return self._vf_refresh_tied({})

    def vf_end_weight_update(self, reload_checkpoint: bool) -> dict[str, Any]:
        """Close an uncommitted weight-transfer update so the model serves whole weights again.

        vLLM's ``start_weight_update`` moved every layer to the meta device
        (``initialize_layerwise_reload``); only ``finalize_layerwise_reload`` puts
        them back: a layer that received nothing gets its kernel tensors (its old
        weights) back, a fully received one keeps the new values, a partly received
        one is rebuilt from what came plus uninitialised memory. So:

        * nothing arrived (``reload_checkpoint`` False): finishing restores the
          served weights exactly;
        * something may have arrived: finish, then reload the checkpoint from disk
          (vLLM's ``reload_weights`` with no iterator), which leaves the model at
          version 0, whole.

        vLLM's worker (``v1/worker/gpu_worker.py``, ``update_weights``) clears its
        ``_weight_update_active`` flag when a receive raises but leaves the layerwise
        reload open, and then refuses ``finish_weight_update``; that case is
        finalised here directly. Returns ``{"finished", "reloaded", "seconds"}``.
        """
        t0 = time.perf_counter()
        finished = "none"
        if getattr(self, "_weight_update_active", False):
            try:
                self.finish_weight_update()  # type: ignore[attr-defined]
                finished = "finish_weight_update"
            except Exception as e:  # noqa: BLE001 - finalised below instead
                logger.warning("finish_weight_update failed while rolling back (%s); finalising directly", e)
        if finished == "none":
            self._vf_finalize_reload()
            finished = "finalize_layerwise_reload"
        if reload_checkpoint:
            kernels = self._vf_cpu_kernels()
            self.reload_weights(weights_iterator=None, is_checkpoint_format=True)  # type: ignore[attr-defined]
            self._vf_refresh_tied(kernels)
        return {"finished": finished, "reloaded": reload_checkpoint, "seconds": time.perf_counter() - t0}

    def _vf_finalize_reload(self) -> None:
        """End an open layerwise reload without vLLM's worker bookkeeping (see vf_end_weight_update)."""
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        engine = getattr(self, "weight_transfer_engine", None)
        drain = getattr(engine, "drain_pending", None)  # newer than vLLM 0.26: absent there
        if callable(drain):
            drain()
        model = getattr(engine, "model", None)
        if model is None:
            model = self.model_runner.get_model()  # type: ignore[attr-defined]
        model_config = getattr(engine, "model_config", None)
        if model_config is None:
            model_config = self.vllm_config.model_config  # type: ignore[attr-defined]
        finalize_layerwise_reload(model, model_config)  # a no-op for layers not being reloaded
        if engine is not None and hasattr(engine, "reset_weight_update_target"):
            engine.reset_weight_update_target()
        self._weight_update_active = False

    def vf_receive_ipc(self, update_info: dict[str, Any]) -> int:
        """Receive one IPC update (JSON-encoded handles) through vLLM's ``update_weights``."""
        from verifiers.inference.ipc_handles import decode_handles

        info = dict(update_info)
        info["ipc_handles"] = decode_handles(info["ipc_handles"])
        self.update_weights(info)  # type: ignore[attr-defined]
        return len(info["names"])

    def vf_device_uuid(self) -> str | None:
        """This worker's physical GPU (``str(torch.cuda.get_device_properties(i).uuid)``), else None."""
        import torch

        if not torch.cuda.is_available():
            return None
        device = getattr(self, "device", None)
        index = device.index if getattr(device, "type", None) == "cuda" and device.index is not None else None
        return str(
            torch.cuda.get_device_properties(torch.cuda.current_device() if index is None else index).uuid
        )

    def vf_rendezvous_file(self) -> str | None:
        """vLLM's torch.distributed rendezvous file, when it made one in the temp dir.

        vLLM 0.32 starts its workers' process group from ``file://<tmp>/vllm_dist_<hex>`` and
        never removes that file; the server does at exit (:func:`verifiers.inference.server.cleanup`).
        """
        method = str(getattr(self, "distributed_init_method", None) or "")
        path = method.removeprefix("file://")
        return (
            path if method.startswith("file://") and os.path.basename(path).startswith("vllm_dist_") else None
        )

    def _vf_cpu_kernels(self) -> dict[int, Any]:
        model = self.model_runner.get_model()  # type: ignore[attr-defined]
        return {id(m): m.cpu_linear for m in model.modules() if hasattr(m, "cpu_linear")}

    def _vf_refresh_tied(self, before: dict[int, Any]) -> int:
        """Give layers that share a weight the kernel packed from the new values.

        A reload re-packs the layer the checkpoint names (the embedding) but not its
        tied twin (``lm_head``): the twin takes the fresh kernel over (no second
        packing). ``before`` maps module ids to their kernels before the reload; a
        group where no kernel changed is re-packed.
        """
        import torch
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():
            return 0  # GPU kernels read the weight tensor itself: nothing to refresh
        from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

        model = self.model_runner.get_model()  # type: ignore[attr-defined]
        groups: dict[int, list[Any]] = {}
        for module in model.modules():
            weight = getattr(module, "weight", None)
            if hasattr(module, "cpu_linear") and isinstance(weight, torch.Tensor) and weight.dim() == 2:
                if weight.numel():
                    groups.setdefault(weight.data_ptr(), []).append(module)
        refreshed = 0
        for modules in groups.values():
            if len(modules) < 2:
                continue
            fresh = [m for m in modules if before.get(id(m)) is not m.cpu_linear and id(m) in before]
            if not fresh:
                dispatch_cpu_unquantized_gemm(modules[0], remove_weight=False)
                fresh = modules[:1]
            for m in modules:
                if m is not fresh[0] and m.cpu_linear is not fresh[0].cpu_linear:
                    # Same weight, same x @ W.T: the fresh closure serves both.
                    m.cpu_linear = fresh[0].cpu_linear
                    refreshed += 1
        return refreshed

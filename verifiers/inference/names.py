"""The names (and shapes) the served checkpoint knows, from the trainer's parameter names.

Three things stand between ``model.named_parameters()`` and the checkpoint vLLM loaded:

- wrapper prefixes: ``_orig_mod.`` (``torch.compile``; accelerate's ``unwrap_model`` keeps it
  by default), ``_checkpoint_wrapped_module.`` (FSDP activation checkpointing),
  ``_fsdp_wrapped_module.`` (FSDP1). :func:`clean_name` drops them. FSDP1's flattened
  parameters (``_flat_param``, one 1-D shard for many tensors) have no per-tensor name at all:
  :func:`check_name` refuses them in one line (use FSDP2, whose ``DTensor`` shards gather per tensor).
- transformers 5's weight conversions: fused MoE experts (``mlp.experts.gate_up_proj``, one 3-D
  tensor for ``experts.N.gate_proj``/``up_proj``) and renamed models (llava-style
  ``model.language_model.``). :func:`to_checkpoint` runs transformers' own reverse
  (``revert_weight_conversion``, what ``save_pretrained`` writes), so the server sees the
  checkpoint's names and shapes. It works on meta tensors too: the names and shapes of an update
  are known before anything is gathered.
- vLLM fuses a layer's tensors (q/k/v, gate/up, all experts of an MoE layer) and reloads them
  together, so an update is cut only between layers: :func:`layer_of`. An update of part of
  the model must carry whole modules and whole fused groups: :func:`reload_closure`.

Pure functions; torch and transformers are imported lazily.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from verifiers.errors import WeightSyncError

# Module names that wrappers insert into parameter names; none is ever a checkpoint name.
WRAPPER_PARTS = ("_orig_mod", "_checkpoint_wrapped_module", "_fsdp_wrapped_module")
_WRAPPERS = re.compile(r"(^|\.)(?:" + "|".join(WRAPPER_PARTS) + r")(?=\.)")
_INDEX = re.compile(r"^(.*?\.\d+)(?:\.|$)")


def clean_name(name: str) -> str:
    """``_orig_mod.model.layers.0._checkpoint_wrapped_module.mlp.up_proj.weight`` ->
    ``model.layers.0.mlp.up_proj.weight``: every wrapper component removed, nothing else touched."""
    return _WRAPPERS.sub("", name).lstrip(".")


def check_name(name: str) -> str:
    """``clean_name(name)``; an FSDP1 flat parameter raises ``WeightSyncError("setup")``."""
    if "_flat_param" in name.split(".")[-1]:
        raise WeightSyncError(
            "setup",
            f"{name} is an FSDP1 flat parameter (a 1-D shard of many tensors) and cannot be synced",
            hint="use FSDP2 (fsdp_version: 2 in the accelerate config) or DeepSpeed ZeRO-3",
        )
    return clean_name(name)


def layer_of(name: str) -> str:
    """What must travel and be reloaded together: ``model.layers.3.mlp.experts.gate_up_proj`` ->
    ``model.layers.3`` (the name up to its first index: a whole decoder layer, experts and fused
    q/k/v included); a name without an index (embeddings, final norm, lm_head) is its own module
    (``model.embed_tokens.weight`` -> ``model.embed_tokens``)."""
    m = _INDEX.match(name)
    return m.group(1) if m else name.rpartition(".")[0]


def to_checkpoint(model: Any, tensors: Mapping[str, Any]) -> dict[str, Any]:
    """``tensors`` (the model's names, wrappers already removed) under the checkpoint's names and
    layouts, by transformers' reverse of the conversions it applied at load (or would apply to this
    model class). Identity for models without conversions and for transformers < 5.

    ``tensors`` must hold whole layers (:func:`layer_of`): a fused tensor splits into its experts
    here, and a conversion of several tensors needs all of them. Meta tensors give names/shapes.
    """
    try:
        from transformers.core_model_loading import revert_weight_conversion
    except ImportError:  # transformers < 5: names are the checkpoint's already
        return dict(tensors)
    if not hasattr(model, "config"):
        return dict(tensors)
    return dict(revert_weight_conversion(model, dict(tensors)))


def conversions(model: Any) -> bool:
    """Whether ``model``'s names differ from its checkpoint's (transformers 5 converted them)."""
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
    except ImportError:
        return False
    if not hasattr(model, "config"):
        return False
    if getattr(model, "_weight_conversions", None):
        return True
    try:
        found = get_model_conversion_mapping(model, add_legacy=False)
    except Exception:  # noqa: BLE001 - an unknown model class: no conversions known
        return False
    from transformers.core_model_loading import PrefixChange

    return any(not isinstance(c, PrefixChange) for c in found)


# vLLM's ``packed_modules_mapping`` of the classes serving these ``model_type``s: checkpoint modules
# it fuses into one layer (``qkv_proj``, ``gate_up_proj``) and reloads only once all of them
# arrived. Checked against vLLM's own classes (tests/training/weights/test_reload_closure.py).
# Another model type gets whole decoder layers (:func:`reload_closure`): more bytes, never refused.
_QKV_GATE_UP = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
FUSED_BY_MODEL_TYPE: dict[str, tuple[tuple[str, ...], ...]] = {
    model_type: _QKV_GATE_UP for model_type in ("llama", "mistral", "qwen2", "qwen3")
}


def fused_groups(model: Any) -> tuple[tuple[str, ...], ...] | None:
    """The modules vLLM fuses in ``model``'s architecture (its config's ``model_type``), None when
    not known here."""
    config = getattr(model, "config", None)
    return FUSED_BY_MODEL_TYPE.get(str(getattr(config, "model_type", "")))


def reload_closure(
    changed: Iterable[str], names: Iterable[str], fused: tuple[tuple[str, ...], ...] | None
) -> set[str]:
    """Of ``names`` (every tensor of the model), what an update of ``changed`` must carry for vLLM
    to reload it: every tensor of each changed module (weight and bias) and of the modules fused
    with it (``fused``: LoRA on ``q_proj`` sends ``k_proj`` and ``v_proj`` too, unchanged). With
    ``fused`` None (an architecture not known here): the whole layer (:func:`layer_of`) of each
    changed tensor, which holds every group vLLM could fuse, MoE experts included.

    The server checks the same (``verifiers.inference.server.worker.validate_params``) and refuses a
    partial layer: vLLM would run it on half-loaded memory."""
    names = list(names)
    changed = set(changed)
    if fused is None:
        layers = {layer_of(n) for n in changed}
        return {n for n in names if layer_of(n) in layers}
    fused_of = {leaf: group for group in fused for leaf in group}

    def modules_of(name: str) -> set[str]:
        module = name.rpartition(".")[0]
        parent, _, leaf = module.rpartition(".")
        siblings = fused_of.get(leaf, (leaf,))
        return {f"{parent}.{s}" if parent else s for s in siblings} | {module}

    wanted: set[str] = set()
    for name in changed:
        wanted |= modules_of(name)
    return {n for n in names if n.rpartition(".")[0] in wanted}

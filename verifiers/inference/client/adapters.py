"""A LoRA adapter as the server receives it: a PEFT folder, or one safetensors blob over HTTP.

An adapter always travels as a PEFT folder (``adapter_config.json`` + ``adapter_model.safetensors``),
written by :func:`write_lora_dir` under ``/dev/shm``, or, over ``"http"``, as one safetensors blob
whose metadata carries the adapter config (:func:`lora_blob`; the server unpacks it,
verifiers/inference/server/adapter_upload.py). The folder is this process's (``owned_files``)
until the server holds it (verifiers/inference/wire.py says who removes what).

torch, safetensors and peft are imported lazily.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from verifiers.inference.client.transport import prepare_tensors
from verifiers.inference.safetensors_writer import safetensors_bytes, write_safetensors
from verifiers.inference.wire import ADAPTER_CONFIG_KEY, new_lora_dir, transfer_dir


def lora_payload(adapter: Any, config: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(state_dict, adapter_config)`` of a PEFT model, or of a state dict plus its config.

    ``config`` may be a peft ``LoraConfig`` or a plain dict (``r``, ``lora_alpha``,
    ``target_modules``, ...). Keys must be PEFT's saved names
    (``base_model.model....lora_A.weight``), as ``get_peft_model_state_dict`` gives.
    """
    if hasattr(adapter, "peft_config"):  # a PeftModel
        name = getattr(adapter, "active_adapter", "default")
        name = name if isinstance(name, str) else name[0]
        config = config if config is not None else adapter.peft_config[name]
        state = _peft_lora_tensors(adapter, name, config)
    else:
        state = dict(adapter)
    if config is None:
        raise ValueError("a LoRA state dict needs its config: pass config=LoraConfig(...) or a dict")
    if hasattr(config, "to_dict"):
        config = config.to_dict()
    config = json.loads(
        json.dumps(dict(config), default=lambda o: sorted(o) if isinstance(o, set) else str(o))
    )
    return prepare_tensors(state), config


def _peft_lora_tensors(model: Any, adapter: str, config: Any) -> dict[str, Any]:
    """The adapter's ``lora_A``/``lora_B`` tensors under PEFT's saved names.

    ``peft.get_peft_model_state_dict`` walks the module tree several times (tens
    of ms for a 135M model, per sync); plain LoRA needs one pass over the
    parameters, dropping the adapter name (``...q_proj.lora_A.default.weight`` ->
    ``...q_proj.lora_A.weight``). Anything else (DoRA, modules_to_save, biases)
    goes through PEFT's own function.
    """
    plain = (
        not getattr(config, "use_dora", False)
        and not getattr(config, "modules_to_save", None)
        and getattr(config, "bias", "none") == "none"
    )
    if not plain:
        from peft import get_peft_model_state_dict

        return get_peft_model_state_dict(model, adapter_name=adapter)
    out = {}
    for n, p in model.named_parameters():
        for kind in ("lora_A", "lora_B", "lora_embedding_A", "lora_embedding_B"):
            tag = f".{kind}.{adapter}"
            if tag in n:
                out[n.replace(tag, f".{kind}")] = p
    return out


def write_lora_dir(adapter: Any, config: Any = None, root: Path | None = None) -> Path:
    """Write an adapter as a fresh PEFT folder under ``root`` (default :func:`transfer_dir`).

    ``adapter`` may also be an existing adapter folder: its files are copied, so a
    trainer that keeps saving into one folder never races the server reading it.
    The folder is this process's (``owned_files``) until the caller hands it over
    (``owned_files.disown`` once the server holds it) or removes it (``owned_files.release``).
    """
    with new_lora_dir(root or transfer_dir()) as out:
        if isinstance(adapter, (str, os.PathLike)):
            src = Path(adapter)
            if not (src / "adapter_config.json").is_file():
                raise ValueError(f"{src} is not a PEFT adapter folder (no adapter_config.json)")
            for f in src.iterdir():
                if f.is_file() and f.name.startswith("adapter_"):
                    shutil.copy2(f, out / f.name)
        else:
            tensors, cfg = lora_payload(adapter, config)
            (out / "adapter_config.json").write_text(json.dumps(cfg))
            write_safetensors(tensors, out / "adapter_model.safetensors")
    return out


def lora_blob(adapter: Any, config: Any = None) -> bytes:
    """One safetensors blob holding the adapter weights, its config in the metadata."""
    if isinstance(adapter, (str, os.PathLike)):
        from safetensors.torch import load_file

        src = Path(adapter)
        config = json.loads((src / "adapter_config.json").read_text())
        tensors = load_file(str(src / "adapter_model.safetensors"))
    else:
        tensors, config = lora_payload(adapter, config)
    return safetensors_bytes(tensors, metadata={ADAPTER_CONFIG_KEY: json.dumps(config)})

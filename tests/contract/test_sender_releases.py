"""Our NCCL sender and the server's receive, run through each claimed release's own weight-transfer code.

tests/inference/vllm_release_child.py (written with the sender, see its docstring for what stands in
for the GPU) drives vf's trainer side into the release's packed producer and the release's own
``gpu_worker.Worker`` update methods, NCCL engine, packed consumer and layerwise reload on the server
side, four syncs. tests/inference/test_nccl_sender.py runs it on the installed vLLM in the default tier;
here it runs on every release in scripts/vllm_sources.py's RELEASES (about 12 s each).
"""

from __future__ import annotations

import pytest

from tests.contract.sources import RELEASES, vllm_source
from tests.doubles.vllm_release_run import check_release_run, run_release

pytestmark = pytest.mark.contract


@pytest.mark.parametrize("release", RELEASES)
def test_sync_round_trips_through_the_release(release):
    root = str(vllm_source(release))  # fetched if missing
    out = run_release(root)
    assert out["file"].startswith(root)
    check_release_run(out, release)

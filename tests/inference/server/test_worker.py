"""vf-vllm's worker extension (verifiers/inference/server/worker.py): the rendezvous file it names for
removal is vLLM's own only. Tier 1 (no vLLM worker started)."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")


def test_the_workers_name_their_rendezvous_file_only_when_it_is_vllms():
    from verifiers.inference.server.worker import WeightSyncExtension

    worker = WeightSyncExtension()
    assert worker.vf_rendezvous_file() is None  # no attribute: not a vLLM worker
    for method, expected in [
        ("file:///tmp/vllm_dist_0a1b", "/tmp/vllm_dist_0a1b"),
        ("tcp://127.0.0.1:29500", None),
        ("file:///home/me/my-store", None),  # someone else's file: never removed
    ]:
        worker.distributed_init_method = method
        assert worker.vf_rendezvous_file() == expected

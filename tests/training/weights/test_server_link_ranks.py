"""A multi-process run's other ranks have no server client: their syncer must not wrap one
(found by benchmarks/chaos.py: rank 1 of a 2-process LoRA run failed at its first weight sync
with ``'NoneType' object has no attribute 'health'``)."""

from __future__ import annotations

from types import SimpleNamespace

from verifiers.training.weights import server_link


def test_a_rank_without_a_client_makes_its_syncer_without_the_latch(monkeypatch):
    made = {}
    monkeypatch.setattr(server_link, "wait_together", lambda *a, **k: None)  # not the main process
    monkeypatch.setattr(server_link, "broadcast", lambda acc, obj: "cpu" if obj is None else obj)
    monkeypatch.setattr(server_link, "is_peft_model", lambda model: True)
    monkeypatch.setattr(
        server_link, "WeightSyncer", lambda client, model, **kw: made.update(client=client, **kw)
    )
    accelerator = SimpleNamespace(num_processes=2, is_main_process=False)
    args = SimpleNamespace(lora_sync="auto", ds3_gather_for_generation=True)
    link = server_link.ServerLink(args, accelerator)
    link.make_syncer(object(), gather=lambda *a, **k: None)
    assert made["client"] is None and link._latch is None
    assert made["use_lora"] is False  # the main process's answer (a CPU server): merged weights

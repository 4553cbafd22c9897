"""vLLM's "Failed to load weights" at most once per process in vf-vllm (issue 39, finding 8).

A partial update (merged LoRA syncs send only the adapted layers) made vLLM log one such
warning per layer not sent, on every update. Checked against vLLM's own module (its logger
name and format string) and, with ``-m server``, in a real vf-vllm's log after two partial
updates: the filter must be installed in the process that reloads the weights.
"""

from __future__ import annotations

import contextlib
import inspect
import logging

import pytest

from verifiers.inference.server import log_filter


@pytest.fixture
def layerwise():
    """vLLM's layerwise-reload module and a handler on its logger (vLLM's loggers do not propagate)."""
    module = pytest.importorskip("vllm.model_executor.model_loader.reload.layerwise")
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    module.logger.addHandler(handler)
    before = list(logging.getLogger(log_filter.LOGGER).filters)
    try:
        yield module, records
    finally:
        module.logger.removeHandler(handler)
        logging.getLogger(log_filter.LOGGER).filters[:] = before


def test_the_filter_matches_vllms_own_call(layerwise):
    module, _ = layerwise
    assert module.logger.name == log_filter.LOGGER
    assert f'logger.warning("{log_filter.MESSAGE}", layer.__class__.__name__)' in inspect.getsource(module)


def test_first_warning_passes_with_the_reason_and_the_rest_are_dropped(layerwise):
    module, records = layerwise
    log_filter.install()
    assert log_filter.install() is log_filter.install()  # once per process
    for layer in ("QKVParallelLinear", "RowParallelLinear", "RMSNorm") * 10:
        module.logger.warning(log_filter.MESSAGE, layer)
    module.logger.warning("Following weights were not loaded from checkpoint: %s", {"x"})
    lines = [r.getMessage() for r in records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("QKVParallelLinear: Failed to load weights (expected")
    assert lines[1].startswith("Following weights")


def test_register_installs_only_where_vf_vllm_asks(layerwise, monkeypatch):
    logger = logging.getLogger(log_filter.LOGGER)
    monkeypatch.delenv(log_filter.ENV, raising=False)
    log_filter.register()
    assert not any(isinstance(f, log_filter.OneReloadWarning) for f in logger.filters)
    monkeypatch.setenv(log_filter.ENV, "1")
    log_filter.register()
    assert any(isinstance(f, log_filter.OneReloadWarning) for f in logger.filters)


@pytest.mark.server
@pytest.mark.slow  # a server of its own, to count its log's lines: about 55 s on 2 cores
def test_partial_updates_log_the_warning_once(tiny_model_dir, tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file

    from tests.doubles.vllm_server import serve

    weights = load_file(str(tiny_model_dir / "model.safetensors"))
    name = "model.layers.0.mlp.down_proj.weight"  # one whole, unfused module: the rest is not sent
    with serve(tiny_model_dir, tmp_path, "--max-num-seqs", "4") as server:
        with contextlib.closing(server.client()) as client:
            for step in range(2):
                client.update_weights(
                    [(name, weights[name] + 0.01 * (step + 1) * torch.ones_like(weights[name]))]
                )
        log = server.log.read_text(errors="replace")
    lines = [line for line in log.splitlines() if "Failed to load weights" in line]
    assert len(lines) <= 1, f"{len(lines)} lines, e.g. {lines[:3]}"

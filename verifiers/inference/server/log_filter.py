"""vLLM's "Failed to load weights" warning, once per process instead of once per layer per update.

A weight update reloads the model layer by layer (vLLM's ``finalize_layerwise_reload`` in
``vllm/model_executor/model_loader/reload/layerwise.py``, 0.26 to 0.33), and logs
``"<Layer>: Failed to load weights"`` at WARNING for every layer that received nothing. A merged
LoRA sync sends only the adapted layers, on purpose: the others keep their weights. So each step
logged one such line per layer not sent (2,604 lines in the README's 20-step demo, drowning the
server's own lines). The filter here lets the first of them through, saying why it is expected,
and drops the rest; vLLM's other reload warnings pass untouched.

:func:`register` runs in each of vLLM's processes (called by vf's vLLM plugin,
``parent_watch.register``) and installs the filter where vf-vllm started the process
(:data:`ENV`, set by vf-vllm and inherited; ``0`` turns the filter off). A logger's own filter
applies whatever handlers vLLM's logging configuration attaches. Nothing is imported from vLLM.
"""

from __future__ import annotations

import logging
import os

ENV = "VF_VLLM_ONE_RELOAD_WARNING"  # "1": vf-vllm set it; "0" (set by the user): every line
LOGGER = "vllm.model_executor.model_loader.reload.layerwise"
MESSAGE = "%s: Failed to load weights"  # vLLM's format string, matched exactly
NOTE = (
    " (expected for each layer a weight update does not send, as a merged LoRA sync sends only the "
    "adapted ones: those layers keep their weights; shown once per process, the rest are hidden)"
)


class OneReloadWarning(logging.Filter):
    """Passes the first "Failed to load weights" record (with :data:`NOTE`), drops the later ones."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != MESSAGE:
            return True
        self.count += 1
        if self.count > 1:
            return False
        record.msg = MESSAGE + NOTE
        return True


def install() -> OneReloadWarning:
    """Add the filter to vLLM's layerwise-reload logger (once per process); returns it."""
    logger = logging.getLogger(LOGGER)
    for existing in logger.filters:
        if isinstance(existing, OneReloadWarning):
            return existing
    new = OneReloadWarning()
    logger.addFilter(new)
    return new


def register() -> None:
    """vLLM plugin hook (see the module docstring): install the filter in vf-vllm's processes."""
    if os.environ.get(ENV) == "1":
        install()

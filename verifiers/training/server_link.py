"""``ServerLink``: the trainer's side of the vf-vllm server.

Its client (main process only: the other processes never talk to the server),
the weight syncer (every process: under ZeRO-3 gathering the weights is
collective), and the model name rollouts request (the base model's, or the
LoRA adapter's once adapters are synced). A lost server during a sync is waited
out (recovery.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from verifiers.training.processes import broadcast
from verifiers.training.recovery import sync_through_outages
from verifiers.training.sync import WeightSyncer, is_peft_model

logger = logging.getLogger("verifiers.training.server_link")


class ServerLink:
    """``connect()``, then ``sync(model, gather=..., on_outage=...)`` after every optimizer step.

    ``gather`` is ``sync.zero3_gather`` under ZeRO-3, else ``sync.no_gather``.
    """

    def __init__(self, args: Any, accelerator: Any, client: Any = None):
        self.args, self.accelerator, self.client = args, accelerator, client
        self.syncer: WeightSyncer | None = None
        self.base_model_name: str | None = None

    def connect(self) -> Any:
        """The server's client (main process only): connect and wait until it is ready."""
        if not self.accelerator.is_main_process:
            return None
        if self.client is None:
            from verifiers.inference.client import VLLMClient

            a = self.args
            self.client = VLLMClient(
                host=a.vllm_server_host, port=a.vllm_server_port, update_timeout=a.sync_weights_timeout
            )
            self.client.wait_until_ready(a.vllm_server_timeout)
        if self.base_model_name is None:
            self.base_model_name = self.client.health()["model"]
        return self.client

    def make_syncer(self, model: Any, *, gather: Callable[..., Any]) -> WeightSyncer:
        """The syncer for ``model`` (unwrapped), made on first use."""
        if self.syncer is None:
            client = self.connect()
            self.syncer = WeightSyncer(
                client,
                model,
                is_main_process=self.accelerator.is_main_process,
                gather=gather,
                broadcast=lambda obj: broadcast(self.accelerator, obj),
                use_lora=self._use_lora_sync(client, model),
                # ds3_gather_for_generation=False: the least GPU memory per gather, one tensor at a time.
                **({} if self.args.ds3_gather_for_generation else {"max_tensors_per_gather": 1}),
            )
        return self.syncer

    def sync(self, model: Any, *, gather: Callable[..., Any], on_outage: Callable[[], None]) -> Any:
        """Push the weights, waiting out a lost server (``on_outage`` counts each); the sync's result."""
        syncer = self.make_syncer(model, gather=gather)
        return sync_through_outages(syncer.sync, self.client, self.args.vllm_server_timeout, on_outage)

    @property
    def served_model_name(self) -> str | None:
        if self.syncer is not None and self.syncer.mode == "lora":
            return self.syncer.lora_name
        return self.base_model_name

    def _use_lora_sync(self, client: Any, model: Any) -> bool | None:
        """Adapter-only sync or merged full weights for a PEFT model (None: not a PEFT model).

        ``lora_sync='auto'`` asks the server (main process) and every rank follows:
        vLLM on CPU runs LoRA layers through gather-per-token fallback kernels: with
        SmolLM2 an adapter made 32 rollouts x 40 tokens take 33 s instead of 16-21 s,
        while a merged sync costs under a second, so CPU servers get merged weights.
        """
        if not is_peft_model(model):
            return None
        if self.args.lora_sync != "auto":
            return self.args.lora_sync == "adapter"
        device = client.health().get("device") if client is not None else None
        device = broadcast(self.accelerator, device)
        if device == "cpu":
            logger.info("the vLLM server runs on CPU: syncing merged weights (lora_sync='auto')")
        return device != "cpu"

"""``ServerLink``: the trainer's side of the vf-vllm server.

Its client (main process only: the other processes never talk to the server),
the weight syncer (every process: under ZeRO-3 gathering the weights is
collective), and the model name rollouts request (the base model's, or the
LoRA adapter's once adapters are synced). A lost server during a sync is waited
out (recovery.py); with several processes every one of them waits for it together
(processes.wait_together), and so they do for the server's start.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from functools import partial
from typing import Any

from verifiers.errors import ServerError
from verifiers.inference.client.recovery import sync_through_outages, wait_out_outage
from verifiers.inference.client.vllm_client import is_server_lost
from verifiers.training.processes import broadcast, wait_together
from verifiers.training.weights.sync import WeightSyncer, is_peft_model, serving_dtype

logger = logging.getLogger("verifiers.training.weights.server_link")


class ServerLink:
    """``connect()``, then ``sync(model, gather=..., on_outage=...)`` after every optimizer step.

    ``gather`` is ``shards.zero3_gather`` under ZeRO-3, else ``shards.no_gather``.
    """

    def __init__(self, args: Any, accelerator: Any, client: Any = None):
        self.args, self.accelerator, self.client = args, accelerator, client
        self.syncer: WeightSyncer | None = None
        self._latch: _OutageLatch | None = None  # the main process's client in a multi-process sync
        self.base_model_name: str | None = None

    def connect(self) -> Any:
        """The server's client (main process; None on the others): connect and wait until it is
        ready. Collective: the other processes wait with the main one (``wait_together``)."""
        what = "waiting for the vLLM server to be ready"
        return wait_together(self.accelerator, self._connect, what, share=False)

    def _connect(self) -> Any:
        if self.client is None:
            from verifiers.inference.client.vllm_client import VLLMClient

            a = self.args
            self.client = VLLMClient(
                host=a.vllm_server_host, port=a.vllm_server_port, update_timeout=a.sync_weights_timeout
            )
            self.client.wait_until_ready(a.vllm_server_timeout)
        if self.base_model_name is None:
            health = self.client.health()
            self.base_model_name = health["model"]
            if self.args.server_sleep_during_step and not health.get("sleep_mode"):
                from verifiers.errors import ConfigError

                raise ConfigError(
                    f"server_sleep_during_step=True but the vLLM server at {self.client.server_url} runs "
                    "without sleep mode",
                    hint="start vf-vllm with --enable-sleep-mode (a CUDA server), or set server_sleep_during_step=False",
                )
        return self.client

    # -- sleep mode (server_sleep_during_step): the KV cache goes back to the trainer during a step --

    def sleep(self) -> None:
        """Free the server's KV cache for this step's training (main process asks; the others go on).

        Through the client ``connect`` made at the start of training, not ``connect()`` itself:
        that is a collective wait, which the main process alone would enter and never leave."""
        if self.args.server_sleep_during_step and self.accelerator.is_main_process:
            self.client.sleep()

    def wake(self) -> None:
        """Give back what the step used and bring the server's KV cache back, before a sync or generation."""
        if not self.args.server_sleep_during_step:
            return
        import torch

        if torch.cuda.is_available():
            # The caching allocator keeps the step's freed blocks for this process: the server
            # can only take the memory back once they are returned to the driver.
            torch.cuda.empty_cache()
        if self.accelerator.is_main_process:
            self.client.wake()

    def leave_awake(self) -> None:
        """At the end of ``train``: a server left asleep (a run that ended inside a generation batch,
        or failed mid-step) is woken for whoever uses it next. Best effort, never waits for a
        server that is gone."""
        if (
            self.args.server_sleep_during_step
            and self.accelerator.is_main_process
            and self.client is not None
        ):
            try:
                self.client.wake()
            except Exception as e:  # noqa: BLE001 - the run's own outcome matters more than this
                logger.warning("could not wake the vLLM server at the end of training: %s", e)

    def make_syncer(self, model: Any, *, gather: Callable[..., Any]) -> WeightSyncer:
        """The syncer for ``model`` (unwrapped), made on first use."""
        if self.syncer is None:
            client = self.connect()
            if self._several() and client is not None:  # the main process's; the others have none
                client = self._latch = _OutageLatch(client)
            self.syncer = WeightSyncer(
                client,
                model,
                is_main_process=self.accelerator.is_main_process,
                gather=gather,
                broadcast=lambda obj: broadcast(self.accelerator, obj),
                use_lora=self._use_lora_sync(client, model),
                has_base=broadcast(self.accelerator, serves_our_base(client, model)),
                base_changed=broadcast(self.accelerator, holds_other_weights(client)),
                serving_dtype=serving_dtype(_health(client), model),  # floating tensors go in it
                # ds3_gather_for_generation=False: the least GPU memory per gather, one tensor at a time.
                **({} if self.args.ds3_gather_for_generation else {"max_tensors_per_gather": 1}),
            )
        return self.syncer

    def sync(self, model: Any, *, gather: Callable[..., Any], on_outage: Callable[[], None]) -> Any:
        """Push the weights, waiting out a lost server (``on_outage`` counts each); the sync's result."""
        syncer = self.make_syncer(model, gather=gather)
        timeout = self.args.vllm_server_timeout
        if not self._several():
            return sync_through_outages(syncer.sync, self.client, timeout, on_outage)
        # Several processes: a sync is collective (gathers under ZeRO-3), so the main process
        # finishes it even when the server is lost (the latch skips the sends), then all of
        # them learn of the loss, wait for the server together and push everything again.
        while True:
            result = syncer.sync()
            lost = self._latch.take() if self._latch is not None else None  # main process only
            if not broadcast(self.accelerator, lost is not None):
                return result
            what = "waiting for the vLLM server to come back during a weight sync"
            wait_together(
                self.accelerator, partial(wait_out_outage, lost, self.client, timeout), what, share=False
            )
            on_outage()

    def _several(self) -> bool:
        return getattr(self.accelerator, "num_processes", 1) > 1

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


def _health(client: Any) -> dict[str, Any] | None:
    """The server's health (main process), None where there is no client or it cannot tell."""
    try:
        return client.health() if client is not None else None
    except Exception:  # noqa: BLE001 - unknown: the checkpoint's dtype, or none
        return None


def serves_our_base(client: Any, model: Any) -> bool:
    """Whether the server still holds, unchanged, the checkpoint ``model`` was loaded from (weight
    version 0, the same model path): then even the first sync of a PEFT model skips the frozen
    weights. False when it cannot tell (another model, a client without ``health``, other ranks)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    ours = getattr(getattr(base, "config", None), "_name_or_path", None)
    try:
        health = client.health() if client is not None else {}
    except Exception:  # noqa: BLE001 - unknown: send everything, as before
        return False
    theirs = health.get("model")
    if not ours or not theirs or health.get("weight_version") != 0:
        return False
    same = lambda a, b: a == b or os.path.realpath(a) == os.path.realpath(b)  # noqa: E731
    return same(str(ours), str(theirs))


def holds_other_weights(client: Any) -> bool:
    """Whether the server reports weights it was sent since it loaded its checkpoint (health
    ``weight_version > 0``: another run's full or merged update, or ours before a restart of the
    trainer). False when it cannot tell (a client without ``health``, other ranks)."""
    try:
        version = client.health().get("weight_version") if client is not None else None
    except Exception:  # noqa: BLE001 - unknown: as before, the adapter goes alone
        return False
    return isinstance(version, int) and not isinstance(version, bool) and version > 0


class _OutageLatch:
    """The main process's client in a multi-process weight sync: when the server is lost, the
    rest of the sync's requests are skipped instead of raised (the other processes are in its
    gathers and would wait for the main one forever); ``take()`` then returns the loss."""

    PUSHES = frozenset({"update_weights", "update_lora", "reset_prefix_cache"})

    def __init__(self, client: Any):
        self.client, self.lost = client, None

    def take(self) -> ServerError | None:
        lost, self.lost = self.lost, None
        return lost

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.client, name)
        if name not in self.PUSHES:
            return attr

        def push(*args: Any, **kwargs: Any) -> Any:
            if self.lost is not None:
                return None
            try:
                return attr(*args, **kwargs)
            except ServerError as err:
                if not is_server_lost(err):
                    raise
                self.lost = err
                return None

        return push

"""The trainer's end of the NCCL weight transfer: vLLM's trainer-side engine, or 0.26's static helpers.

``NcclWeightSender`` opens one NCCL group with the server's workers and broadcasts each round's
tensors; nccl_update.py drives the server's transaction around it (begin, rounds, commit).
**Untested on a GPU here: the machines this was written on have none**
(tests/inference/test_nccl_sender.py runs it through each vLLM release's own code, the NCCL group
stood in). torch and vLLM are imported lazily.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from verifiers.inference.client.transport import cuda_device_of


def weight_source_class() -> type:
    """A ``WeightSource`` over one round's tensors, for the installed vLLM's contract.

    0.32 reads ``source.metadata()`` and ``iter(source)``; 0.33 requires ``metadata`` to be a
    ``functools.cached_property`` (checked when the class is made: a plain method raises
    ``TypeError``), reads it as an attribute, iterates ``source.iter_full()``, and compares it with
    the previous round's to send no metadata when equal. A round's tensors therefore live in a new
    source object each round (:meth:`NcclWeightSender.send`), so the cached metadata is always
    this round's.
    """
    import functools
    import inspect

    from vllm.distributed.weight_transfer.base import ParamMeta, WeightSource

    class _Tensors(WeightSource):
        def __init__(self, tensors: Mapping[str, Any]):
            self.tensors = dict(tensors)

        def _meta(self) -> list[Any]:
            return [ParamMeta(n, t.dtype, tuple(t.shape)) for n, t in self.tensors.items()]

        def _pairs(self) -> Iterator[tuple[str, Any]]:
            return iter(list(self.tensors.items()))

    if isinstance(inspect.getattr_static(WeightSource, "metadata"), property):  # vLLM 0.33+

        class Round(_Tensors):
            metadata = functools.cached_property(_Tensors._meta)

            def iter_full(self) -> Iterator[tuple[str, Any]]:
                return self._pairs()

    else:  # vLLM 0.3x before 0.33: a method, and the source itself is iterated

        class Round(_Tensors):  # type: ignore[no-redef]
            def metadata(self) -> list[Any]:
                return self._meta()

            def __iter__(self) -> Iterator[tuple[str, Any]]:
                return self._pairs()

    return Round


class NcclWeightSender:
    """Trainer end of an NCCL group with the server's workers (rank 0 sends).

    Opens the group on creation (rendezvous on ``master_address:master_port``, the
    server's workers joining through ``sync_client.init_weight_transfer_engine`` at
    the same time). :meth:`send` is one broadcast round: the server's receive
    (``update_weights`` over HTTP) runs concurrently with a packed broadcast of the
    round's tensors. A large update is several rounds inside one server transaction
    (verifiers/inference/client/nccl_update.py opens and commits it), so the trainer never
    holds more than one round's tensors. ``sync_client`` is any object with vLLM's
    ``VLLMWeightSyncClient`` methods; ``VLLMClient`` passes an adapter onto its
    ``/vf/weights/*`` routes, which add validation, pausing and versions.

    Two vLLM APIs: releases with ``NCCLTrainerWeightTransferEngine`` (0.32, 0.33) drive
    each round through it, with a fresh :func:`weight_source_class` source per round;
    0.26 has only the static ``trainer_init`` / ``NCCLWeightTransferEngine.trainer_send_weights``,
    so the round is driven here, the same four calls in the same order.
    tests/inference/test_nccl_sender.py runs this class through each release's
    own trainer engine, packing and worker receive, with only the NCCL group stood in.

    NCCL calls cannot be interrupted, so the caller runs :meth:`send` in a thread and
    waits with a timeout; after a timeout the group is unusable and the error says to
    restart the server and the trainer. The thread's current CUDA device is set to the
    tensors' (a new thread starts on device 0), and the broadcast waits for ``ready``
    (``transport.ready_event``) first.
    """

    def __init__(
        self,
        sync_client: Any,
        *,
        master_address: str,
        master_port: int,
        world_size: int,
        device: Any = None,
    ):
        import torch

        if device is not None:
            torch.cuda.set_device(device)  # the group lives on this thread's current device
        self.client, self.engine, self.group = sync_client, None, None
        try:
            from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerWeightTransferEngine
        except ImportError:  # vLLM 0.26
            NCCLTrainerWeightTransferEngine = None  # noqa: N806
        if NCCLTrainerWeightTransferEngine is not None:
            self._init_engine(NCCLTrainerWeightTransferEngine, master_address, master_port, world_size)
        else:
            self._init_static(master_address, master_port, world_size)

    def _init_engine(self, engine_cls: Any, address: str, port: int, world_size: int) -> None:
        from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo

        self.source_cls = weight_source_class()
        info = NCCLTrainerInitInfo(master_address=address, master_port=port, world_size=world_size, rank=0)
        self.engine = engine_cls.trainer_init(info, client=self.client, source=self.source_cls({}))

    def _init_static(self, address: str, port: int, world_size: int) -> None:
        from concurrent.futures import ThreadPoolExecutor

        from vllm.distributed.weight_transfer.nccl_common import trainer_init

        # The workers block in their init until the rendezvous completes: ask for it on a side
        # thread while this one opens rank 0; both must meet.
        worker_info = {
            "master_address": address,
            "master_port": port,
            "rank_offset": 1,
            "world_size": world_size,
        }
        with ThreadPoolExecutor(max_workers=1) as pool:
            joined = pool.submit(self.client.init_weight_transfer_engine, worker_info)
            self.group = trainer_init(
                {"master_address": address, "master_port": port, "world_size": world_size}
            )
            joined.result()

    def send(self, named_tensors: Mapping[str, Any], ready: Any = None) -> None:
        """One broadcast round of ``named_tensors`` (the client's start, receive and finish around it)."""
        import torch

        device = cuda_device_of(named_tensors)
        if device is not None:
            torch.cuda.set_device(device)
        if ready is not None:
            ready.synchronize()  # the optimizer step that wrote these tensors has finished
        # NCCL needs contiguous device tensors.
        tensors = {n: t.detach().contiguous() for n, t in named_tensors.items()}
        if self.engine is not None:
            # A new source per round: 0.33 caches metadata on the source and compares it
            # with the last round's; the empty one afterwards lets the tensors go.
            self.engine.source = self.source_cls(tensors)
            try:
                self.engine.send_weights()
            finally:
                self.engine.source = self.source_cls({})
        else:
            self._send_static(tensors)

    def _send_static(self, tensors: dict[str, Any]) -> None:
        """vLLM 0.26: start, (receive on the server || packed broadcast here), finish."""
        import threading

        from vllm.distributed.weight_transfer.nccl_engine import (
            NCCLTrainerSendWeightsArgs,
            NCCLWeightTransferEngine,
        )

        info = {
            "names": list(tensors),
            "dtype_names": [str(t.dtype).removeprefix("torch.") for t in tensors.values()],
            "shapes": [list(t.shape) for t in tensors.values()],
            "packed": True,
        }
        self.client.start_weight_update()
        failed: list[BaseException] = []

        def receive() -> None:
            try:
                self.client.update_weights(info)
            except BaseException as e:  # noqa: BLE001 - re-raised below
                failed.append(e)

        # A daemon thread: after a failed broadcast the server's receive never returns, and
        # joining it would turn the error into a hang (the caller tears the group down).
        receiver = threading.Thread(target=receive, name="vf-nccl-receive", daemon=True)
        receiver.start()
        NCCLWeightTransferEngine.trainer_send_weights(
            iter(tensors.items()), NCCLTrainerSendWeightsArgs(group=self.group, packed=True)
        )
        receiver.join()
        if failed:
            raise failed[0]
        self.client.finish_weight_update()

    def close(self) -> None:
        """Destroy the trainer's communicator (0.32+: the engine's ``shutdown``; 0.26 has none)."""
        if self.engine is not None:
            # 0.28-0.31's engine shutdown only drops its reference to the group: destroyed below
            # (pynccl's destroy is idempotent, so 0.32+'s own destroy before is harmless).
            self.group = getattr(self.engine, "model_update_group", None) or self.group
            self.engine.shutdown()
        destroy = getattr(self.group, "destroy", None)
        if callable(destroy):
            destroy()
        self.group = None

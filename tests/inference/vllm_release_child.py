"""Run vf's NCCL sender through one vLLM release's own weight-transfer code, on CPU (a child process).

``python vllm_release_child.py [SOURCE_ROOT]``: with a root (a release's extracted Python tree,
``<root>/vllm``) that tree is imported instead of the installed vLLM. The trainer side is vf's
own ``NcclChannel`` -> ``_NcclControl`` -> ``NcclWeightSender`` -> the release's
``NCCLTrainerWeightTransferEngine`` (0.32+) or ``trainer_send_weights`` (0.26) -> its packed
producer. The server side is the release's own ``gpu_worker.Worker`` weight-update methods
(``init_weight_transfer_engine``, ``start_weight_update``, ``update_weights`` per round,
``finish_weight_update``, ``shutdown_weight_transfer_engine``) with its own
``NCCLWeightTransferEngine``, packed consumer and layerwise reload, into a small model whose
``load_weights`` works as vLLM's models do.

Stood in, because they need a GPU: the NCCL group (a loopback pair whose ``broadcast`` hands the
sender's buffer to the receiver, recording each one), CUDA streams and events (no-ops: CPU work
is ordered), and HTTP between the two (our control's requests are dispatched to the worker
methods the vf routes call, with the JSON round trip). Prints one JSON line: the result.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import queue
import sys
import threading
import time
from types import SimpleNamespace

ROOT = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] else None
if ROOT:
    sys.path.insert(0, ROOT)

import torch  # noqa: E402
import vllm  # noqa: E402

if ROOT:
    assert vllm.__file__.startswith(ROOT), f"imported {vllm.__file__}, not the tree under {ROOT}"


# -- what needs a GPU -------------------------------------------------------------------------


class _Stream:
    def synchronize(self) -> None:
        pass

    def wait_event(self, event) -> None:
        pass

    def wait_stream(self, stream) -> None:
        pass


class _Event:
    def __init__(self, *a, **k) -> None:
        pass

    def record(self, stream=None) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def wait(self, stream=None) -> None:
        pass


torch.accelerator.current_device_index = lambda: 0
torch.accelerator.synchronize = lambda *a, **k: None
torch.accelerator.current_stream = lambda *a, **k: _Stream()
torch.Event = _Event
torch.Tensor.record_stream = lambda self, stream: None

from vllm.distributed.weight_transfer import nccl_common, nccl_engine, packed_tensor  # noqa: E402

packed_tensor._get_streams = lambda device_idx, num_buffers: tuple(_Stream() for _ in range(num_buffers))
torch.cuda.Stream = _Stream  # 0.26 makes its packing streams directly


class Loopback:
    """One end of a two-party "NCCL group": rank 0's ``broadcast`` sends, the other end's receives."""

    def __init__(self, rank: int, wire: queue.Queue, log: list) -> None:
        self.rank, self.wire, self.log = rank, wire, log
        self.destroyed = False

    def broadcast(self, tensor, src=0, stream=None) -> None:
        if self.rank == src:
            self.log.append(tensor.numel() * tensor.element_size())
            self.wire.put(tensor.clone())
        else:
            got = self.wire.get(timeout=60)
            assert got.shape == tensor.shape and got.dtype == tensor.dtype, (got.shape, tensor.shape)
            tensor.copy_(got)

    def destroy(self) -> None:
        self.destroyed = True


WIRE: queue.Queue = queue.Queue()
SENT: list[int] = []
GROUPS: dict[str, Loopback] = {}


def _trainer_end(*a, **k) -> Loopback:
    GROUPS["trainer"] = Loopback(0, WIRE, SENT)
    return GROUPS["trainer"]


def _worker_end(*a, **k) -> Loopback:
    GROUPS["worker"] = Loopback(1, WIRE, SENT)
    return GROUPS["worker"]


nccl_common.trainer_init = _trainer_end  # 0.26: vf imports it at call time
if hasattr(nccl_engine, "open_trainer_endpoint"):  # 0.32, 0.33
    nccl_engine.open_trainer_endpoint = _trainer_end
nccl_engine.worker_init_process_group = _worker_end

# -- the server side: the release's worker ----------------------------------------------------

from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferEngine  # noqa: E402
from vllm.model_executor.model_loader.reload import record_metadata_for_reloading  # noqa: E402
from vllm.model_executor.model_loader.weight_utils import default_weight_loader  # noqa: E402
from vllm.v1.worker import gpu_worker  # noqa: E402


class Inner(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(16, 8)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(4))
        self.norm = torch.nn.LayerNorm(8)


class Tiny(torch.nn.Module):
    """Loads as vLLM's models do: each parameter's ``weight_loader`` (the layerwise reload wraps it)."""

    def __init__(self) -> None:
        super().__init__()
        self.model = Inner()

    def load_weights(self, weights):
        params = dict(self.named_parameters())
        loaded = set()
        for name, tensor in weights:
            param = params[name]
            getattr(param, "weight_loader", default_weight_loader)(param, tensor)
            loaded.add(name)
        return loaded


def make_worker() -> tuple[object, Tiny]:
    model = Tiny()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    record_metadata_for_reloading(model)
    parallel = SimpleNamespace(data_parallel_index=0, data_parallel_rank=0, world_size=1, rank=0)
    vllm_config = SimpleNamespace(
        parallel_config=parallel,
        model_config=SimpleNamespace(dtype=torch.float32, quantization=None),
        compilation_config=SimpleNamespace(custom_op_log_check=lambda: None),
    )
    engine = NCCLWeightTransferEngine(
        SimpleNamespace(backend="nccl"), vllm_config, torch.device("cpu"), model
    )
    worker = object.__new__(gpu_worker.Worker)
    worker.__dict__.update(
        weight_transfer_engine=engine,
        vllm_config=vllm_config,
        rank=0,
        _weight_update_active=False,
        _weight_update_is_draft=False,
        model_runner=SimpleNamespace(reset_lora_state=lambda: None, get_model=lambda: model),
        get_draft_model=lambda: None,
    )
    return worker, model


WORKER, MODEL = make_worker()
CALLS: list[str] = []


class Client:
    """What vf's control reaches over HTTP, dispatched to the worker methods the routes call."""

    server_url = "http://127.0.0.1:1"

    def world_size(self) -> int:
        return 1

    def ping(self):
        return {"status": "ready"}

    def _abort(self, update_id) -> None:
        CALLS.append("abort")

    def _request(self, method, path, *, stage=None, safe=True, timeout=None, json=None, **kw):
        body = None if json is None else __import__("json").loads(__import__("json").dumps(json))
        CALLS.append(path)
        if path == "/vf/nccl/init":
            WORKER.init_weight_transfer_engine(body["init_info"])
        elif path == "/vf/weights/begin":
            WORKER.start_weight_update()
        elif path == "/vf/weights/nccl":
            WORKER.update_weights(body["update_info"])
        elif path == "/vf/weights/commit":
            WORKER.finish_weight_update()
        elif path == "/vf/nccl/shutdown":
            release = getattr(WORKER, "shutdown_weight_transfer_engine", None)
            if release is not None:
                release()
        return {"version": (body or {}).get("version", 0)}


def model_tensors(scale: float) -> dict[str, torch.Tensor]:
    torch.manual_seed(int(scale * 10))
    return {n: torch.randn(p.shape) * scale for n, p in MODEL.named_parameters()}


def main() -> None:
    from verifiers.inference.client import transport
    from verifiers.inference.client.nccl_update import NcclChannel

    client = Client()
    channel = NcclChannel(client, master_address="127.0.0.1", master_port=29555)
    out: dict = {"vllm": getattr(vllm, "__version__", None), "file": vllm.__file__}
    out["api"] = "engine" if channel.sender.engine is not None else "static"
    # What vLLM's trainer engine hands our control per round (0.33 sends empty lists when a
    # round's metadata equals the previous round's).
    control_update = channel.control.update_weights
    seen_infos: list[int] = []

    def update_weights(info):
        seen_infos.append(len(info.get("names") or []))
        return control_update(info)

    channel.control.update_weights = update_weights
    one_round = "tensors" in inspect.signature(channel.update).parameters  # vf before issue 39
    rounds = []
    for i, (scale, max_bytes) in enumerate([(1.0, 300), (2.0, 300), (3.0, 1 << 20), (4.0, 1 << 20)]):
        tensors = model_tensors(scale)
        params = transport.tensor_meta(tensors)
        before, infos = len(SENT), len(seen_infos)
        CALLS.clear()
        deadline = time.monotonic() + 60
        if one_round:
            version = channel.update(tensors, i + 1, deadline, "keep")
        else:
            chunks = transport.gpu_chunks(iter(tensors.items()), max_bytes)
            version = channel.update(params, chunks, i + 1, deadline, "keep")
        got = dict(MODEL.named_parameters())
        rounds.append(
            {
                "version": version,
                "equal": all(torch.equal(got[n].detach(), t) for n, t in tensors.items()),
                "nccl_calls": CALLS.count("/vf/weights/nccl"),
                "begins": CALLS.count("/vf/weights/begin"),
                "commits": CALLS.count("/vf/weights/commit"),
                "broadcasts": len(SENT) - before,
                "on_meta": any(p.is_meta for p in MODEL.parameters()),
                "names_from_vllm": seen_infos[infos:],
            }
        )
    out["rounds"] = rounds
    worker_group = GROUPS["worker"]
    channel.close()
    out["trainer_group_destroyed"] = GROUPS["trainer"].destroyed
    out["worker_group_destroyed"] = worker_group.destroyed
    out["worker_has_shutdown"] = hasattr(gpu_worker.Worker, "shutdown_weight_transfer_engine")
    out["threads"] = [t.name for t in threading.enumerate() if t.name.startswith("vf-")]
    print(json.dumps(out))


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        main()

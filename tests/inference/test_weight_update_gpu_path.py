"""The GPU weight-update path (issue 22, findings 1-3) against local doubles: no GPU, no NCCL.

1. An nccl/ipc update dropped uncommitted (abort, deadline, failed receive) is rolled
   back on the workers: vLLM's ``start_weight_update`` leaves every layer on the meta
   device and refuses the next start until ``finish_weight_update``.
2. The client rebuilds its NCCL group when the server restarted, and an update that
   dies with the server counts as "server lost" (the trainer then re-syncs).
3. A trainer on the server's GPU gets CUDA IPC, not NCCL, decided by GPU UUID.

The routes run for real (uvicorn over tests/doubles/vllm_engine.py's ``Double``); the worker
is :class:`FakeGpuWorker`, vLLM's GPU worker as far as weight transfer goes, mixed
with the real ``WeightSyncExtension`` as vLLM mixes it in. The ``gpu`` tests at
the end need CUDA and are skipped without it.
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")
requests = pytest.importorskip("requests")
pytest.importorskip("uvicorn")

from tests.doubles.vllm_engine import Double, FakeEngine, weights  # noqa: E402
from verifiers.errors import ConfigError, WeightSyncError  # noqa: E402
from verifiers.inference import ipc_handles  # noqa: E402
from verifiers.inference.client import ipc_update, nccl_sender, transport  # noqa: E402
from verifiers.inference.client.vllm_client import VLLMClient, is_server_lost  # noqa: E402
from verifiers.inference.server.state import Settings  # noqa: E402
from verifiers.inference.server.worker import WeightSyncExtension  # noqa: E402

META = transport.tensor_meta(weights())


class FakeGpuWorker(WeightSyncExtension):
    """vLLM's GPU worker (vllm/v1/worker/gpu_worker.py, 0.26 to 0.3x) as far as weight transfer goes.

    ``weights`` is what the model computes with: ``"base"`` (the checkpoint),
    ``"new"``, or ``"partial"`` (a layer rebuilt from a half-received update);
    ``on_meta`` is True while vLLM's layerwise reload holds the layers on the meta
    device (between ``initialize_layerwise_reload`` and ``finalize_layerwise_reload``).
    """

    def __init__(self) -> None:
        self._weight_update_active = False
        self.weight_transfer_engine = None
        self.model_runner = SimpleNamespace(get_model=lambda: torch.nn.Linear(2, 2))
        self.vllm_config = SimpleNamespace(model_config=None)
        self.weights, self.on_meta, self.pending = "base", False, None
        self.fail_receive = False
        self.received: list[dict] = []

    def start_weight_update(self) -> None:
        # gpu_worker.py `_start_weight_update`: "if self._weight_update_active: raise RuntimeError(...)"
        if self._weight_update_active:
            raise RuntimeError(
                "start_weight_update called while a weight update is already active. "
                "Call finish_weight_update first."
            )
        self.on_meta = True  # the NCCL/IPC engine's start_weight_update: initialize_layerwise_reload
        self._weight_update_active = True

    def update_weights(self, update_info: dict) -> None:
        if not self._weight_update_active:
            raise RuntimeError("start_weight_update must be called before update_weights.")
        try:
            self.received.append(update_info)
            if self.fail_receive:
                self.pending = "partial"  # some layers arrived before the peer vanished
                raise RuntimeError("NCCL error: remote process exited or there was a network error")
            self.pending = "new"
        except BaseException:
            # gpu_worker.py `update_weights`: the flag is cleared, the layerwise reload is left open.
            self._weight_update_active = False
            raise

    def finish_weight_update(self) -> None:
        if not self._weight_update_active:
            raise RuntimeError("finish_weight_update called without a matching start_weight_update.")
        self._finalize()
        self._weight_update_active = False

    def _finalize(self) -> None:  # finalize_layerwise_reload
        self.on_meta = False
        if self.pending:
            self.weights, self.pending = self.pending, None

    def reload_weights(self, weights_iterator=None, weights_path=None, is_checkpoint_format=True) -> None:
        assert weights_iterator is None and is_checkpoint_format  # the checkpoint, from disk
        self.weights = "base"


class GpuEngine(FakeEngine):
    """A CUDA server's engine: collective_rpc reaches ``worker``; one vLLM weight-transfer backend."""

    def __init__(self, worker: FakeGpuWorker, backend: str = "nccl"):
        super().__init__()
        self.worker = worker
        self.vllm_config.weight_transfer_config = SimpleNamespace(backend=backend)

    async def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        if method != "vf_weight_spec" and hasattr(self.worker, method):
            self.calls.append(method)
            return [getattr(self.worker, method)(*args)]
        return await super().collective_rpc(method, timeout, args, kwargs)

    async def init_weight_transfer_engine(self, request):
        self.calls.append("init_weight_transfer_engine")

    async def update_weights(self, request):
        self.calls.append("update_weights")
        self.worker.update_weights(request.update_info)


@pytest.fixture
def gpu(monkeypatch):
    """``make(backend) -> (Double, worker)``: a CUDA server double; vLLM's finalize goes to the fake."""
    pytest.importorskip("vllm")
    made: list[tuple[Double, FakeGpuWorker]] = []

    def make(backend: str = "nccl", settings: Settings | None = None) -> tuple[Double, FakeGpuWorker]:
        worker = FakeGpuWorker()
        d = Double(GpuEngine(worker, backend), settings or Settings()).__enter__()
        d.state.device = "cuda"
        made.append((d, worker))
        return d, worker

    import vllm.model_executor.model_loader.reload as reload

    # A receive that raised leaves the reload open (see FakeGpuWorker.update_weights);
    # the extension then calls vLLM's finalize_layerwise_reload itself.
    monkeypatch.setattr(
        reload, "finalize_layerwise_reload", lambda model, config: [w._finalize() for _, w in made]
    )
    yield make
    for d, _ in made:
        d.__exit__()


def post(d: Double, path: str, body: dict) -> requests.Response:
    return requests.post(d.url + path, json=body, timeout=30)


def begin(d: Double, update_id: str, **kw) -> requests.Response:
    return post(d, "/vf/weights/begin", {"update_id": update_id, "transport": "nccl", "params": META, **kw})


def full_update(d: Double, update_id: str, version: int) -> None:
    assert begin(d, update_id, version=version).status_code == 200
    r = post(d, "/vf/weights/nccl", {"update_id": update_id})
    assert r.status_code == 200, r.text
    r = post(d, "/vf/weights/commit", {"update_id": update_id, "version": version})
    assert r.status_code == 200, r.text


def ipc_info(tensors, handles):
    """The ``update_info`` ``ipc_update.share`` gives for ``tensors``, with ``handles`` made up."""
    meta = transport.tensor_meta(tensors)
    return {
        "names": [m["name"] for m in meta],
        "dtype_names": [m["dtype"] for m in meta],
        "shapes": [m["shape"] for m in meta],
        "ipc_handles": handles,
    }


# -- finding 1: a dropped GPU update is rolled back ------------------------------------------


def test_aborted_nccl_update_restores_the_weights_and_the_next_begin_works(gpu):
    d, worker = gpu()
    assert begin(d, "u1").status_code == 200
    assert worker.on_meta and worker._weight_update_active
    assert post(d, "/vf/weights/abort", {"update_id": "u1"}).json() == {"aborted": True}
    # nothing had arrived: the old weights are back as they were, off the meta device
    assert not worker.on_meta and not worker._weight_update_active and worker.weights == "base"
    health = requests.get(d.url + "/vf/health", timeout=10).json()
    assert not health["paused"] and not health["update_in_progress"] and health["weight_version"] == 0
    assert "u1" in health["last_error"] and "unchanged" in health["last_error"]
    # before the fix: 500 "start_weight_update called while a weight update is already active"
    full_update(d, "u2", 1)
    assert worker.weights == "new" and not worker.on_meta


def test_failed_receive_reloads_the_checkpoint_and_says_the_weights_were_lost(gpu):
    d, worker = gpu()
    full_update(d, "u1", 1)
    client = VLLMClient(d.url)
    client.version = 1  # what this trainer pushed
    assert begin(d, "u2", version=2).status_code == 200
    worker.fail_receive = True
    r = post(d, "/vf/weights/nccl", {"update_id": "u2"})
    assert r.status_code == 500 and "remote process exited" in r.json()["error"]["message"]
    # half-received: neither the old nor the new model, so the checkpoint came back from disk
    assert worker.weights == "base" and not worker.on_meta and not worker._weight_update_active
    health = client.health()
    assert health["weight_version"] == 0 and not health["paused"] and not health["update_in_progress"]
    assert "reloaded its checkpoint" in health["last_error"]
    assert client.lost_weights(health)  # the trainer's recovery pushes its weights again
    worker.fail_receive = False
    full_update(d, "u3", 2)
    assert worker.weights == "new" and client.health()["weight_version"] == 2


def test_expired_nccl_update_is_rolled_back(gpu):
    d, worker = gpu()
    assert begin(d, "u1", timeout_s=0.3).status_code == 200
    deadline = time.monotonic() + 10
    while d.state.update is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert d.state.update is None and not worker.on_meta and not worker._weight_update_active
    health = requests.get(d.url + "/vf/health", timeout=10).json()
    assert not health["paused"] and "not committed within its timeout" in health["last_error"]
    full_update(d, "u2", 1)


def test_rollback_with_vllms_own_layerwise_reload_restores_the_old_weights():
    """What the fake assumes, on vLLM's real reload code: closing a reload that received
    nothing puts every layer back off the meta device, with its old values."""
    pytest.importorskip("vllm")
    from vllm.model_executor.model_loader.reload import (
        initialize_layerwise_reload,
        record_metadata_for_reloading,
    )

    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 2))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    record_metadata_for_reloading(model)
    initialize_layerwise_reload(model)  # what vLLM's NCCL/IPC start_weight_update runs
    assert any(p.is_meta for p in model.parameters())
    worker = WeightSyncExtension()
    worker.weight_transfer_engine = None
    worker.model_runner = SimpleNamespace(get_model=lambda: model)
    worker.vllm_config = SimpleNamespace(model_config=SimpleNamespace(dtype=torch.float32))
    worker._weight_update_active = False  # a receive raised: vLLM cleared the flag, left the reload open
    assert worker.vf_end_weight_update(False)["finished"] == "finalize_layerwise_reload"
    assert not any(p.is_meta for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_failed_rollback_keeps_generation_paused_and_health_unready(gpu):
    d, worker = gpu()
    assert begin(d, "u1").status_code == 200
    worker.fail_receive = True

    def broken_reload(*a, **k):
        raise OSError("checkpoint folder is gone")

    worker.reload_weights = broken_reload
    assert post(d, "/vf/weights/nccl", {"update_id": "u1"}).status_code == 500
    r = requests.get(d.url + "/vf/health", timeout=10)
    assert r.status_code == 503 and r.json()["status"] == "weights_broken"
    assert "restart the server" in r.json()["error"] and d.engine.paused  # no generation on meta tensors
    assert begin(d, "u2").status_code == 503


# -- finding 2: a restarted server gets a new NCCL group; a dead one counts as lost -------------


def fake_sender(made: list, die=None):
    """Stands in for nccl_sender.NcclWeightSender: vLLM's trainer engine minus the broadcast."""

    class FakeSender:
        def __init__(self, control, *, master_address, master_port, world_size):
            control.init_weight_transfer_engine(
                {"master_address": master_address, "master_port": master_port}
            )
            self.control, self.closed = control, False
            made.append(self)

        def send(self, tensors, ready=None):
            self.control.start_weight_update()
            if die is not None:
                die()
                raise RuntimeError("NCCL error: remote process exited or there was a network error")
            info = {
                "names": list(tensors),
                "dtype_names": [str(t.dtype).split(".")[-1] for t in tensors.values()],
                "shapes": [list(t.shape) for t in tensors.values()],
            }
            self.control.update_weights(info)
            self.control.finish_weight_update()

        def close(self):
            self.closed = True

    return FakeSender


def test_restarted_server_gets_a_new_nccl_group(gpu, monkeypatch):
    senders: list = []
    monkeypatch.setattr(nccl_sender, "NcclWeightSender", fake_sender(senders))
    d, worker = gpu()
    client = VLLMClient(d.url)
    assert client.update_weights(weights(1.0), transport_name="nccl") == 1
    assert client.update_weights(weights(2.0), transport_name="nccl") == 2
    assert len(senders) == 1  # one group for the life of the server
    # vf-rl restarts the server: a new process (new instance id), base weights, version 0
    d.state.instance_id, d.state.version = "restarted", 0
    assert client.lost_weights(client.health())
    d.state.version = 2  # even at an equal version the new process is told apart
    assert client.lost_weights(client.health())
    assert client.update_weights(weights(3.0), transport_name="nccl") == 3
    # before the fix: the old group (dead peers) was reused and the broadcast hung
    assert len(senders) == 2 and senders[0].closed and not senders[1].closed
    assert d.engine.calls.count("init_weight_transfer_engine") == 2
    client.close()
    assert senders[1].closed


def test_nccl_update_that_dies_with_the_server_counts_as_server_lost(gpu, monkeypatch):
    senders: list = []
    d, worker = gpu()
    monkeypatch.setattr(nccl_sender, "NcclWeightSender", fake_sender(senders, die=d.__exit__))
    client = VLLMClient(d.url, max_retries=0)
    with pytest.raises(WeightSyncError) as info:
        client.update_weights(weights(), transport_name="nccl", timeout=20)
    # before the fix: stage "transfer", not lost, and the trainer stopped instead of re-syncing
    assert is_server_lost(info.value) and info.value.stage == "connect"
    assert "remote process exited" in str(info.value)
    assert client._nccl is None and senders[0].closed  # the next update opens a new group


def test_nccl_failure_with_the_server_alive_is_not_server_lost(gpu, monkeypatch):
    senders: list = []
    monkeypatch.setattr(nccl_sender, "NcclWeightSender", fake_sender(senders, die=lambda: None))
    d, worker = gpu()
    client = VLLMClient(d.url)
    with pytest.raises(WeightSyncError) as info:
        client.update_weights(weights(), transport_name="nccl", timeout=20)
    assert not is_server_lost(info.value) and info.value.stage == "transfer"
    assert client._nccl is None  # a broadcast that failed midway leaves the group unusable
    assert not worker.on_meta and not client.health()["update_in_progress"]  # aborted and rolled back


# -- finding 3: a trainer on the server's GPU gets IPC ------------------------------------------


def on(device: str) -> SimpleNamespace:
    return SimpleNamespace(is_cuda=True, device=device)


UUIDS = {"cuda:0": "GPU-aaaa", "cuda:1": "GPU-bbbb"}


def choose(tensors, server, shm=True, override=None):
    asked = []

    def shm_visible():
        asked.append(True)
        return shm

    choice = transport.choose_transport(tensors, server, shm_visible, override, uuid_of=UUIDS.__getitem__)
    return choice, asked


def server(kind: str, *uuids: str) -> dict:
    return {"device": "cuda", "transports": [kind, "shm", "http"], "device_uuids": list(uuids)}


def test_transport_choice_by_gpu_identity():
    same, other = {"w": on("cuda:0")}, {"w": on("cuda:1")}
    assert choose(same, server("ipc", "GPU-aaaa")) == ("ipc", [])
    # before the fix: "nccl", which NCCL refuses (two ranks on one GPU)
    assert choose(same, server("nccl", "GPU-aaaa"))[0] == "shm"
    assert choose(same, server("nccl", "GPU-aaaa"), shm=False)[0] == "http"
    assert choose(other, server("nccl", "GPU-aaaa")) == ("nccl", [])
    assert choose(other, server("ipc", "GPU-aaaa"))[0] == "shm"  # IPC reaches only its own GPU
    # a tensor-parallel server on both GPUs: IPC cannot reach worker 1, NCCL cannot share GPU 0
    assert choose(same, server("ipc", "GPU-aaaa", "GPU-bbbb"))[0] == "shm"
    # a server that does not report its GPUs (older vf-vllm): its backend decides
    assert choose(same, server("nccl")) == ("nccl", [])
    assert choose(same, "cuda") == ("nccl", [])
    assert choose(same, server("ipc")) == ("ipc", [])
    # CPU tensors or a CPU server: files
    assert choose({"w": torch.zeros(1)}, server("nccl", "GPU-aaaa"))[0] == "shm"
    assert choose(same, {"device": "cpu", "transports": ["shm", "http"]}, shm=False)[0] == "http"
    assert choose(same, server("ipc", "GPU-aaaa"), override="http") == ("http", [])


def test_transport_override_from_the_environment(monkeypatch):
    monkeypatch.delenv(transport.TRANSPORT_ENV, raising=False)
    assert transport.env_override() is None
    monkeypatch.setenv(transport.TRANSPORT_ENV, "auto")
    assert transport.env_override() is None
    monkeypatch.setenv(transport.TRANSPORT_ENV, "IPC")
    assert transport.env_override() == "ipc"
    monkeypatch.setenv(transport.TRANSPORT_ENV, "pigeon")
    with pytest.raises(ValueError, match="VF_WEIGHT_TRANSPORT='pigeon'"):
        transport.env_override()


def test_ipc_handles_survive_json_without_pickle():
    args = (
        torch.Tensor, torch.Size([2, 3]), (3, 1), 0, torch.storage.TypedStorage, torch.bfloat16, 0,
        b"\x00\xffhandle", 12, 0, False, b"ref\x00", 64, b"\x01event", True,
    )  # fmt: skip
    encoded = ipc_handles.encode_handles([{"GPU-aaaa": args}])
    import json

    decoded = ipc_handles.decode_handles(json.loads(json.dumps(encoded)))
    assert decoded == [{"GPU-aaaa": args}] and isinstance(decoded[0]["GPU-aaaa"][1], torch.Size)
    bad = json.loads(json.dumps(encoded))
    bad[0]["GPU-aaaa"][0] = {"cls": "Popen"}
    with pytest.raises(ValueError, match="only"):
        ipc_handles.decode_handles(bad)


def test_ipc_update_reaches_vllms_update_weights(gpu, monkeypatch):
    """The IPC control flow on CPU: handles made up, everything else real down to the worker."""
    args = (
        torch.Tensor, torch.Size([1]), (1,), 0, torch.storage.TypedStorage, torch.float32, 0,
        b"h", 4, 0, False, b"r", 0, b"e", True,
    )  # fmt: skip

    def share(tensors):
        return [], ipc_info(tensors, ipc_handles.encode_handles([{"GPU-aaaa": args}] * len(tensors)))

    monkeypatch.setattr(ipc_update, "share", share)
    d, worker = gpu("ipc")
    client = VLLMClient(d.url)
    assert client.health()["transports"] == ["ipc", "shm", "http"]
    assert client.update_weights(weights(), transport_name="ipc") == 1
    (info,) = worker.received
    assert sorted(info["names"]) == sorted(weights()) and info["ipc_handles"][0] == {"GPU-aaaa": args}
    assert worker.weights == "new" and client.health()["weight_version"] == 1
    # an nccl update to an ipc server is refused in one line naming the fix
    with pytest.raises(WeightSyncError, match="--weight-transfer nccl"):
        client.update_weights(weights(), transport_name="nccl")


def test_server_reports_its_gpus_for_the_choice(gpu):
    d, worker = gpu("ipc")
    worker.vf_device_uuid = lambda: "GPU-aaaa"
    import asyncio

    assert asyncio.run(d.state.probe_devices()) == ["GPU-aaaa"]
    health = requests.get(d.url + "/vf/health", timeout=10).json()
    assert health["device_uuids"] == ["GPU-aaaa"] and health["instance_id"]


def test_vf_vllm_weight_transfer_flag():
    from verifiers.inference.server.main import choose_weight_transfer

    def args(choice="auto", own=None):
        return SimpleNamespace(weight_transfer=choice, weight_transfer_config=own)

    a = args()
    assert "weight transfer ipc" in choose_weight_transfer(a, False, lambda: 1)
    assert a.weight_transfer_config == {"backend": "ipc"}
    a = args()
    assert "--weight-transfer ipc" in choose_weight_transfer(a, False, lambda: 4)
    assert a.weight_transfer_config == {"backend": "nccl"}
    a = args("ipc")
    assert choose_weight_transfer(a, True, lambda: 8) is None
    assert a.weight_transfer_config == {"backend": "ipc"}
    a = args(own={"backend": "ipc"})  # the user's own --weight-transfer-config wins
    assert choose_weight_transfer(a, False, lambda: 8) is None
    assert a.weight_transfer_config == {"backend": "ipc"}
    with pytest.raises(ConfigError, match="contradicts"):
        choose_weight_transfer(args("nccl", {"backend": "ipc"}), True, lambda: 1)


# -- on a GPU -----------------------------------------------------------------------------------


@pytest.mark.gpu
def test_gpu_uuid_is_the_key_vllms_ipc_receiver_uses():
    props = torch.cuda.get_device_properties(0)
    assert transport.gpu_uuid(torch.device("cuda:0")) == str(props.uuid)
    choice = transport.choose_transport(
        {"w": torch.zeros(1, device="cuda:0")}, server("ipc", str(props.uuid)), False
    )
    assert choice == "ipc"


def _rebuild_in_child(info: dict, queue) -> None:
    import torch as t
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    handles = ipc_handles.decode_handles(info["ipc_handles"])
    uuid = str(t.cuda.get_device_properties(0).uuid)
    sums = []
    for h in handles:
        args = list(h[uuid])
        args[6] = 0  # the receiver's device index, as vLLM's IPC engine sets it
        sums.append(float(rebuild_cuda_tensor(*args).float().sum()))
    queue.put(sums)


@pytest.mark.gpu
def test_ipc_handles_open_the_trainers_tensors_in_another_process():
    import multiprocessing as mp

    tensors = {
        "a": torch.arange(6, device="cuda", dtype=torch.bfloat16),
        "b": torch.ones(3, 4, device="cuda"),
    }
    keep, info = ipc_update.share(tensors)
    import json

    info = json.loads(json.dumps(info))  # what crosses HTTP
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_rebuild_in_child, args=(info, queue))
    child.start()
    sums = queue.get(timeout=120)
    child.join(60)
    assert sums == [15.0, 12.0]
    del keep


def test_ipc_needs_what_vllms_ipc_engine_imports(monkeypatch):
    """vLLM 0.26's IPC engine imports ray, which vLLM does not depend on: ``auto`` falls back
    to nccl and says why; an explicit ``--weight-transfer ipc`` is refused in one line."""
    from verifiers.inference.server import main as cli

    monkeypatch.setattr(cli, "ipc_missing", lambda: "ray")
    a = SimpleNamespace(weight_transfer="auto", weight_transfer_config=None)
    line = cli.choose_weight_transfer(a, False, lambda: 1)
    assert a.weight_transfer_config == {"backend": "nccl"} and "ipc would need 'ray'" in line
    with pytest.raises(ConfigError, match="needs 'ray'") as e:
        cli.choose_weight_transfer(
            SimpleNamespace(weight_transfer="ipc", weight_transfer_config=None), True, lambda: 1
        )
    assert "pip install ray" in e.value.hint
    monkeypatch.setattr(cli, "ipc_missing", lambda: None)
    a = SimpleNamespace(weight_transfer="ipc", weight_transfer_config=None)
    assert cli.choose_weight_transfer(a, True, lambda: 1) is None and a.weight_transfer_config == {
        "backend": "ipc"
    }


def test_vf_vllm_environment_defaults_keep_what_the_user_set():
    from verifiers.inference.server.main import SERVER_ENV_DEFAULTS, server_env_defaults

    env = {"VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "9"}
    server_env_defaults(env)
    assert env["VLLM_HTTP_TIMEOUT_KEEP_ALIVE"] == "9"  # the user's value stays
    assert env["VLLM_ENFORCE_STRICT_TOOL_CALLING"] == "0"
    # The server keeps idle connections longer than httpx's pool does (5 s), so the client
    # always closes first and never sends on a connection the server is closing.
    assert int(SERVER_ENV_DEFAULTS["VLLM_HTTP_TIMEOUT_KEEP_ALIVE"]) > 5


# -- issue 39 finding 3: a GPU sync never holds the whole model on the main rank ------------------

LAYERS, PER_TENSOR = 8, 4000  # two 4000-byte tensors per layer: 64 kB in all
CHUNK = 16000  # max_file_bytes: two layers per chunk


def layered_spec() -> dict:
    params = {}
    for i in range(LAYERS):
        for part in ("up", "down"):
            params[f"model.layers.{i}.{part}.weight"] = [[PER_TENSOR // 4], "F32"]
    return {"params": params, "fused": {}, "tied": False, "source": "safetensors"}


class LiveBytes:
    """Bytes of the stream's tensors still alive (any tensor object still viewing their storage)."""

    def __init__(self) -> None:
        self.made: dict[int, int] = {}  # storage address -> bytes
        self.at_send: list[int] = []

    def make(self) -> Any:
        t = torch.zeros(PER_TENSOR // 4)
        self.made[t.untyped_storage().data_ptr()] = PER_TENSOR
        return t

    def now(self) -> int:
        import gc

        gc.collect()
        alive = {
            o.untyped_storage().data_ptr() for o in gc.get_objects() if issubclass(type(o), torch.Tensor)
        }
        return sum(n for ptr, n in self.made.items() if ptr in alive)

    def stream(self):
        """A trainer's sync stream: each layer's tensors made (gathered) when they are read."""
        for i in range(LAYERS):
            for part in ("up", "down"):
                yield f"model.layers.{i}.{part}.weight", self.make()


def counting_sender(live: LiveBytes):
    """vLLM's trainer engine as far as the control sees it, measuring what is alive at each round."""

    class Sender:
        def __init__(self, control, *, master_address, master_port, world_size):
            control.init_weight_transfer_engine({"master_address": master_address})
            self.control = control

        def send(self, tensors, ready=None):
            live.at_send.append(live.now())
            self.control.start_weight_update()
            self.control.update_weights(
                {
                    "names": list(tensors),
                    "dtype_names": ["float32"] * len(tensors),
                    "shapes": [list(t.shape) for t in tensors.values()],
                }
            )
            self.control.finish_weight_update()

        def close(self):
            pass

    return Sender


@pytest.mark.parametrize("kind", ["nccl", "ipc"])
def test_gpu_sync_holds_one_chunk_of_whole_layers_at_a_time(gpu, monkeypatch, kind):
    live = LiveBytes()
    monkeypatch.setattr(nccl_sender, "NcclWeightSender", counting_sender(live))

    def share(tensors):  # CUDA IPC handles made up; what is alive is measured for real
        live.at_send.append(live.now())
        return [], ipc_info(tensors, [{"GPU-aaaa": [0] * 15} for _ in tensors])

    monkeypatch.setattr(ipc_update, "share", share)
    monkeypatch.setattr(WeightSyncExtension, "vf_receive_ipc", lambda self, info: self.update_weights(info))
    d, worker = gpu(kind)
    d.state.spec = layered_spec()
    params = [
        {"name": n, "shape": shape, "dtype": "float32"} for n, (shape, _) in d.state.spec["params"].items()
    ]
    client = VLLMClient(d.url)
    version = client.update_weights(
        live.stream(), params=params, transport_name=kind, max_file_bytes=CHUNK, timeout=60
    )
    assert version == 1 and worker.weights == "new" and client.health()["weight_version"] == 1
    print(f"{kind}: bytes alive at each round {live.at_send} (model {LAYERS * 2 * PER_TENSOR})")
    # Before: the whole stream was drained into one dict, 64000 bytes alive at the one send.
    assert max(live.at_send) <= CHUNK + 2 * PER_TENSOR, live.at_send  # a chunk plus one layer
    assert len(live.at_send) == LAYERS // 2  # one round per chunk of two layers, in one transaction
    names = [n for info in worker.received for n in info["names"]]
    assert sorted(names) == sorted(d.state.spec["params"])  # each tensor once


def test_commit_refuses_a_partial_gpu_update_and_a_round_may_not_repeat_a_tensor(gpu):
    d, worker = gpu()
    d.state.spec = layered_spec()
    params = [
        {"name": n, "shape": shape, "dtype": "float32"} for n, (shape, _) in d.state.spec["params"].items()
    ]
    assert post(d, "/vf/weights/begin", {"update_id": "u", "transport": "nccl", "params": params}).ok

    def info(names):
        return {"names": names, "dtype_names": ["float32"] * len(names), "shapes": [[1000]] * len(names)}

    first = [p["name"] for p in params[:4]]
    assert post(d, "/vf/weights/nccl", {"update_id": "u", "update_info": info(first)}).ok
    r = post(d, "/vf/weights/commit", {"update_id": "u", "version": 1})
    assert r.status_code == 409 and "still misses 12 tensors" in r.json()["error"]["message"]
    r = post(d, "/vf/weights/nccl", {"update_id": "u", "update_info": info(first[:1])})
    assert r.status_code == 400 and "already sent" in r.json()["error"]["message"]
    rest = [p["name"] for p in params[4:]]
    assert post(d, "/vf/weights/nccl", {"update_id": "u", "update_info": info(rest)}).ok
    assert post(d, "/vf/weights/commit", {"update_id": "u", "version": 1}).ok
    assert len(worker.received) == 2 and worker.weights == "new"


# -- issue 39 finding 10: the GPU set of every data-parallel engine --------------------------------


def dp_engine(per_engine: dict[bytes, list], client_cls_name: str = "DPLBAsyncMPClient"):
    """vLLM 0.32's ``AsyncLLM.collective_rpc`` over its own DP core client, each engine stood in by
    its ``_call_utility_async`` answer (what that engine's workers return)."""
    pytest.importorskip("vllm")
    from types import MethodType

    from vllm.v1.engine import core_client
    from vllm.v1.engine.async_llm import AsyncLLM

    core = object.__new__(getattr(core_client, client_cls_name))
    core.core_engines = list(per_engine)
    core.core_engine = core.core_engines[0]

    async def call_one(self, method, *args, engine):
        assert method == "collective_rpc"
        return list(per_engine[engine])

    core._call_utility_async = MethodType(call_one, core)
    pc = SimpleNamespace(data_parallel_size=len(per_engine), world_size_across_dp=2)
    engine = SimpleNamespace(engine_core=core, vllm_config=SimpleNamespace(parallel_config=pc))
    engine.collective_rpc = MethodType(AsyncLLM.collective_rpc, engine)
    return engine


def test_probe_devices_and_rendezvous_files_ask_every_data_parallel_engine():
    import asyncio

    from verifiers.inference.server.state import State

    engine = dp_engine({b"\x00\x00": ["GPU-aaaa"], b"\x01\x00": ["GPU-bbbb"]})
    # What vLLM's own collective_rpc answers with data parallel 2: engine 0's workers only.
    assert asyncio.run(engine.collective_rpc("vf_device_uuid")) == ["GPU-aaaa"]
    st = State(settings=Settings(), engine=engine, device="cuda")
    # before: ["GPU-aaaa"], and a trainer on GPU-bbbb got NCCL, which fails there
    assert asyncio.run(st.probe_devices()) == ["GPU-aaaa", "GPU-bbbb"] and st.device_uuids_complete
    files = dp_engine({b"\x00\x00": ["/tmp/vllm_dist_a"], b"\x01\x00": ["/tmp/vllm_dist_b", None]})
    st = State(settings=Settings(), engine=files)
    assert asyncio.run(st.note_rendezvous_files()) == ["/tmp/vllm_dist_a", "/tmp/vllm_dist_b"]


def test_unknown_gpus_of_a_data_parallel_server_never_pick_nccl():
    import asyncio

    from verifiers.inference.server.state import State

    async def one_engine_only(method, timeout=None, args=(), kwargs=None):
        return ["GPU-aaaa"]  # an engine client with no per-engine call

    pc = SimpleNamespace(data_parallel_size=2)
    engine = SimpleNamespace(collective_rpc=one_engine_only, vllm_config=SimpleNamespace(parallel_config=pc))
    st = State(settings=Settings(), engine=engine, device="cuda")
    assert asyncio.run(st.probe_devices()) == [] and not st.device_uuids_complete
    facts = {**server("nccl"), "device_uuids_complete": False}
    assert choose({"w": on("cuda:1")}, facts)[0] == "shm"  # it might share an unknown engine's GPU
    assert choose({"w": on("cuda:1")}, {**facts, "device_uuids_complete": True}) == ("nccl", [])


# -- issue 39 finding 11: the server releases a trainer's NCCL group -------------------------------


def test_a_new_trainer_group_releases_the_old_one_and_closing_releases_it(gpu, monkeypatch):
    senders: list = []
    monkeypatch.setattr(nccl_sender, "NcclWeightSender", fake_sender(senders))
    d, worker = gpu()
    released: list[str] = []

    async def shutdown_weight_transfer_engine():  # AsyncLLM's, vLLM 0.32+
        released.append("shutdown")

    d.engine.shutdown_weight_transfer_engine = shutdown_weight_transfer_engine
    client = VLLMClient(d.url)
    assert client.update_weights(weights(1.0), transport_name="nccl") == 1
    assert released == []
    # The trainer is killed (nothing closed) and a new one opens a group: the old one is released.
    other = VLLMClient(d.url)
    other.version = 1
    assert other.update_weights(weights(2.0), transport_name="nccl") == 2
    assert released == ["shutdown"]
    other.close()  # a trainer that ends closes its channel: the server releases its end
    assert released == ["shutdown", "shutdown"] and not d.state.nccl_group_open
    assert requests.post(d.url + "/vf/nccl/shutdown", timeout=10).json() == {"released": False}


def test_release_without_shutdown_weight_transfer_engine_is_a_no_op(gpu):
    d, worker = gpu()  # vLLM 0.26's AsyncLLM has no shutdown_weight_transfer_engine
    assert not hasattr(d.engine, "shutdown_weight_transfer_engine")
    d.state.nccl_group_open = True
    assert requests.post(d.url + "/vf/nccl/shutdown", timeout=10).json() == {"released": False}

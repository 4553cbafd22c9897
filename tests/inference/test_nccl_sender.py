"""``transport.NcclWeightSender`` on both vLLM APIs, with recording fakes of vLLM's modules (no NCCL).

vLLM 0.26 (the lowest release we support on GPU) has no ``NCCLTrainerWeightTransferEngine``:
the sender drives the round trip itself with ``nccl_common.trainer_init`` and
``NCCLWeightTransferEngine.trainer_send_weights``. These tests pin the order of the calls
both sides must make, which a real GPU run checks end to end (scripts/gpu_check.py).
"""

from __future__ import annotations

import sys
import types

import pytest

torch = pytest.importorskip("torch")

from verifiers.inference import transport  # noqa: E402


class RecordingControl:
    """vLLM's ``VLLMWeightSyncClient`` methods, recorded."""

    def __init__(self, fail_receive: bool = False):
        self.calls: list[tuple] = []
        self.fail_receive = fail_receive

    def init_weight_transfer_engine(self, info):
        self.calls.append(("init", info))

    def start_weight_update(self):
        self.calls.append(("start",))

    def update_weights(self, info):
        self.calls.append(("receive", info))
        if self.fail_receive:
            raise RuntimeError("worker refused the update")

    def finish_weight_update(self):
        self.calls.append(("finish",))


@pytest.fixture
def vllm_026(monkeypatch):
    """Fake vLLM 0.26 weight-transfer modules: the static API only."""
    sent: list = []
    common = types.ModuleType("vllm.distributed.weight_transfer.nccl_common")
    common.trainer_init = lambda info: ("group", dict(info))
    engine = types.ModuleType("vllm.distributed.weight_transfer.nccl_engine")

    class Args:
        def __init__(self, group, packed=False):
            self.group, self.packed = group, packed

    class Engine:
        @staticmethod
        def trainer_send_weights(iterator, args):
            sent.append((args.group, args.packed, [(n, t.clone()) for n, t in iterator]))

    engine.NCCLTrainerSendWeightsArgs, engine.NCCLWeightTransferEngine = Args, Engine
    for name, module in {
        "vllm": types.ModuleType("vllm"),
        "vllm.distributed": types.ModuleType("vllm.distributed"),
        "vllm.distributed.weight_transfer": types.ModuleType("vllm.distributed.weight_transfer"),
        "vllm.distributed.weight_transfer.nccl_common": common,
        "vllm.distributed.weight_transfer.nccl_engine": engine,
    }.items():
        monkeypatch.setitem(sys.modules, name, module)
    return sent


def test_vllm_026_round_trip_order(vllm_026):
    control = RecordingControl()
    sender = transport.NcclWeightSender(control, master_address="10.0.0.1", master_port=29555, world_size=3)
    assert sender.group == ("group", {"master_address": "10.0.0.1", "master_port": 29555, "world_size": 3})
    # The workers join at rank 1.. of the same group, told so over the control channel.
    assert control.calls == [
        ("init", {"master_address": "10.0.0.1", "master_port": 29555, "rank_offset": 1, "world_size": 3})
    ]
    tensors = {"a.weight": torch.ones(2, 3, dtype=torch.bfloat16), "b.bias": torch.arange(4.0)}
    sender.send(tensors)
    kinds = [c[0] for c in control.calls[1:]]
    assert kinds == ["start", "receive", "finish"]
    info = control.calls[2][1]
    assert info == {
        "names": ["a.weight", "b.bias"],
        "dtype_names": ["bfloat16", "float32"],  # what vLLM resolves with getattr(torch, name)
        "shapes": [[2, 3], [4]],
        "packed": True,  # the broadcast below is packed: both sides must agree
    }
    ((group, packed, pairs),) = vllm_026
    assert group == sender.group and packed
    assert [n for n, _ in pairs] == info["names"]
    torch.testing.assert_close(pairs[1][1], tensors["b.bias"])


def test_vllm_026_failed_receive_raises_and_does_not_commit(vllm_026):
    control = RecordingControl(fail_receive=True)
    sender = transport.NcclWeightSender(control, master_address="h", master_port=1, world_size=2)
    with pytest.raises(RuntimeError, match="refused"):
        sender.send({"w": torch.zeros(1)})
    assert ("finish",) not in control.calls


def test_newer_vllm_uses_its_trainer_engine(monkeypatch):
    """With ``NCCLTrainerWeightTransferEngine`` present, the sender hands it the round trip."""
    made = {}
    engine_mod = types.ModuleType("vllm.distributed.weight_transfer.nccl_engine")
    base = types.ModuleType("vllm.distributed.weight_transfer.base")

    class ParamMeta:
        def __init__(self, name, dtype, shape):
            self.name, self.dtype, self.shape = name, dtype, shape

    class WeightSource:
        pass

    class InitInfo:
        def __init__(self, **kw):
            self.kw = kw

    class TrainerEngine:
        @classmethod
        def trainer_init(cls, info, *, client, source):
            made.update(info=info.kw, client=client, source=source)
            e = cls()
            e.source = source
            return e

        def send_weights(self):
            made["meta"] = [(m.name, tuple(m.shape)) for m in self.source.metadata()]

        def shutdown(self):
            made["shutdown"] = True

    base.ParamMeta, base.WeightSource = ParamMeta, WeightSource
    engine_mod.NCCLTrainerInitInfo, engine_mod.NCCLTrainerWeightTransferEngine = InitInfo, TrainerEngine
    for name, module in {
        "vllm": types.ModuleType("vllm"),
        "vllm.distributed": types.ModuleType("vllm.distributed"),
        "vllm.distributed.weight_transfer": types.ModuleType("vllm.distributed.weight_transfer"),
        "vllm.distributed.weight_transfer.base": base,
        "vllm.distributed.weight_transfer.nccl_engine": engine_mod,
    }.items():
        monkeypatch.setitem(sys.modules, name, module)
    control = RecordingControl()
    sender = transport.NcclWeightSender(control, master_address="h", master_port=7, world_size=2)
    assert made["info"] == {"master_address": "h", "master_port": 7, "world_size": 2, "rank": 0}
    sender.send({"w": torch.zeros(2, 2)})
    assert made["meta"] == [("w", (2, 2))]
    assert sender.source.tensors == {}  # the round's tensors are not kept after the send
    sender.close()
    assert made["shutdown"]


def test_no_cuda_tensors_means_no_device_and_no_event():
    tensors = {"w": torch.zeros(1)}
    assert transport.cuda_device_of(tensors) is None
    assert transport.ready_event(tensors) is None

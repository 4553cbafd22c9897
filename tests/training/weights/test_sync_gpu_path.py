"""The trainer's side of weight sync on the GPU path (issue 22, findings 4-9), on CPU where the
logic allows: the real /vf routes over a fake engine whose spec is a saved tiny checkpoint's
(tests/doubles/vllm_engine.py), recording clients, tiny models built here.

- one server transaction per sync, streamed in files of whole layers; a full fine-tune's first
  sync skips what the server loaded already;
- MoE / renamed models (transformers 5 fuses experts) sync under the checkpoint's names;
- an adapter with ``modules_to_save`` falls back to merged weights (the saved module arrives);
- floating tensors go in the serving dtype;
- wrapper prefixes (torch.compile, activation checkpointing) are stripped, FSDP1 flat params refused;
- tensors are handed over only once the stream that wrote them is done (GPU tests: ``gpu``).
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
pytest.importorskip("uvicorn")

from safetensors.torch import load_file  # noqa: E402

from tests.doubles.vllm_engine import Double, FakeEngine  # noqa: E402
from verifiers.errors import WeightSyncError  # noqa: E402
from verifiers.inference.client import transport  # noqa: E402
from verifiers.inference.client.vllm_client import VLLMClient  # noqa: E402
from verifiers.inference.names import clean_name, layer_of  # noqa: E402
from verifiers.inference.server.state import Settings  # noqa: E402
from verifiers.inference.server.worker import read_safetensors_headers  # noqa: E402
from verifiers.training.weights import sync as sync_module  # noqa: E402
from verifiers.training.weights.sync import WeightSyncer, serving_dtype  # noqa: E402

SMALL = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2)


def llama(tied: bool = False):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(intermediate_size=64, tie_word_embeddings=tied, **SMALL)
    return transformers.LlamaForCausalLM(cfg)


def qwen3_moe():
    torch.manual_seed(0)
    cfg = transformers.Qwen3MoeConfig(
        intermediate_size=64,
        moe_intermediate_size=16,
        num_experts=4,
        num_experts_per_tok=2,
        head_dim=16,
        **SMALL,
    )
    return transformers.Qwen3MoeForCausalLM(cfg)


def mixtral():
    torch.manual_seed(0)
    cfg = transformers.MixtralConfig(
        intermediate_size=16, num_local_experts=4, num_experts_per_tok=2, head_dim=16, **SMALL
    )
    return transformers.MixtralForCausalLM(cfg)


def saved_and_reloaded(model, folder: Path, dtype=torch.float32):
    model.save_pretrained(folder)
    return transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)


@torch.no_grad()
def perturb(model, scale: float = 0.01):
    """A training step's worth of change to every parameter."""
    for p in model.parameters():
        p.add_(scale * torch.randn_like(p))


class CheckpointEngine(FakeEngine):
    """FakeEngine whose weight spec is a saved checkpoint's (as vf_weight_spec reads it), and which
    keeps every file it loads: ``files`` (names per file) and ``loaded`` (all tensors)."""

    def __init__(self, folder: Path, tied: bool = False):
        super().__init__()
        params = read_safetensors_headers([str(p) for p in sorted(folder.glob("*.safetensors"))])
        self.spec = {"params": params, "fused": {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}, "tied": tied}
        self.files: list[list[str]] = []
        self.all_loaded: dict[str, torch.Tensor] = {}

    async def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        if method == "vf_weight_spec":
            self.calls.append(method)
            return [self.spec]
        out = await super().collective_rpc(method, timeout, args, kwargs)
        if method == "vf_load_safetensors":
            self.files.append(list(self.loaded))
            self.all_loaded.update(self.loaded)
        return out


@contextlib.contextmanager
def serving(folder: Path, shm: bool = True):
    with Double(CheckpointEngine(folder), Settings()) as d:
        client = VLLMClient(d.url)
        client._shm_visible = shm  # False: the http transport
        try:
            yield d.engine, client
        finally:
            client.close()


class RecordingClient:
    """update_weights / reset_prefix_cache / health, recorded."""

    def __init__(self, health: dict | None = None):
        self._health = health or {}
        self.updates: list[tuple[dict[str, torch.Tensor], dict]] = []
        self.resets = 0

    def update_weights(self, named_tensors, **kw):
        self.updates.append(({n: t.clone() for n, t in named_tensors}, kw))

    def update_lora(self, tensors, name="vf-lora", config=None):
        raise AssertionError("no adapter expected")

    def reset_prefix_cache(self):
        self.resets += 1

    def health(self):
        return self._health

    @property
    def sent(self) -> dict[str, torch.Tensor]:
        return {n: t for tensors, _ in self.updates for n, t in tensors.items()}


def layers_per_file(files: list[list[str]]) -> list[set[str]]:
    return [{layer_of(n) for n in names} for names in files]


# ---------------------------------------------------------------------------
# 4. One transaction per sync; the first full sync skips what the server holds


@pytest.mark.parametrize("shm", [True, False], ids=["shm", "http"])
def test_a_sync_larger_than_max_bytes_is_one_transaction_of_whole_layer_files(tmp_path, shm):
    model = saved_and_reloaded(llama(), tmp_path / "ckpt")
    perturb(model)
    with serving(tmp_path / "ckpt", shm=shm) as (engine, client):
        result = WeightSyncer(client, model, max_bytes_per_request=4096).sync()
        # One begin (pause) and one commit (resume, one prefix-cache reset from the commit and
        # one from the syncer) for the whole model, though it is several files' worth.
        assert engine.calls.count("pause:keep") == 1 and engine.calls.count("resume") == 1
        assert len(engine.files) > 2 and client.version == 1
    seen = layers_per_file(engine.files)
    assert all(not (a & b) for i, a in enumerate(seen) for b in seen[i + 1 :])  # no layer in two files
    expected = dict(model.named_parameters())
    assert set(engine.all_loaded) == set(expected) and result.num_tensors == len(expected)
    assert all(torch.equal(engine.all_loaded[n], p.detach()) for n, p in expected.items())


def test_full_finetune_first_sync_sends_only_what_differs_from_the_served_checkpoint(tmp_path):
    folder = tmp_path / "ckpt"
    model = saved_and_reloaded(llama(), folder)
    health = {"model": str(folder), "weight_version": 0}
    from verifiers.training.weights.server_link import serves_our_base

    client = RecordingClient(health)
    assert serves_our_base(client, model)
    first = WeightSyncer(client, model, has_base=True).sync()
    assert first.num_tensors == 0 and client.updates == [] and first.mode == "full"

    with torch.no_grad():  # edited in memory (or resumed) before the first sync: layer 1 differs
        model.model.layers[1].mlp.up_proj.weight.add_(1.0)
    client = RecordingClient(health)
    syncer = WeightSyncer(client, model, has_base=True)
    syncer.sync()
    assert len(client.updates) == 1
    assert {layer_of(n) for n in client.sent} == {"model.layers.1"}  # the whole layer, nothing else
    # After the first sync every step changes everything: all of it goes.
    syncer.sync()
    assert set(client.updates[-1][0]) == {n for n, _ in model.named_parameters()}


# ---------------------------------------------------------------------------
# 5. MoE and renamed models: the checkpoint's names and shapes


@pytest.mark.parametrize("build", [qwen3_moe, mixtral], ids=["qwen3_moe", "mixtral"])
def test_moe_model_syncs_under_the_checkpoint_names(tmp_path, build):
    model = saved_and_reloaded(build(), tmp_path / "ckpt")
    assert any(p.dim() == 3 for p in model.parameters())  # transformers fused the experts
    perturb(model)
    model.save_pretrained(tmp_path / "oracle")  # what transformers itself writes for these weights
    oracle = load_file(str(tmp_path / "oracle" / "model.safetensors"))
    with serving(tmp_path / "ckpt") as (engine, client):
        result = WeightSyncer(client, model, max_bytes_per_request=2048).sync()
    assert set(engine.all_loaded) == set(oracle) and result.num_tensors == len(oracle)
    assert all(torch.equal(engine.all_loaded[n], oracle[n]) for n in oracle)
    seen = layers_per_file(engine.files)
    assert len(seen) > 2 and all(not (a & b) for i, a in enumerate(seen) for b in seen[i + 1 :])


def test_files_are_cut_between_layers_never_between_experts():
    names = [f"model.layers.0.mlp.experts.{e}.{w}.weight" for e in range(4) for w in ("gate_proj", "up_proj")]
    names += ["model.layers.0.mlp.gate.weight", "model.layers.1.self_attn.q_proj.weight", "lm_head.weight"]
    pieces = transport.split_by_module({n: torch.zeros(4) for n in names}, max_bytes=1)
    assert [sorted({layer_of(n) for n in p}) for p in pieces] == [
        ["model.layers.0"],
        ["model.layers.1"],
        ["lm_head"],
    ]


# ---------------------------------------------------------------------------
# 6. Adapters with modules_to_save


def test_adapter_with_modules_to_save_syncs_merged_weights_with_the_saved_module(caplog):
    cfg = peft.LoraConfig(
        r=4,
        lora_alpha=8,
        target_modules=["q_proj", "v_proj"],
        modules_to_save=["lm_head"],
        init_lora_weights=False,
    )
    model = peft.get_peft_model(llama(), cfg)
    trained = model.base_model.model.lm_head.modules_to_save["default"].weight
    with torch.no_grad():
        trained.add_(1.0)  # the trained head differs from the frozen original
    client = RecordingClient()  # update_lora would fail the test: the adapter cannot carry lm_head
    with caplog.at_level(logging.WARNING, logger="verifiers"):
        syncer = WeightSyncer(client, model, use_lora=True)
        result = syncer.sync()
    assert result.mode == "merged"
    assert sum("modules_to_save" in r.getMessage() for r in caplog.records) == 1
    assert torch.equal(client.sent["lm_head.weight"], trained.detach())
    # Later syncs send the adapted layers and the trained head.
    syncer.sync()
    assert "lm_head.weight" in client.updates[-1][0]


# ---------------------------------------------------------------------------
# 7. The serving dtype


def test_floating_tensors_are_sent_in_the_serving_dtype():
    model = llama()  # fp32, as FSDP2 mixed precision keeps its sharded master weights
    client = RecordingClient()
    WeightSyncer(client, model, serving_dtype=torch.bfloat16).sync()
    expected = dict(model.named_parameters())
    assert all(client.sent[n].dtype == torch.bfloat16 for n in expected)
    assert all(torch.equal(client.sent[n], p.detach().to(torch.bfloat16)) for n, p in expected.items())
    assert {p["dtype"] for p in client.updates[0][1]["params"]} == {"bfloat16"}  # announced as sent
    assert expected["model.norm.weight"].dtype == torch.float32  # the model is untouched


def test_fsdp2_mixed_precision_is_synced_in_the_serving_dtype(tmp_path):
    """FSDP2 (one process, gloo, CPU): with param_dtype=bf16 the sharded parameters stay fp32
    DTensors (the finding), the sync gathers them and sends bf16."""
    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if dist.is_initialized():
        pytest.skip("a process group is already set up in this process")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        model = llama()
        expected = {n: p.detach().to(torch.bfloat16) for n, p in model.named_parameters()}
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer in model.model.layers:
            fully_shard(layer, mp_policy=policy)
        fully_shard(model, mp_policy=policy)
        assert all(type(p).__name__ == "DTensor" and p.dtype == torch.float32 for p in model.parameters())
        client = RecordingClient()
        WeightSyncer(client, model, serving_dtype=torch.bfloat16).sync()
    finally:
        dist.destroy_process_group()
    assert set(client.sent) == set(expected)
    assert all(
        client.sent[n].dtype == torch.bfloat16 and torch.equal(client.sent[n], t) for n, t in expected.items()
    )


def test_serving_dtype_comes_from_the_server_else_a_16_bit_checkpoint(tmp_path):
    model = llama()
    assert serving_dtype({"dtype": "bfloat16"}, model) == torch.bfloat16
    assert serving_dtype({"dtype": "torch.float16"}, model) == torch.float16
    assert serving_dtype({}, model) is None  # built in memory: nothing says
    bf16 = saved_and_reloaded(llama().to(torch.bfloat16), tmp_path / "bf16")
    fp32 = saved_and_reloaded(llama(), tmp_path / "fp32")
    loaded_fp32 = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "bf16", dtype=torch.float32)
    assert serving_dtype(None, bf16) == torch.bfloat16
    assert serving_dtype(None, loaded_fp32) == torch.bfloat16  # the checkpoint's, not the trainer's
    assert serving_dtype(None, fp32) is None  # vLLM downcasts float32 checkpoints its own way
    assert serving_dtype({"dtype": "float32"}, bf16) == torch.float32  # the server's word wins


# ---------------------------------------------------------------------------
# 8. Wrapper prefixes


@pytest.mark.parametrize(
    "name, clean",
    [
        ("model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.up_proj.weight"),
        ("_orig_mod.model.norm.weight", "model.norm.weight"),
        (
            "model.layers.3._checkpoint_wrapped_module.self_attn.q_proj.weight",
            "model.layers.3.self_attn.q_proj.weight",
        ),
        ("_fsdp_wrapped_module.model.layers.0._fsdp_wrapped_module.mlp.weight", "model.layers.0.mlp.weight"),
        (
            "_orig_mod.base_model.model.model.layers.0._checkpoint_wrapped_module.self_attn.q_proj.lora_A.default.weight",
            "base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight",
        ),
        ("model.layers.0._orig_mod.mlp.weight", "model.layers.0.mlp.weight"),  # a compiled block
        ("model.my_orig_mod_x.weight", "model.my_orig_mod_x.weight"),  # only whole components
    ],
)
def test_clean_name_strips_wrapper_components(name, clean):
    assert clean_name(name) == clean


def wrapped(model):
    """Activation checkpointing on every block, then torch.compile (not run: the names are there)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    for i, layer in enumerate(model.model.layers):
        model.model.layers[i] = checkpoint_wrapper(layer)
    return torch.compile(model)


def test_compiled_checkpointed_model_syncs_under_hf_names():
    plain = {n: p.detach().clone() for n, p in llama().named_parameters()}
    model = wrapped(llama())
    assert all(n.startswith("_orig_mod.") for n, _ in model.named_parameters())
    client = RecordingClient()
    WeightSyncer(client, model).sync()
    assert set(client.sent) == set(plain) and all(torch.equal(client.sent[n], plain[n]) for n in plain)


def test_compiled_peft_model_is_still_synced_as_an_adapter():
    model = torch.compile(
        peft.get_peft_model(llama(), peft.LoraConfig(r=4, target_modules=["q_proj"], init_lora_weights=False))
    )
    client = RecordingClient()
    client.update_lora = lambda tensors, name="vf-lora", config=None: client.updates.append(
        (dict(tensors), {})
    )
    result = WeightSyncer(client, model).sync()
    assert result.mode == "lora" and result.num_tensors == 4  # 2 layers x (A, B)
    assert all(k.startswith("base_model.model.model.layers.") for k in client.updates[0][0])


def test_fsdp1_flat_parameters_are_refused_in_one_line():
    class Flat(torch.nn.Module):  # what FSDP1's FlatParameter looks like from named_parameters
        def __init__(self):
            super().__init__()
            self._fsdp_wrapped_module = torch.nn.Module()
            self._fsdp_wrapped_module.register_parameter("_flat_param", torch.nn.Parameter(torch.zeros(10)))

    with pytest.raises(WeightSyncError, match="FSDP1 flat parameter.*fsdp_version: 2") as err:
        WeightSyncer(RecordingClient(), Flat()).sync()
    assert err.value.stage == "setup" and "\n" not in str(err.value).split("hint")[0].strip()


# ---------------------------------------------------------------------------
# 9. Stream and device ordering


def test_wait_for_producers_synchronizes_the_current_stream_of_each_cuda_device(monkeypatch):
    synced = []
    monkeypatch.setattr(
        torch.cuda,
        "current_stream",
        lambda device: SimpleNamespace(synchronize=lambda: synced.append(device)),
    )
    tensors = [SimpleNamespace(is_cuda=True, device=d) for d in ("cuda:1", "cuda:1", "cuda:0")]
    sync_module.wait_for_producers([*tensors, torch.zeros(1)])
    assert sorted(synced) == ["cuda:0", "cuda:1"]
    synced.clear()
    sync_module.wait_for_producers([torch.zeros(1)])  # CPU tensors: nothing to wait for
    assert synced == []


def test_on_device_of_makes_the_tensors_device_current(monkeypatch):
    entered = []

    @contextlib.contextmanager
    def device(d):
        entered.append(d)
        yield

    monkeypatch.setattr(torch.cuda, "device", device)
    with sync_module.on_device_of([torch.zeros(1), SimpleNamespace(is_cuda=True, device="cuda:3")]):
        pass
    with sync_module.on_device_of([torch.zeros(1)]):
        pass
    assert entered == ["cuda:3"]


def test_syncer_waits_for_each_layer_before_handing_it_over(monkeypatch):
    events = []
    monkeypatch.setattr(
        sync_module, "wait_for_producers", lambda tensors: events.append(("wait", {id(t) for t in tensors}))
    )

    class Client(RecordingClient):
        def update_weights(self, named_tensors, **kw):
            for _name, tensor in named_tensors:
                events.append(("send", id(tensor)))

    WeightSyncer(Client(), llama()).sync()
    waited: set[int] = set()
    for kind, what in events:
        if kind == "wait":
            waited |= what
        else:
            assert what in waited, "a tensor was handed over before its stream was waited for"
    assert sum(kind == "wait" for kind, _ in events) == 2 + 3  # 2 layers + embed, norm, lm_head


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.gpu
@cuda
def test_gpu_sync_hands_over_finished_tensors_on_their_device():
    device = torch.device("cuda", torch.cuda.device_count() - 1)
    model = llama().to(device)
    seen = []

    class Client(RecordingClient):
        def update_weights(self, named_tensors, **kw):
            for _name, tensor in named_tensors:
                # Nothing is left queued on the producing stream when the tensor arrives.
                seen.append((tensor.device, torch.cuda.current_stream(tensor.device).query()))

    WeightSyncer(Client(), model, serving_dtype=torch.bfloat16).sync()
    assert seen and all(d == device and done for d, done in seen)


@pytest.mark.gpu
@cuda
def test_gpu_on_device_of_sets_the_sender_threads_device():
    import threading

    device = torch.device("cuda", torch.cuda.device_count() - 1)
    tensor = torch.zeros(4, device=device)
    current = []

    def send():
        with sync_module.on_device_of([tensor]):
            current.append(torch.cuda.current_device())

    thread = threading.Thread(target=send)
    thread.start()
    thread.join()
    assert current == [device.index]

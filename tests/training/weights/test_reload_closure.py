"""What a partial (merged-LoRA) sync must carry for vLLM to reload it, a tied head trained apart,
an adapter over another run's weights, and the serving-dtype copy a sync no longer makes.

The server's own check (``verifiers.inference.server.worker.validate_params``) judges every update here,
with vLLM's ``packed_modules_mapping`` of the served class as its fused groups."""

from __future__ import annotations

import contextlib
import copy

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from verifiers.errors import ConfigError  # noqa: E402
from verifiers.inference.server.worker import validate_params  # noqa: E402
from verifiers.training.weights.sync import WeightSyncer  # noqa: E402

SMALL = dict(
    vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
    num_key_value_heads=2,
)  # fmt: skip


def tiny(kind: str = "llama", tied: bool = True):
    torch.manual_seed(0)
    if kind == "qwen2":
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**SMALL, tie_word_embeddings=tied))
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMALL, tie_word_embeddings=tied))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.normal_()
    return model


def lora(model, targets, **kw):
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=targets, init_lora_weights=False, **kw)
    return peft.get_peft_model(model, config)


class Client:
    """Records each update's announced params and tensors (and their storage) as a server would get them."""

    def __init__(self, lora_enabled: bool = False, weight_version: int = 0):
        self.lora_enabled, self.weight_version = lora_enabled, weight_version
        self.updates: list[tuple[list[dict], dict[str, torch.Tensor]]] = []
        self.pointers: dict[str, int] = {}
        self.lora_calls = 0

    def update_weights(self, pairs, params=None, **kw):
        tensors = {}
        for name, t in pairs:
            self.pointers[name] = t.data_ptr()
            tensors[name] = t.clone()
        self.updates.append((params, tensors))

    def update_lora(self, tensors, name="vf-lora", config=None):
        from verifiers.errors import ServerError

        if not self.lora_enabled:
            raise ServerError("LoRA is not enabled on this server", status=400)
        self.lora_calls += 1

    def reset_prefix_cache(self):
        pass

    def health(self):
        return {"model": "x", "weight_version": self.weight_version}


@pytest.fixture(scope="module")
def vllm_fused():
    """``model_type -> packed_modules_mapping`` of the class vLLM serves it with (vLLM's own code)."""
    pytest.importorskip("vllm")
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    from vllm import ModelRegistry

    fused = {}
    for model_type in ("llama", "mistral", "qwen2", "qwen3"):
        cls = ModelRegistry._try_load_model_cls(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type])
        fused[model_type] = dict(cls.packed_modules_mapping)
    return fused


def spec_of(model, fused: dict) -> dict:
    """The server's ``vf_weight_spec()`` for ``model``'s checkpoint (see worker.py)."""
    params = {n: [list(t.shape), "F32"] for n, t in model.state_dict().items()}
    tied = bool(model.config.tie_word_embeddings)
    return {"params": params, "fused": fused, "tied": tied}


def test_the_fused_table_is_vllms_packed_modules_mapping(vllm_fused):
    from verifiers.inference.names import FUSED_BY_MODEL_TYPE

    assert set(FUSED_BY_MODEL_TYPE) <= set(vllm_fused)
    for model_type, groups in FUSED_BY_MODEL_TYPE.items():
        assert sorted(map(tuple, vllm_fused[model_type].values())) == sorted(groups), model_type


@pytest.mark.parametrize(
    ("kind", "targets", "extra"),
    [
        ("qwen2", ["q_proj", "k_proj", "v_proj", "o_proj"], {}),  # biases: "also send ...q_proj.bias"
        ("llama", ["q_proj", "v_proj"], {}),  # PEFT's default: "also send ...k_proj.weight"
        ("qwen2", ["gate_proj", "down_proj"], {}),  # gate without up
        ("qwen2", ["q_proj"], {"bias": "lora_only"}),  # a trainable bias of an adapted module
        ("llama", ["v_proj"], {"modules_to_save": ["lm_head"], "tied": False}),
    ],
)
def test_merged_syncs_after_the_first_pass_the_servers_check(vllm_fused, kind, targets, extra):
    extra = dict(extra)
    base = tiny(kind, tied=extra.pop("tied", True))
    served = copy.deepcopy(base).state_dict()
    spec = spec_of(base, vllm_fused[kind])
    model = lora(base, targets, **extra)
    client = Client()
    syncer = WeightSyncer(client, model, has_base=True)  # from the first sync: only what changes
    syncer.sync()
    syncer.sync()
    merged = copy.deepcopy(model).merge_and_unload().state_dict()
    for params, tensors in client.updates:
        assert validate_params(spec, params) == []
        assert {p["name"] for p in params} == set(tensors)
        for name, tensor in tensors.items():  # adapted: merged; fused siblings: as they are
            torch.testing.assert_close(tensor, merged[name], rtol=0, atol=1e-6)
        assert len(tensors) < len(served)  # never the whole model
        adapted = {n for n in tensors if n.rsplit(".", 2)[-2] in targets}
        assert adapted and all(not torch.equal(tensors[n], served[n]) for n in adapted if "weight" in n)


def test_a_lora_on_the_embedding_is_merged_into_it():
    """PEFT keeps an embedding's LoRA in ``lora_embedding_A/B``, not ``lora_A/B``: it was sent unmerged."""
    model = lora(tiny(tied=False), ["embed_tokens", "q_proj"])
    merged = copy.deepcopy(model).merge_and_unload().state_dict()
    client = Client()
    WeightSyncer(client, model, has_base=True).sync()
    _, tensors = client.updates[0]
    name = "model.embed_tokens.weight"
    assert name in tensors and not torch.equal(tensors[name], tiny(tied=False).state_dict()[name])
    torch.testing.assert_close(tensors[name], merged[name], rtol=0, atol=1e-6)


def test_an_architecture_not_in_the_table_sends_whole_layers():
    from verifiers.inference.names import FUSED_BY_MODEL_TYPE, reload_closure

    names = [
        "model.embed_tokens.weight",
        "model.layers.0.attn.wq.weight",
        "model.layers.0.attn.wk.weight",
        "model.layers.0.mlp.experts.3.w1.weight",
        "model.layers.1.attn.wq.weight",
        "lm_head.weight",
    ]
    got = reload_closure({"model.layers.0.attn.wq.weight", "lm_head.weight"}, names, None)
    assert got == set(names[1:4]) | {"lm_head.weight"}
    # A known architecture: the module (weight and bias) and its fused siblings, nothing else.
    qwen = [
        f"model.layers.0.self_attn.{m}.{k}"
        for m in ("q_proj", "k_proj", "v_proj")
        for k in ("weight", "bias")
    ]
    qwen += ["model.layers.0.self_attn.o_proj.weight", "model.layers.0.mlp.up_proj.weight"]
    got = reload_closure({"model.layers.0.self_attn.v_proj.weight"}, qwen, FUSED_BY_MODEL_TYPE["qwen2"])
    assert got == set(qwen[:6])


# ---------------------------------------------------------------------------
# A tied head trained apart (issue 39, finding 5)


@pytest.mark.parametrize(
    ("targets", "saved"),
    [
        (["q_proj"], ["lm_head"]),
        (["q_proj"], ["embed_tokens"]),
        (["embed_tokens"], None),
        (["lm_head"], None),
    ],
)
def test_a_tied_model_training_its_head_apart_is_refused_at_setup(targets, saved):
    model = lora(tiny(tied=True), targets, modules_to_save=saved)
    with pytest.raises(ConfigError, match=r"tie_word_embeddings.*ensure_weight_tying=True"):
        WeightSyncer(Client(), model, use_lora=False)  # merged (modules_to_save: in any case)


def test_a_tied_model_with_lora_on_its_head_alone_is_refused_when_falling_back_to_merged():
    model = lora(tiny(tied=True), ["lm_head"])
    syncer = WeightSyncer(Client(lora_enabled=False), model, use_lora=True)  # an adapter keeps the tie
    with pytest.raises(ConfigError, match=r"a LoRA on lm_head alone"):
        syncer.sync()


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_tied_head_trained_as_one_shared_copy_is_synced():
    model = lora(tiny(tied=True), ["q_proj"], modules_to_save=["embed_tokens"], ensure_weight_tying=True)
    head = model.get_base_model().get_output_embeddings().weight
    assert head is model.get_base_model().get_input_embeddings().weight
    with torch.no_grad():
        head.add_(1.0)  # a step on the shared copy: what both trainer and vLLM use
    client = Client()
    WeightSyncer(client, model, has_base=True).sync()
    _, tensors = client.updates[0]
    assert torch.equal(tensors["model.embed_tokens.weight"], head)
    assert "lm_head.weight" not in tensors


def test_an_untied_head_may_be_trained():
    model = lora(tiny(tied=False), ["q_proj"], modules_to_save=["lm_head"])
    WeightSyncer(Client(), model).sync()


# ---------------------------------------------------------------------------
# An adapter over another run's weights (issue 39, finding 6)


def test_an_adapter_over_another_runs_weights_sends_the_base_back_first():
    from verifiers.training.weights.server_link import holds_other_weights

    base = tiny()
    frozen = {n: p.detach().clone() for n, p in base.named_parameters()}
    model = lora(base, ["q_proj", "v_proj"])  # init_lora_weights=False: the adapter is not zero
    client = Client(lora_enabled=True, weight_version=3)
    assert holds_other_weights(client) and not holds_other_weights(Client())
    syncer = WeightSyncer(client, model, use_lora=True, base_changed=holds_other_weights(client))
    first = syncer.sync()
    assert first.mode == "lora" and client.lora_calls == 1 and len(client.updates) == 1
    _, tensors = client.updates[0]
    assert set(tensors) == set(frozen)  # the whole base, unmerged
    assert all(torch.equal(tensors[n], frozen[n]) for n in frozen)
    syncer.sync()
    assert client.lora_calls == 2 and len(client.updates) == 1  # once


# ---------------------------------------------------------------------------
# No serving-dtype copy of what is already one (issue 39, finding 9)


def test_a_parameter_already_in_the_serving_dtype_is_sent_without_a_copy():
    model = tiny().to(torch.bfloat16)
    client = Client()
    WeightSyncer(client, model, serving_dtype=torch.bfloat16).sync()
    params = dict(model.named_parameters())
    assert set(client.pointers) == set(params)
    assert all(client.pointers[n] == p.data_ptr() for n, p in params.items())


def test_a_gathered_or_cast_parameter_is_still_copied():
    model = tiny()
    params = dict(model.named_parameters())
    cast = Client()
    WeightSyncer(cast, model, serving_dtype=torch.bfloat16).sync()
    assert all(cast.pointers[n] != p.data_ptr() for n, p in params.items())
    # Under ZeRO-3 (any gather) the gathered storage is released when the block exits: copied.
    gathered = Client()
    WeightSyncer(gathered, model, gather=lambda params, modify=False: contextlib.nullcontext()).sync()
    assert all(gathered.pointers[n] != p.data_ptr() for n, p in params.items())

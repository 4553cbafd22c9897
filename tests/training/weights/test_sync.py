"""Weight sync with a fake client: chunked gathering, LoRA vs full, merged fallback with one warning;
the reference model's sync (mixing, loss/reference.py) under a simulated ZeRO-3 and its DeepSpeed
config, which gather as the weight sync does."""

from __future__ import annotations

import contextlib
import copy
import logging

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from verifiers.errors import ConfigError, ServerError, WeightSyncError  # noqa: E402
from verifiers.training.loss.reference import (  # noqa: E402
    inference_config,
    make_reference,
    mix_into_reference,
    zero3_reference,
)
from verifiers.training.weights.sync import WeightSyncer  # noqa: E402
from verifiers.utils.logging import reset_warn_once  # noqa: E402


def tiny_llama(tied: bool = True):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        tie_word_embeddings=tied,
    )
    return transformers.LlamaForCausalLM(config)


def with_lora(model):
    cfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    return peft.get_peft_model(model, cfg)


class FakeClient:
    def __init__(self, lora_enabled: bool = True, fail_weights: bool = False):
        self.lora_enabled, self.fail_weights = lora_enabled, fail_weights
        self.weights: dict[str, torch.Tensor] = {}
        self.weight_calls = 0
        self.lora_calls: list[tuple] = []
        self.resets = 0

    def update_weights(self, named_tensors, **kw):
        if self.fail_weights:
            raise ServerError("update refused", status=500)
        self.weight_calls += 1
        self.weights.update({n: t.clone() for n, t in named_tensors})

    def update_lora(self, tensors, name="vf-lora", config=None):
        if not self.lora_enabled:
            raise ServerError("LoRA is not enabled on this server", status=400)
        self.lora_calls.append((name, dict(tensors), config))

    def reset_prefix_cache(self):
        self.resets += 1


class CountingGather:
    """Stands in for deepspeed's GatheredParameters; records group sizes and forbids nesting."""

    def __init__(self):
        self.sizes: list[int] = []
        self.active = 0

    @contextlib.contextmanager
    def __call__(self, params):
        assert self.active == 0, "gathers must not nest"
        self.active += 1
        self.sizes.append(len(params))
        try:
            yield
        finally:
            self.active -= 1


def test_full_sync_is_one_update_of_every_parameter_in_small_gathers():
    model = tiny_llama()
    client, gather = FakeClient(), CountingGather()
    syncer = WeightSyncer(client, model, gather=gather, max_tensors_per_gather=3, max_bytes_per_request=4096)
    client.kwargs = []
    original = client.update_weights
    client.update_weights = lambda named, **kw: (client.kwargs.append(kw), original(named))
    result = syncer.sync()
    # One server transaction however large (it was one per ~max_bytes): the tensors stream in,
    # and the client cuts them into files of max_bytes between layers.
    assert client.weight_calls == 1
    assert client.kwargs[0]["max_file_bytes"] == 4096
    expected = dict(model.named_parameters())
    assert set(client.weights) == set(expected)  # HF names; tied lm_head appears once
    assert all(torch.equal(client.weights[n], p.data) for n, p in expected.items())
    # Everything announced up front, before any gather: names, shapes and dtypes.
    announced = {p["name"]: (p["shape"], p["dtype"]) for p in client.kwargs[0]["params"]}
    assert announced == {n: (list(p.shape), "float32") for n, p in expected.items()}
    assert max(gather.sizes) <= 3 and sum(gather.sizes) == len(expected)
    assert result.mode == "full" and result.num_tensors == len(expected) and client.resets == 1


def test_non_main_rank_gathers_but_sends_nothing():
    model = tiny_llama()
    client, gather = FakeClient(), CountingGather()
    result = WeightSyncer(
        client, model, gather=gather, is_main_process=False, max_tensors_per_gather=4
    ).sync()
    assert client.weight_calls == 0 and client.resets == 0 and result.num_tensors == 0
    assert sum(gather.sizes) == len(list(model.parameters()))


def test_a_client_that_skips_the_update_still_gathers_every_layer():
    """The multi-process outage latch returns without reading the stream: the main process must
    still run every gather, or the other ranks would wait in theirs forever."""
    model = tiny_llama()
    client, gather = FakeClient(), CountingGather()
    client.update_weights = lambda pairs, **kw: None
    WeightSyncer(client, model, gather=gather, max_tensors_per_gather=2).sync()
    assert sum(gather.sizes) == len(list(model.parameters()))


def test_lora_sync_sends_only_the_adapter():
    model = with_lora(tiny_llama())
    client, gather = FakeClient(), CountingGather()
    result = WeightSyncer(client, model, gather=gather, max_tensors_per_gather=2).sync()
    assert client.weight_calls == 0 and len(client.lora_calls) == 1
    name, tensors, config = client.lora_calls[0]
    lora_names = [n for n, _ in model.named_parameters() if "lora_" in n]
    assert len(tensors) == len(lora_names) == 8  # 2 layers x (q, v) x (A, B)
    assert all(".default." not in k and "lora_" in k for k in tensors)
    saved = peft.get_peft_model_state_dict(model)
    assert set(tensors) == set(saved) and all(torch.equal(tensors[k], saved[k]) for k in saved)
    assert config["r"] == 4 and sorted(config["target_modules"]) == ["q_proj", "v_proj"]
    assert max(gather.sizes) <= 2 and result.mode == "lora"


def test_lora_rejected_falls_back_to_merged_weights_with_one_warning(caplog):
    reset_warn_once()
    model = with_lora(tiny_llama())
    merged_reference = copy.deepcopy(model).merge_and_unload().state_dict()
    client, gather = FakeClient(lora_enabled=False), CountingGather()
    syncer = WeightSyncer(client, model, gather=gather, max_tensors_per_gather=3)
    with caplog.at_level(logging.WARNING, logger="verifiers"):
        first = syncer.sync()
        second = syncer.sync()
    warnings = [r for r in caplog.records if "falling back" in r.getMessage()]
    assert len(warnings) == 1
    assert first.mode == second.mode == "merged"
    assert len(client.lora_calls) == 0  # no second attempt
    base_names = {n for n, _ in tiny_llama().named_parameters()}
    assert set(client.weights) == base_names
    for name in base_names:
        torch.testing.assert_close(client.weights[name], merged_reference[name], rtol=0, atol=1e-6)
    # The model itself is left unmerged.
    assert any("lora_A" in n for n, _ in model.named_parameters())
    # A merged unit gathers W, A and B together, still within the limit.
    assert max(gather.sizes) <= 3


def test_merged_sync_sends_every_weight_once_then_only_the_adapted_fused_groups():
    model = with_lora(tiny_llama())  # LoRA on q_proj and v_proj of 2 layers
    client = FakeClient(lora_enabled=False)
    syncer = WeightSyncer(client, model)
    first = syncer.sync()
    assert first.num_tensors == len(list(tiny_llama().named_parameters()))
    with torch.no_grad():  # a training step: the adapter moves, the base does not
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.add_(0.5)
    client.weights.clear()
    second = syncer.sync()
    merged = copy.deepcopy(model).merge_and_unload().state_dict()
    # vLLM fuses q/k/v into one layer and reloads it whole: k_proj travels too, as it is.
    qkv = ("q_proj", "k_proj", "v_proj")
    expected = {f"model.layers.{i}.self_attn.{m}.weight" for i in range(2) for m in qkv}
    assert set(client.weights) == expected and second.num_tensors == 6
    for name in expected:
        torch.testing.assert_close(client.weights[name], merged[name], rtol=0, atol=1e-6)
        adapted = ".k_proj." not in name
        assert torch.equal(client.weights[name], tiny_llama().state_dict()[name]) != adapted


def test_a_server_holding_our_checkpoint_gets_only_the_adapted_layers_from_the_start():
    from verifiers.training.weights.server_link import serves_our_base

    model = with_lora(tiny_llama())
    model.get_base_model().config._name_or_path = "/models/tiny"

    class Health(FakeClient):
        def __init__(self, **health):
            super().__init__(lora_enabled=False)
            self._health = health

        def health(self):
            return self._health

    fresh = Health(model="/models/tiny", weight_version=0)
    assert serves_our_base(fresh, model)
    assert not serves_our_base(Health(model="/models/other", weight_version=0), model)
    assert not serves_our_base(Health(model="/models/tiny", weight_version=3), model)  # another run's weights
    assert not serves_our_base(FakeClient(), model)  # cannot tell: send everything
    first = WeightSyncer(fresh, model, has_base=True).sync()
    assert first.mode == "merged" and first.num_tensors == 6  # q_proj, v_proj (and k_proj) of 2 layers


def test_lora_error_after_success_is_raised_not_hidden():
    model = with_lora(tiny_llama())
    client = FakeClient()
    syncer = WeightSyncer(client, model)
    syncer.sync()
    client.lora_enabled = False
    with pytest.raises(ServerError):
        syncer.sync()


def test_server_error_becomes_weight_sync_error_naming_the_stage():
    with pytest.raises(WeightSyncError, match="stage 'update_weights'"):
        WeightSyncer(FakeClient(fail_weights=True), tiny_llama()).sync()


# ---------------------------------------------------------------------------
# Reference model


class FakeSharding:
    """Simulates ZeRO-3 on one process: outside a gather the parameters hold NaN (a rank's shard is
    not the tensor); a gather restores them, and only a ``modify=True`` gather keeps changes."""

    def __init__(self, *models):
        self.store = {}
        for model in models:
            for p in model.parameters():
                self.store[p] = p.data.clone()
                p.data = torch.full_like(p.data, float("nan"))
        self.calls: list[tuple[int, bool, bool]] = []  # (size, modify, of the reference)
        self.ref_params: set = set()

    @contextlib.contextmanager
    def __call__(self, params, modify=False):
        self.calls.append((len(params), modify, all(id(p) in self.ref_params for p in params)))
        for p in params:
            p.data = self.store[p].clone()
        try:
            yield
        finally:
            for p in params:
                if modify:
                    self.store[p] = p.data.clone()
                p.data = torch.full_like(p.data, float("nan"))

    def unshard(self, model):
        return {n: self.store[p] for n, p in model.named_parameters()}


def test_reference_sync_mixes_by_the_formula_in_small_gathers():
    policy = tiny_llama()
    ref = make_reference(policy)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.01 * torch.randn_like(p))
    before = {n: p.detach().clone() for n, p in ref.named_parameters()}
    current = {n: p.detach().clone() for n, p in policy.named_parameters()}
    gather = FakeSharding(policy, ref)
    gather.ref_params = {id(p) for p in ref.parameters()}
    mix_into_reference(ref, policy, 0.3, gather=gather, max_tensors_per_gather=3)
    after, policy_after = gather.unshard(ref), gather.unshard(policy)
    for name, p in before.items():
        torch.testing.assert_close(after[name], 0.3 * current[name] + 0.7 * p, rtol=0, atol=1e-6)
        assert not torch.equal(after[name], p)
        assert torch.equal(policy_after[name], current[name])  # the policy is only read
    # Groups of at most 3 per model; the reference's are the ones written back.
    assert max(n for n, _, _ in gather.calls) <= 3
    assert all(modify == of_ref for _, modify, of_ref in gather.calls)
    assert sum(n for n, modify, _ in gather.calls if modify) == len(before)


def test_reference_sync_with_alpha_one_copies_the_policy_exactly():
    policy, ref = tiny_llama(), tiny_llama()
    with torch.no_grad():
        for p in ref.parameters():
            p.normal_()
    mix_into_reference(ref, policy, 1.0)
    assert all(torch.equal(p, q) for p, q in zip(ref.parameters(), policy.parameters(), strict=True))


def test_reference_sync_refuses_a_different_model():
    small = transformers.LlamaForCausalLM(
        transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=2)
    )  # fmt: skip
    with pytest.raises(ValueError, match="layers.1"):
        mix_into_reference(tiny_llama(), small, 0.5)


def test_reference_engine_config_drops_training_parts_and_fills_bucket_sizes():
    policy_config = {
        "train_micro_batch_size_per_gpu": 4,
        "optimizer": {"type": "AdamW", "params": {"lr": "auto"}},
        "scheduler": {"type": "WarmupLR"},
        "zero_optimization": {
            "stage": 3,
            "offload_optimizer": {"device": "cpu"},
            "offload_param": {"device": "cpu"},
            "reduce_bucket_size": "auto",
            "stage3_prefetch_bucket_size": "auto",
            "stage3_param_persistence_threshold": 1234,  # set by the user: kept
        },
    }
    config = inference_config(policy_config, hidden_size=64)
    assert "optimizer" not in config and "scheduler" not in config
    zero = config["zero_optimization"]
    assert "offload_optimizer" not in zero and zero["offload_param"] == {"device": "cpu"}
    assert zero["reduce_bucket_size"] == 64 * 64 and zero["stage3_prefetch_bucket_size"] == int(0.9 * 64 * 64)
    assert zero["stage3_param_persistence_threshold"] == 1234 and zero["stage"] == 3
    assert "optimizer" in policy_config and policy_config["zero_optimization"]["reduce_bucket_size"] == "auto"


def test_sharded_reference_needs_a_transformers_model():
    model = torch.nn.Linear(4, 4)
    model.weight.ds_id = 0  # as if loaded under deepspeed.zero.Init
    with pytest.raises(ConfigError, match="Linear loaded under zero.Init"):
        zero3_reference(model, {"zero_optimization": {"stage": 3}})

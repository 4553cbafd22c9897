"""chunked_head: log-probs from hidden states a chunk of positions at a time, against the full logits.

Every case compares ``sequence_logprobs`` (the trainer's and prepared.py's path) with
``from_hidden=False`` (the legacy path, logits kept whole) on the same model and batch, in
fp32: log-probs, entropies, the gradients of every trainable parameter and of the decoder's
last hidden states.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

TOL = 1e-5


def _batch(vocab: int, rows: int = 3, width: int = 20, start: int = 5, shared: bool = False, seed: int = 0):
    """Right-padded rows (the second one shorter); with ``shared`` the rows share their first
    ``start`` tokens (a GRPO group, which ``sequence_logprobs`` runs packed)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (rows, width), generator=g)
    if shared:
        ids[:, :start] = ids[0, :start]
    attn = torch.ones_like(ids)
    attn[1, width - 6 :] = 0
    return ids, attn, start


def _model(path, lora: str | None = None):
    """fp32 tiny Llama; ``lora``: None (full fine-tuning), "attn" (the repo's defaults),
    "head" (LoRA on lm_head too) or "save" (lm_head in modules_to_save)."""
    from verifiers.models import get_model

    model = get_model(str(path), model_kwargs={"dtype": torch.float32, "attn_implementation": "sdpa"})
    if lora is None:
        return model
    from peft import LoraConfig, get_peft_model

    targets = ["q_proj", "v_proj"] + (["lm_head"] if lora == "head" else [])
    config = LoraConfig(
        r=4,
        lora_alpha=8,
        target_modules=targets,
        modules_to_save=["lm_head"] if lora == "save" else None,
        init_lora_weights=False,  # random B: the adapters change the log-probs, so they are tested
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def _run(model, ids, attn, start, *, from_hidden: bool, temperature: float = 1.0, chunk_rows: int = 4):
    """Log-probs, entropies, trainable-parameter gradients and the decoder output's gradient."""
    from verifiers.training.loss.chunked_head import causal_lm
    from verifiers.training.loss.logprobs import sequence_logprobs

    model.zero_grad(set_to_none=True)
    kept = {}

    def keep(module, args, out):
        out.last_hidden_state.retain_grad()
        kept["h"] = out.last_hidden_state

    hook = causal_lm(model).model.register_forward_hook(keep)
    try:
        lp, ent = sequence_logprobs(
            model, ids, attn, start, temperature, True, chunk_rows=chunk_rows, from_hidden=from_hidden
        )
    finally:
        hook.remove()
    real = attn[:, start:].bool()
    # A loss weighting tokens unequally, so a gradient mixed up between rows would show.
    weights = torch.linspace(0.5, 1.5, real.numel()).view_as(lp) * real
    (lp * weights).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return lp.detach()[real], ent[real], grads, kept["h"].grad.clone()


def _assert_same(fast, slow) -> dict[str, float]:
    """Equal within TOL (gradients relative to their largest entry); returns the errors measured."""
    errors = {
        "logprobs": float((fast[0] - slow[0]).abs().max()),
        "entropy": float(((fast[1] - slow[1]) / slow[1].abs().clamp(min=1)).abs().max()),
        "hidden_grad": float((fast[3] - slow[3]).abs().max() / slow[3].abs().max()),
    }
    assert fast[2].keys() == slow[2].keys() and slow[2], sorted(set(fast[2]) ^ set(slow[2]))
    errors["param_grad"] = max(
        float((fast[2][n] - g).abs().max() / g.abs().max().clamp(min=1e-30)) for n, g in slow[2].items()
    )
    assert all(e <= TOL for e in errors.values()), errors
    return errors


@pytest.mark.parametrize(
    "lora, tied, temperature, shared",
    [
        pytest.param(None, True, 1.0, False, id="full-tied"),
        pytest.param(None, False, 0.7, False, id="full-untied-temperature"),
        pytest.param("attn", True, 0.7, False, id="lora"),
        pytest.param("attn", True, 1.3, True, id="lora-packed"),
        pytest.param(None, False, 1.0, True, id="full-untied-packed"),
        pytest.param("head", False, 0.7, False, id="lora-on-lm_head"),
        pytest.param("save", True, 1.0, True, id="lm_head-modules_to_save-packed"),
    ],
)
def test_chunked_head_matches_full_logits(
    tiny_model_dir, tiny_untied_model_dir, lora, tied, temperature, shared
):
    from verifiers.training.loss import logprobs
    from verifiers.training.loss.chunked_head import output_head

    model = _model(tiny_model_dir if tied else tiny_untied_model_dir, lora)
    ids, attn, start = _batch(model.config.vocab_size, shared=shared)
    assert output_head(model) is not None
    assert logprobs.can_pack(model, ids, attn, start) == shared
    fast = _run(model, ids, attn, start, from_hidden=True, temperature=temperature)
    slow = _run(model, ids, attn, start, from_hidden=False, temperature=temperature)
    print("errors:", _assert_same(fast, slow))
    if lora in ("head", "save"):  # the head's own adapter or copy is trained
        assert any("lm_head" in n for n in fast[2]), sorted(fast[2])


def test_chunk_size_does_not_change_the_result_and_the_head_runs_inside_its_own_call(tiny_model_dir):
    from verifiers.training.loss.chunked_head import output_head

    model = _model(tiny_model_dir, "attn")
    ids, attn, start = _batch(model.config.vocab_size)
    calls = []
    head = output_head(model)
    hook = head.register_forward_hook(lambda m, a, out: calls.append(tuple(out.shape)))
    one = _run(model, ids, attn, start, from_hidden=True, chunk_rows=10**6)
    many = _run(model, ids, attn, start, from_hidden=True, chunk_rows=3)
    hook.remove()
    # The module is called once per forward (its hooks, e.g. ZeRO-3's gather, fire once) and
    # returns the scored tokens' log-probs, not [rows, kept, vocab] logits.
    n = int(attn[:, start:].sum()) + 6  # padded positions are scored too, then dropped
    assert calls == [(n,), (n,)]
    _assert_same(many, one)
    assert "forward" not in head.__dict__  # the swapped forward is gone after the call


def test_no_grad_passes_match_and_keep_no_graph(tiny_model_dir):
    """The old / reference log-probs (logprobs.eval_logprobs runs sequence_logprobs under no_grad)."""
    from verifiers.training.loss.logprobs import eval_logprobs, sequence_logprobs

    model = _model(tiny_model_dir, "attn")
    for shared in (False, True):
        ids, attn, start = _batch(model.config.vocab_size, shared=shared)
        fast = eval_logprobs(model, ids, attn, start, 0.7, "cpu")
        with torch.no_grad():
            slow, _ = sequence_logprobs(model, ids, attn, start, 0.7, from_hidden=False)
        assert not fast.requires_grad
        real = attn[:, start:].bool()
        torch.testing.assert_close(fast[real], slow[real], rtol=0, atol=TOL)


def test_unknown_heads_fall_back_to_the_full_logits(tiny_model_dir, monkeypatch):
    from verifiers.training.loss import chunked_head

    model = _model(tiny_model_dir)
    assert chunked_head.output_head(model) is model.lm_head
    monkeypatch.setattr(
        model.config, "final_logit_softcapping", 30.0, raising=False
    )  # Gemma 2's: not a plain head
    assert chunked_head.output_head(model) is None
    monkeypatch.setattr(model.config, "final_logit_softcapping", None)
    monkeypatch.setattr(model.config, "model_type", "granite")  # divides the logits after the head
    assert chunked_head.output_head(model) is None


class _LargestTensors(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the largest tensor any op produces, overall and among logits-like ones:
    ``[..., vocab]``, other than the ``[hidden, vocab]`` head weight's transpose."""

    def __init__(self, vocab: int, hidden: int):
        super().__init__()
        self.vocab, self.hidden, self.largest, self.largest_logits = vocab, hidden, 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
                if t.dim() and t.shape[-1] == self.vocab and tuple(t.shape) != (self.hidden, self.vocab):
                    self.largest_logits = max(self.largest_logits, t.numel())
        return out


@pytest.mark.parametrize("shared", [False, True], ids=["padded", "packed"])
def test_no_tensor_grows_with_tokens_x_vocab(tiny_model_dir, shared):
    """Forward + backward with 4 x 35 tokens and 16-row chunks: the chunked head's largest
    logits-like tensor is one chunk, the legacy path's all kept positions."""
    from verifiers.training.loss.logprobs import sequence_logprobs

    model = _model(tiny_model_dir, "attn")
    V, H = model.config.vocab_size, model.config.hidden_size
    ids, attn, start = _batch(V, rows=4, width=45, start=10, shared=shared)
    tokens, rows = 4 * 35, 16
    sizes = {}
    for from_hidden in (True, False):
        mode = _LargestTensors(V, H)
        with mode:
            lp, _ = sequence_logprobs(
                model, ids, attn, start, 0.7, True, chunk_rows=rows, from_hidden=from_hidden
            )
            (lp * attn[:, start:]).sum().backward()
        sizes[from_hidden] = (mode.largest, mode.largest_logits)
    print(f"largest tensor / logits-like tensor (elements): chunked {sizes[True]}, full {sizes[False]}")
    assert sizes[False][1] >= tokens * V  # the legacy path keeps every position's logits
    assert sizes[True][1] <= rows * V
    # Everything else is smaller too: the largest other tensor is the [V, H] embedding (its gradient).
    assert sizes[True][0] <= max(rows * V, V * H) < tokens * V


@pytest.fixture
def one_process_group(tmp_path, monkeypatch):
    """A gloo process group of one, as DeepSpeed and FSDP2 need; torn down after the test."""
    import torch.distributed as dist

    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(key, value)  # DeepSpeed reads them
    if dist.is_initialized():
        pytest.skip("a process group is already set up in this process")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
        _forget_deepspeed_groups()


def _forget_deepspeed_groups() -> None:
    """DeepSpeed caches the process group and groups made from it at module level; a later
    group in this process (the next test) would otherwise be handed the destroyed ones."""
    import sys

    if "deepspeed" not in sys.modules:
        return
    from deepspeed.comm import comm
    from deepspeed.utils import groups

    comm.cdb = None
    for name in dir(groups):
        if name.startswith("_") and name.isupper() and name.endswith("GROUP"):
            setattr(groups, name, None)


def _plain_reference(path, ids, attn, start, temperature, frozen_head: bool = False):
    """The legacy path on an unwrapped copy: log-probs and gradients by parameter name."""
    model = _model(path)
    if frozen_head:
        model.lm_head.weight.requires_grad_(False)
    lp, grads, _ = _loss_and_grads(model, ids, attn, start, temperature, from_hidden=False)
    return lp, grads


def _loss_and_grads(
    model, ids, attn, start, temperature, *, from_hidden: bool, chunk_rows: int = 4, backward=None
):
    from verifiers.training.loss.logprobs import sequence_logprobs

    lp, _ = sequence_logprobs(
        model, ids, attn, start, temperature, chunk_rows=chunk_rows, from_hidden=from_hidden
    )
    loss = (lp * attn[:, start:]).sum()
    (backward or torch.Tensor.backward)(loss)
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    return lp.detach(), grads, loss


@pytest.mark.parametrize(
    "tied, frozen_head",
    [(True, False), (False, False), (False, True), (True, True)],
    ids=["tied", "untied", "untied-frozen-head", "tied-frozen-head"],
)
def test_zero3_one_process_matches_and_gathers_the_head_once(
    tiny_model_dir, tiny_untied_model_dir, one_process_group, monkeypatch, tied, frozen_head
):
    """DeepSpeed ZeRO-3 (gloo, one process, fp32): log-probs and full gradients equal
    the plain model's legacy path, and the head's weight is gathered as often with 64 chunks
    as with one, and as on the legacy path: the chunks run inside the head's one call, within
    its gather. A frozen head (FrozenHeadScores: its weight read inside that call) too."""
    deepspeed = pytest.importorskip("deepspeed")
    from deepspeed.utils import safe_get_full_grad

    path = tiny_model_dir if tied else tiny_untied_model_dir
    ids, attn, start = _batch(49152, rows=4, width=40, start=8)
    lp_ref, grads_ref = _plain_reference(path, ids, attn, start, 0.7, frozen_head=frozen_head)

    model = _model(path)
    if frozen_head:
        model.lm_head.weight.requires_grad_(False)
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": 3},
        "zero_allow_untested_optimizer": True,  # torch's AdamW: no DeepSpeed op to build
    }
    engine, *_ = deepspeed.initialize(
        model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.0), config=config
    )
    weight = engine.module.lm_head.weight
    assert weight.ds_status.name == "NOT_AVAILABLE"
    assert (weight is engine.module.model.embed_tokens.weight) == tied
    gathers = []
    for p in engine.module.parameters():  # count the all-gathers that include the head's weight

        def counted(params, *a, _orig=p.all_gather_coalesced, **k):
            gathers.append(any(q is weight for q in params))
            return _orig(params, *a, **k)

        monkeypatch.setattr(p, "all_gather_coalesced", counted)

    counts = {}
    # The first step records DeepSpeed's module trace (it gathers more while it does); then the
    # legacy path, one chunk, and 64 chunks of 2 rows (4 x 32 scored tokens).
    for key, from_hidden, chunk_rows in [
        ("trace", True, 10**6),
        ("full", False, 4),
        (1, True, 10**6),
        (64, True, 2),
    ]:
        gathers.clear()
        lp, _, _ = _loss_and_grads(
            engine,
            ids,
            attn,
            start,
            0.7,
            from_hidden=from_hidden,
            chunk_rows=chunk_rows,
            backward=engine.backward,
        )
        counts[key] = sum(gathers)
        real = attn[:, start:].bool()
        torch.testing.assert_close(lp[real], lp_ref[real], rtol=0, atol=TOL)
        for name, ref in grads_ref.items():
            full = safe_get_full_grad(dict(engine.module.named_parameters())[name])
            err = float((full - ref).abs().max() / ref.abs().max())
            assert err <= TOL, (name, err)
        engine.step()  # lr 0: clears ZeRO-3's accumulated gradients, leaves the weights
    print("head-weight gathers per forward+backward:", counts)
    assert counts[64] == counts[1] == counts["full"] <= counts["trace"]
    engine.destroy()


@pytest.mark.parametrize("frozen_head", [False, True], ids=["trained-head", "frozen-head"])
def test_fsdp2_one_process_matches_the_plain_model(tiny_untied_model_dir, one_process_group, frozen_head):
    """FSDP2 (gloo, one process, fp32): layers and root fully_shard-ed, lm_head in the root's
    group. The head runs inside the root's forward, where FSDP has unsharded it; log-probs and
    gradients equal the plain model's legacy path. A frozen head is read there too."""
    from torch.distributed.fsdp import fully_shard

    ids, attn, start = _batch(49152, rows=3, width=24, start=6)
    lp_ref, grads_ref = _plain_reference(
        tiny_untied_model_dir, ids, attn, start, 0.7, frozen_head=frozen_head
    )
    model = _model(tiny_untied_model_dir)
    if frozen_head:
        model.lm_head.weight.requires_grad_(False)
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    lp, grads, _ = _loss_and_grads(model, ids, attn, start, 0.7, from_hidden=True)
    real = attn[:, start:].bool()
    torch.testing.assert_close(lp[real], lp_ref[real], rtol=0, atol=TOL)
    assert grads.keys() == grads_ref.keys()
    for name, ref in grads_ref.items():
        err = float((grads[name].full_tensor() - ref).abs().max() / ref.abs().max())
        assert err <= TOL, (name, err)


class _HeadMatmuls(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the matmuls that produce ``[..., vocab]`` logits (the head's projection)."""

    def __init__(self, vocab: int):
        super().__init__()
        self.vocab, self.calls = vocab, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.addmm) and out.shape[-1] == self.vocab:
            self.calls += 1
        return out


@pytest.mark.parametrize(
    "lora, per_chunk",
    # (forward, forward + backward) [..., vocab] matmuls per chunk; LoRA on the head adds its B's.
    [("attn", (1, 1)), (None, (1, 2)), ("head", (2, 4)), ("save", (1, 2))],
    ids=["frozen-head", "full", "lora-on-lm_head", "modules_to_save"],
)
def test_a_frozen_head_projects_once_a_trained_head_again_in_backward(tiny_model_dir, lora, per_chunk):
    """FrozenHeadScores: forward keeps each row's gradient direction, so backward runs no
    projection; a head with something to train recomputes its chunks' logits (checkpoint)."""
    from verifiers.training.loss.logprobs import sequence_logprobs

    model = _model(tiny_model_dir, lora)
    V = model.config.vocab_size
    ids, attn, start = _batch(V, rows=3, width=20, start=5)
    scored, rows = 3 * 15, 8
    chunks = -(-scored // rows)
    mode = _HeadMatmuls(V)
    with mode:
        lp, _ = sequence_logprobs(model, ids, attn, start, 0.7, True, chunk_rows=rows)
        forward = mode.calls
        (lp * attn[:, start:]).sum().backward()
    assert (forward, mode.calls) == (chunks * per_chunk[0], chunks * per_chunk[1])

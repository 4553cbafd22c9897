"""Side by side: our GRPOTrainer (vf-vllm) and TRL's GRPOTrainer (its CPU path) on one task.

    python benchmarks/vs_trl.py                    # 5 steps per trainer, plus a cpu_phases='overlap' row
    python benchmarks/vs_trl.py --steps 2 --prompts 2 --max-tokens 16 --no-overlap-row   # smoke test

Both train SmolLM2-135M-Instruct + LoRA (r=8, alpha=16 on q/k/v/o) on reverse-text,
8 prompts x 8 rollouts (64 completions of at most 64 new tokens) per optimizer step,
the same rows, reward functions and weights, learning rate, loss, seed and number of
steps, in the same dtype on the CPU (``--dtype auto``: what this CPU computes fastest,
verifiers/utils/compute_dtype.py -- bf16 under autocast with fp32 master weights where its
bf16 matmul is at least 1.5x fp32's, else fp32; the server serves in it too). Ours samples on a vf-vllm server (started here, stopped
before TRL runs; its KV cache sized to one step's rollouts) and syncs merged LoRA
weights after each step; by default (``cpu_phases="auto"``) generation and training
take turns, each on every core, and the extra row generates one batch ahead during
training instead (``cpu_phases="overlap"``); TRL samples with ``model.generate`` inside the training step (``use_vllm=False``).
Each trainer runs in its own subprocess, so its peak memory is its own. Every setting
the issue leaves open takes the same value in both where both have it, else each
tool's default; ``settings.differ`` in the JSON lists the differences.

Per step: wall time (optimizer step end to step end; step 1, which includes start-up,
is excluded from rates as warm-up), generation / train / sync seconds, completion
tokens per second, mean reward; per run: peak RSS of the trainer process, and the vf-vllm
process tree's peak memory, sampled, each page counted once (summed PSS; the RSS sum beside it). Training FLOP/s = useful training FLOPs per step /
train seconds, as a share of this machine's matmul FLOP/s in the dtype used, measured in
the same run (2048 x 2048, best of 10, torch's default thread count; both dtypes' peaks
are reported) -- see ``flops.formula``. ``--neighbour N`` runs everything beside N busy
processes (each spinning on one core, unpinned, at ``--neighbour-nice``), as on a user's
machine that is not quiet.

Targets: our step rate >= 3x TRL's (>= 2x with a neighbour); our training FLOP share >= 50%;
our peak memory (trainer + server) <= 1.5x TRL's. Prints a markdown table, writes ``vs_trl.json`` and
``vs_trl.png`` to ``--out`` and ends with
``speedup_vs_trl=S train_flops_share=F memory_vs_trl=M``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import (
    PeakTreeRSS,
    cpu_model,
    free_port,
    matmul_rates,
    neighbour,
    own_peak_rss_bytes,
    vllm_server,
)

import verifiers as vf

TARGET_SPEEDUP, TARGET_FLOPS_SHARE, TARGET_MEMORY = 3.0, 0.5, 1.5
TARGET_SPEEDUP_BESIDE_NEIGHBOUR = 2.0
GIB = float(1 << 30)


# ---------------------------------------------------------------------------------------------
# Worker side: one trainer, in its own process.
# ---------------------------------------------------------------------------------------------


def shared_settings(args: argparse.Namespace) -> dict[str, Any]:
    """Settings both trainers take under the same name and meaning, with the same value."""
    return dict(
        per_device_train_batch_size=8,
        gradient_accumulation_steps=args.prompts,  # x 8 = one optimizer step = prompts x 8 rollouts
        num_generations=8,
        temperature=1.0,
        top_p=1.0,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_steps=args.steps,
        max_grad_norm=1.0,
        beta=0.0,
        num_iterations=1,
        epsilon=0.2,
        loss_type="dr_grpo",  # ours' default; TRL's is 'dapo'
        # ours' default; TRL's is False. --min-tokens ends every completion at the limit: keep them in the loss.
        mask_truncated_completions=not args.min_tokens,
        gradient_checkpointing=False,  # TRL's default is True, ours' grpo_defaults too; off is faster for both
        bf16=args.dtype == "bfloat16",  # the same in both: CPU autocast, fp32 master weights
        use_cpu=True,
        seed=args.seed,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
    )


def _clock_callback(counter):
    """A callback recording the wall clock at train start and at each optimizer step's end."""
    from transformers import TrainerCallback

    class Clock(TrainerCallback):
        def __init__(self):
            self.marks: list[float] = []
            self.tokens: list[dict[str, int]] = []

        def on_train_begin(self, args, state, control, **kwargs):
            self.marks = [time.perf_counter()]

        def on_step_end(self, args, state, control, **kwargs):
            self.marks.append(time.perf_counter())
            self.tokens.append(counter())

    return Clock()


def _base_matmul_params(model) -> tuple[int, int]:
    """(parameters of the transformer body's matmuls, vocab x hidden of the LM head) of the base model."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    emb = base.get_input_embeddings().weight
    body = sum(
        p.numel()
        for n, p in base.named_parameters()
        if "lora_" not in n and p.dim() == 2 and p is not emb and "lm_head" not in n
    )
    return body, emb.numel()


def _thread_governor(trainer, threads: int):
    """Experiment (``--threads-while-generating``), not the trainer's behaviour: before each
    micro-step, use ``threads`` torch threads while a batch is being generated on the server
    (which shares the CPU), all of them otherwise."""
    import torch
    from transformers import TrainerCallback

    full = torch.get_num_threads()

    class Governor(TrainerCallback):
        def _apply(self) -> None:
            gen = trainer.generator
            busy = gen is not None and getattr(gen, "_in_flight", None) is not None
            torch.set_num_threads(threads if busy else full)

        def on_step_begin(self, args, state, control, **kwargs):
            self._apply()

        def on_substep_end(self, args, state, control, **kwargs):
            self._apply()

    return Governor()


def run_ours(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from verifiers.training.loss.logprobs import can_pack

    if args.min_tokens:  # vLLM's min_tokens (sent in extra_body): no EOS before min_tokens tokens
        import verifiers.training.generation.generator as generator

        plain = generator.sampling_args_from_config
        generator.sampling_args_from_config = lambda a: {**plain(a), "min_tokens": args.min_tokens}
    env = vf.load_environment("reverse-text", seed=args.seed)
    model, tokenizer = vf.get_model_and_tokenizer(args.model)
    config = vf.grpo_defaults(
        run_name="vs-trl-ours",
        output_dir=str(out / f"ours-{args.cpu_phases}"),
        max_tokens=args.max_tokens,
        max_seq_len=512,
        max_prompt_length=256,
        scale_rewards=False,  # TRL: scale_rewards="none"
        num_batches_ahead=args.batches_ahead,
        cpu_phases=args.cpu_phases,
        log_completions=False,
        vllm_server_host="127.0.0.1",
        vllm_server_port=args.port,
        **shared_settings(args),
    )
    trainer = vf.GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        env=env,
        args=config,
        peft_config=vf.lora_defaults(r=8, alpha=16),
    )

    def count() -> dict[str, int]:
        # Token positions the model ran for the micro-batches the step just trained (trimmed,
        # right-padded); a packed micro-batch (logprobs.can_pack) runs its prompt once, unpadded.
        buf = getattr(trainer, "_prepared", None)  # the PreparedBatch in training
        real = padded = 0
        for m in buf.micro if buf is not None else []:
            ids, attn, start = m["input_ids_BT"], m["attention_mask_BT"], m["start"]
            if can_pack(trainer.model, ids, attn, start):
                ran = start + int(attn[:, start:].sum())  # the prompt once, no padding
                real, padded = real + ran, padded + ran
            else:
                real, padded = real + int(attn.sum()), padded + attn.numel()
        return {"real": real, "padded": padded}

    clock = _clock_callback(count)
    trainer.add_callback(clock)  # after the trainer's own step-end hook, so a step includes its sync
    if args.threads_while_generating:
        trainer.add_callback(_thread_governor(trainer, args.threads_while_generating))
    trainer.train()
    logs = [h for h in trainer.state.log_history if "reward" in h and "step" in h]
    body, head = _base_matmul_params(trainer.model)
    return {
        "marks": clock.marks,
        "tokens": clock.tokens,
        "reward": [h["reward"] for h in logs],
        "completion_len": [h.get("completion_length/mean", float("nan")) for h in logs],
        "generation_s": [h.get("time/generation_s", 0.0) for h in logs],
        "wait_generation_s": [h.get("time/wait_generation_s", 0.0) for h in logs],
        "train_s": [h.get("time/train_s", 0.0) for h in logs],
        "sync_s": [h.get("time/sync_s", 0.0) for h in logs],
        "params": {"body": body, "head": head},
    }


def _trl_reward_funcs(env) -> list:
    """The env's rubric functions as TRL reward functions (same functions, same arguments, per rollout)."""
    rubric = env.rubric
    funcs = []
    for spec in rubric._specs:

        def reward(prompts, completions, answer, _spec=spec, **_) -> list[float]:
            scores = []
            for p, c, a in zip(prompts, completions, answer, strict=True):
                kw = rubric._reward_func_args(p, c, a, state={}, task="default", info={})
                kw = kw if _spec.wants is None else {k: kw[k] for k in _spec.wants}
                scores.append(float(_spec.func(**kw)))
            return scores

        reward.__name__ = spec.name
        funcs.append(reward)
    return funcs


def run_trl(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from trl import GRPOConfig, GRPOTrainer

    env = vf.load_environment("reverse-text", seed=args.seed)
    # The env's own rows: prompt = [system, user] messages, answer = the reversal.
    dataset = env.get_dataset().select_columns(["prompt", "answer"])
    model, tokenizer = vf.get_model_and_tokenizer(args.model)
    config = GRPOConfig(
        output_dir=str(out / "trl"),
        run_name="vs-trl-trl",
        max_completion_length=args.max_tokens,
        scale_rewards="none",
        reward_weights=list(env.rubric.get_reward_weights()),
        use_vllm=False,
        log_completions=False,
        generation_kwargs={"min_new_tokens": args.min_tokens} if args.min_tokens else None,
        **shared_settings(args),
    )
    times = {"generation_s": [], "generate_s": []}

    class Timed(GRPOTrainer):
        """TRL's trainer, unchanged, with its generation phase timed."""

        def _generate_and_score_completions(self, inputs):
            t0 = time.perf_counter()
            batch = super()._generate_and_score_completions(inputs)
            times["generation_s"].append(time.perf_counter() - t0)
            pm, cm = batch["prompt_mask"], batch["completion_ids"]
            # Width of what each micro-batch feeds the model: the generation batch's widest prompt
            # and completion. Real tokens: prompt mask + completion tokens up to EOS.
            self._bench_tokens = {
                "prompt_real": int(pm.sum()),
                "padded": int(pm.shape[0] * (pm.shape[1] + cm.shape[1])),
            }
            return batch

        def _generate_single_turn(self, *a, **kw):
            t0 = time.perf_counter()
            try:
                return super()._generate_single_turn(*a, **kw)
            finally:
                times["generate_s"].append(time.perf_counter() - t0)

    trainer = Timed(
        model=model,
        reward_funcs=_trl_reward_funcs(env),
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=vf.lora_defaults(r=8, alpha=16),
    )
    clock = _clock_callback(lambda: dict(getattr(trainer, "_bench_tokens", {})))
    trainer.add_callback(clock)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "reward" in h and "step" in h]
    lengths = [h.get("completions/mean_length", float("nan")) for h in logs]
    n = config.per_device_train_batch_size * config.gradient_accumulation_steps
    # TRL's real token count = prompt tokens + completion tokens (mean length x rollouts).
    for tok, length in zip(clock.tokens, lengths, strict=False):
        tok["real"] = tok.pop("prompt_real", 0) + round(length * n)
    body, head = _base_matmul_params(trainer.model)
    return {
        "marks": clock.marks,
        "tokens": clock.tokens,
        "reward": [h["reward"] for h in logs],
        "completion_len": lengths,
        "generation_s": times["generation_s"],
        "generate_s": times["generate_s"],
        "params": {"body": body, "head": head},
    }


def worker(args: argparse.Namespace) -> None:
    import torch

    out = Path(args.out)
    t0 = time.perf_counter()
    result = run_ours(args, out) if args.worker == "ours" else run_trl(args, out)
    result.update(
        seconds=time.perf_counter() - t0,
        peak_rss_bytes=own_peak_rss_bytes(),
        torch_threads=torch.get_num_threads(),
    )
    Path(args.result).write_text(json.dumps(result))


# ---------------------------------------------------------------------------------------------
# Parent side: start workers, summarize, report.
# ---------------------------------------------------------------------------------------------


WORKER_FLAGS = (
    "model",
    "steps",
    "prompts",
    "max_tokens",
    "min_tokens",
    "lr",
    "seed",
    "port",
    "out",
    "threads_while_generating",
    "dtype",
)


def spawn(tool: str, args: argparse.Namespace, out: Path, phases: str = "auto") -> dict[str, Any]:
    """Run one trainer in its own process; ours with ``cpu_phases=phases`` (``auto``: the default)."""
    name = tool if tool == "trl" else f"ours-{'default' if phases == 'auto' else phases}"
    if tool == "ours" and args.threads_while_generating:
        name += f"-gen{args.threads_while_generating}thr"
    result, log = out / f"{name}.result.json", out / f"{name}.log"
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        tool,
        "--result",
        str(result),
        "--cpu-phases",
        phases,
    ]
    for flag in WORKER_FLAGS:
        cmd += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    print(f"running {name} ({args.steps} steps; log: {log})", flush=True)
    with open(log, "wb") as fh:
        from verifiers.utils.cpu_load import ours_env

        # The server this benchmark started is ours, not a neighbour's load (utils/cpu_load.py).
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **ours_env()})
        try:
            rc = proc.wait()
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(30)
    if rc != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise SystemExit(f"{name} failed with code {rc}; log tail:\n{tail}")
    return {"name": name, **json.loads(result.read_text())}


def kv_cache_tokens(args: argparse.Namespace) -> int:
    """KV cache for one step's rollouts: each sample's own blocks (its completion, the partial block
    its prompt ends in; 64 tokens of slack) -- the prompt's full blocks are shared by the group
    through the prefix cache. A short cache only makes vLLM preempt and recompute, never fail."""
    return 8 * args.prompts * (args.max_tokens + 64)


def server_peak_bytes(r: dict[str, Any]) -> int:
    """The server tree's peak, each page counted once (PSS summed; _common.tree_pss_bytes): its
    processes (API server, engine core) each load torch, and their RSS sum counted those library
    pages once per process. The RSS sum when PSS could not be read."""
    return r.get("server_peak_pss_bytes") or r.get("server_peak_rss_bytes", 0)


def total_peak_bytes(r: dict[str, Any]) -> int:
    """Peak memory of one of ours' runs: the trainer's peak RSS plus the server tree's (above)."""
    return r["peak_rss_bytes"] + server_peak_bytes(r)


def summarize(r: dict[str, Any], machine_flops: float) -> dict[str, Any]:
    """Rates over steps 2..n (step 1 is warm-up), phase shares, training FLOP/s."""
    marks = r["marks"]
    step_s = [b - a for a, b in zip(marks, marks[1:], strict=False)]
    n_rollouts = r["rollouts_per_step"]
    comp = [length * n_rollouts for length in r["completion_len"]]
    timed = list(range(1, len(step_s))) or [0]  # steps after warm-up (all, with a single step)
    wall = sum(step_s[i] for i in timed)
    gen = r["generation_s"]
    train = r.get("train_s") or [s - g for s, g in zip(step_s, gen, strict=False)]
    sync = r.get("sync_s") or [0.0] * len(step_s)
    wait = r.get("wait_generation_s") or gen
    body, head = r["params"]["body"], r["params"]["head"]
    # Useful training FLOPs per step: forward 2*N per token through the body and 2*V*d per scored
    # (completion) token through the LM head; backward the same again for the gradients w.r.t.
    # activations (the frozen base weights need no weight gradients; LoRA's are ~0.1% of it).
    flops = [4 * body * t["real"] + 4 * head * c for t, c in zip(r["tokens"], comp, strict=False)]
    train_flops_s = sum(flops[i] for i in timed) / max(sum(train[i] for i in timed), 1e-9)

    def share(xs: list[float]) -> float:
        return sum(xs[i] for i in timed) / wall

    return {
        "step_s": step_s,
        "steps_per_s": len(timed) / wall,
        "s_per_step": wall / len(timed),
        "completion_tokens_per_s": sum(comp[i] for i in timed) / wall,
        "share": {
            "generation": share(gen),
            "wait_generation": share(wait),
            "train": share(train),
            "sync": share(sync),
        },
        "train_flops_per_step": flops,
        "train_flops_per_s": train_flops_s,
        "train_flops_share": train_flops_s / machine_flops,
        "padding_efficiency": sum(t["real"] for t in r["tokens"])
        / max(sum(t["padded"] for t in r["tokens"]), 1),
        "reward_last": r["reward"][-1] if r["reward"] else float("nan"),
        "reward_mean": sum(r["reward"]) / max(len(r["reward"]), 1),
    }


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| run | s/step | steps/s | tokens/s | gen share (exposed) | train share | sync share | "
        "peak RSS trainer | peak server: PSS (RSS sum) | peak total | reward step 1 → last | train GFLOP/s (share) |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        s = r["summary"]
        sh = s["share"]
        server = (
            f"{server_peak_bytes(r) / GIB:.2f} GiB ({r['server_peak_rss_bytes'] / GIB:.2f})"
            if r.get("server_peak_rss_bytes")
            else "-"
        )
        lines.append(
            f"| {r['name']} | {s['s_per_step']:.1f} | {s['steps_per_s']:.4f} | {s['completion_tokens_per_s']:.1f} | "
            f"{sh['generation']:.0%} ({sh['wait_generation']:.0%}) | {sh['train']:.0%} | {sh['sync']:.0%} | "
            f"{r['peak_rss_bytes'] / GIB:.2f} GiB | {server} | {total_peak_bytes(r) / GIB:.2f} GiB | {r['reward'][0]:.3f} → {s['reward_last']:.3f} | "
            f"{s['train_flops_per_s'] / 1e9:.1f} ({s['train_flops_share']:.0%}) |"
        )
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4))
    names = [r["name"] for r in rows]
    parts = {"generation (exposed)": [], "train": [], "sync": [], "other": []}
    for r in rows:
        s = r["summary"]
        sh = s["share"]
        per = s["s_per_step"]
        parts["generation (exposed)"].append(sh["wait_generation"] * per)
        parts["train"].append(sh["train"] * per)
        parts["sync"].append(sh["sync"] * per)
        parts["other"].append(max(per * (1 - sh["wait_generation"] - sh["train"] - sh["sync"]), 0.0))
    bottom = [0.0] * len(rows)
    for label, values in parts.items():
        ax1.bar(names, values, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax1.set(title="seconds per step (after warm-up)", ylabel="s")
    ax1.legend(fontsize=8)
    ax2.bar(names, [r["summary"]["completion_tokens_per_s"] for r in rows], color="tab:green")
    ax2.set(title="completion tokens / s", ylabel="tokens/s")
    for r in rows:
        ax3.plot(range(1, len(r["reward"]) + 1), r["reward"], marker="o", label=r["name"])
    ax3.set(title="mean reward per step", xlabel="step", ylabel="reward")
    ax3.legend(fontsize=8)
    for ax in (ax1, ax2):
        ax.tick_params(axis="x", labelsize=8)
    ax3.xaxis.get_major_locator().set_params(integer=True)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def differing_settings(args: argparse.Namespace) -> dict[str, str]:
    """Settings that are not the same in both runs, and why."""
    return {
        "generation": "ours: vf-vllm server (vLLM CPU backend in its own processes, its worker threads on "
        f"every core; extra flags {args.server_args!r}), cpu_phases='auto' (generation and training take "
        "turns; the extra row: 'overlap', one batch ahead); TRL: "
        "model.generate in the trainer process, inside the training step (use_vllm=False, TRL's CPU path), "
        "the whole generation batch at once",
        "weight sync": "ours: merged LoRA weights pushed to the server after every step (lora_sync='auto' on a "
        "CPU server); TRL: none needed (one model generates and trains)",
        "importance sampling": "ours: truncated importance sampling against the server's sampling log-probs "
        "(default cap/mask band); TRL: none without vLLM (sampling and training model are the same)",
        "scale_rewards": "same meaning, different spelling: ours False, TRL 'none'",
        "training layout": "ours: a micro-batch is one group (8 completions of one prompt), run as one packed "
        "sequence, the prompt once and no padding (verifiers.training.loss.logprobs.packed_logprobs); TRL: each "
        "row separately, prompts left-padded and completions right-padded to the generation batch's longest",
        "log-probs": "ours: logits from the first completion token on, chunked log-softmax; TRL: its fused "
        "LM head over completion tokens only",
        "max prompt / sequence length": "ours: max_prompt_length=256, max_seq_len=512 (no prompt is near them); "
        "TRL: no prompt limit",
        "data order": "each trainer's own seeded sampler (seed equal, orders differ), so the prompts of step k "
        "differ; rewards are comparable in distribution only",
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2")
    p.add_argument("--steps", type=int, default=5, help="optimizer steps per trainer (step 1 is warm-up)")
    p.add_argument("--prompts", type=int, default=8, help="prompts per step (x 8 rollouts)")
    p.add_argument("--max-tokens", type=int, default=64, help="most new tokens per completion")
    p.add_argument("--min-tokens", type=int, default=0,
                   help="fewest new tokens per completion, EOS suppressed until then (0: off; benchmarks/scaling.py)")  # fmt: skip
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--port", type=int, default=0, help="vf-vllm port (0: a free one)")
    p.add_argument(
        "--server-args",
        default="--block-size 32",
        help="extra vf-vllm flags (default: 32-token KV blocks, so the shared system prompt hits vLLM's "
        "prefix cache; vLLM-CPU's default of 128 is longer than these prompts, and 16 fails on CPU)",
    )
    p.add_argument("--server-cpus", default="", help="pin the vf-vllm process tree to these cores, e.g. '0'")
    p.add_argument("--threads-while-generating", type=int, default=0,
                   help="experiment: torch threads for ours' training while the server generates (0: off)")  # fmt: skip
    p.add_argument("--overlap-row", action=argparse.BooleanOptionalAction, default=True,
                   help="also run ours with cpu_phases='overlap' (generation one batch ahead, during training)")  # fmt: skip
    p.add_argument("--skip-trl", action="store_true", help="ours only (profiling); no speedup is computed")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                   help="both trainers' and the server's dtype (auto: what this CPU computes fastest)")  # fmt: skip
    p.add_argument("--neighbour", type=int, default=0,
                   help="busy processes beside the run, each spinning on one core (0: a quiet machine)")  # fmt: skip
    p.add_argument("--neighbour-nice", type=int, default=0, help="their nice value (19: lowest priority)")
    p.add_argument("--out", default="outputs/benchmarks/vs_trl")
    # Internal: run one trainer and write its result.
    p.add_argument("--worker", choices=["ours", "trl"], help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    p.add_argument("--batches-ahead", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--cpu-phases", default="auto", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        vf.setup_logging("INFO")
        worker(args)
        return
    # SIGTERM (timeout, CI) exits through the finally blocks, so the server and workers are stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.port = args.port or free_port()
    import torch

    from verifiers.models import resolve_model_name
    from verifiers.utils.compute_dtype import cpu_compute_dtype

    peaks_before = matmul_rates()
    if args.dtype == "auto":
        choice = cpu_compute_dtype()
        args.dtype = choice.dtype
        print(choice.line(), flush=True)
    rows = []
    server_args = shlex.split(args.server_args)
    model_dir = resolve_model_name(args.model)
    kv_tokens = kv_cache_tokens(args)
    with neighbour(args.neighbour, args.neighbour_nice):
        with vllm_server(
            model_dir, args.port, out / "vf-vllm.log", server_args, args.server_cpus, kv_tokens=kv_tokens,
            dtype=args.dtype,
        ) as server:  # fmt: skip
            for phases in ["auto", "overlap"] if args.overlap_row else ["auto"]:
                with PeakTreeRSS(server.pid) as peak:
                    rows.append(spawn("ours", args, out, phases))
                rows[-1]["server_peak_rss_bytes"] = peak.peak
                rows[-1]["server_peak_pss_bytes"] = peak.peak_pss
        if not args.skip_trl:  # after the server is stopped: TRL gets the whole machine
            rows.append(spawn("trl", args, out))
    peaks_after = matmul_rates()
    peaks = {k: max(peaks_before[k], peaks_after[k]) for k in peaks_before}
    machine_flops = peaks[args.dtype]
    for r in rows:
        r["rollouts_per_step"] = 8 * args.prompts
        r["summary"] = summarize(r, machine_flops)
    ours = rows[0]
    trl = rows[-1] if not args.skip_trl else None
    speedup = ours["summary"]["steps_per_s"] / trl["summary"]["steps_per_s"] if trl else float("nan")
    flops_share = ours["summary"]["train_flops_share"]
    memory = total_peak_bytes(ours) / trl["peak_rss_bytes"] if trl else float("nan")
    target_speedup = TARGET_SPEEDUP_BESIDE_NEIGHBOUR if args.neighbour else TARGET_SPEEDUP
    print(table(rows))
    print(
        f"{cpu_model()}, {os.cpu_count()} cores; matmul peaks: fp32 {peaks['float32'] / 1e9:,.0f} GFLOP/s, "
        f"bf16 {peaks['bfloat16'] / 1e9:,.0f} GFLOP/s; dtype used: {args.dtype}; "
        f"neighbour: {args.neighbour} process(es) at nice {args.neighbour_nice}",
        flush=True,
    )
    summary = {
        "task": "reverse-text",
        "model": args.model,
        "settings": {
            "args": vars(args),
            "shared": shared_settings(args),
            "differ": differing_settings(args),
            "lora": {
                "r": 8,
                "alpha": 16,
                "dropout": 0.0,
                "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
            },
            "warm_up": "step 1 (start-up, first sync, first generation) is excluded from every rate and share",
        },
        "machine": {
            "cpu": cpu_model(),
            "cores": os.cpu_count(),
            "dtype": args.dtype,
            "fp32_matmul_flops": peaks["float32"],
            "bf16_matmul_flops": peaks["bfloat16"],
            "matmul_flops_of_dtype_used": machine_flops,
            "matmul_flops_before_after": {k: [peaks_before[k], peaks_after[k]] for k in peaks},
            "torch_threads": torch.get_num_threads(),
            "neighbour": {"processes": args.neighbour, "nice": args.neighbour_nice},
            "matmul": "2048 x 2048 torch.matmul in each dtype, best of 10, at the start and at the end (beside "
            "no neighbour); the higher is used",
        },
        "flops": {
            "formula": "per step: 4 * N_body * T_real + 4 * V*d * T_completion (forward 2x, backward w.r.t. "
            "activations 2x; frozen base weights need no weight gradient; LoRA weight gradients and attention "
            "scores left out, a few % at these lengths); train FLOP/s = sum over steps 2..n / train seconds",
            "N_body": ours["params"]["body"],
            "V_times_d": ours["params"]["head"],
            "T_real": "real (unpadded) token positions the model ran for the step: prompt + completion per "
            "row; for ours a prompt shared by a micro-batch's rows (one GRPO group) counts once, since it runs "
            "once (verifiers.training.loss.logprobs.can_pack)",
        },
        "phases": {
            "ours": "generation_s: one batch's env.a_generate on the server (in the background, overlapping "
            "training, only in the 'overlap' row); wait_generation: the part training waited for; train_s: "
            "preparing the batch + forward/backward + optimizer; sync_s: merged weights to the server",
            "trl": "generation_s: TRL's _generate_and_score_completions (generate + rewards + advantages), "
            "generate_s: its model.generate alone; train = step - generation; no sync",
        },
        "target": {
            "speedup_vs_trl": target_speedup,
            "train_flops_share": TARGET_FLOPS_SHARE,
            "memory_vs_trl": TARGET_MEMORY,
        },
        "speedup_vs_trl": speedup,
        "train_flops_share": flops_share,
        "memory_vs_trl": memory,
        "memory": {
            "ours_trainer_bytes": ours["peak_rss_bytes"],
            "ours_server_bytes": server_peak_bytes(ours),
            "ours_server_rss_sum_bytes": ours.get("server_peak_rss_bytes", 0),
            "memory_vs_trl_rss_sum": (ours["peak_rss_bytes"] + ours.get("server_peak_rss_bytes", 0))
            / trl["peak_rss_bytes"]
            if trl
            else None,
            "trl_bytes": trl["peak_rss_bytes"] if trl else None,
            "how": "the trainer's peak RSS (VmHWM); the vf-vllm process tree's peak sampled every 0.25 s as "
            "its summed PSS (each page once; the RSS sum, which counts torch's libraries once per process, "
            "beside it); TRL's peak RSS (VmHWM). memory_vs_trl = (ours trainer + ours server PSS) / TRL",
            "kv_cache_tokens": kv_tokens,
        },
        "met": {
            "speedup": speedup >= target_speedup,
            "train_flops_share": flops_share >= TARGET_FLOPS_SHARE,
            "memory": memory <= TARGET_MEMORY,
        },
        "runs": rows,
    }
    (out / "vs_trl.json").write_text(json.dumps(summary, indent=2))
    dtype = "bf16 autocast" if args.dtype == "bfloat16" else "fp32"
    beside = f", beside {args.neighbour} busy process(es)" if args.neighbour else ""
    title = (
        f"reverse-text, {args.model} + LoRA r8, {args.prompts} prompts x 8 rollouts x <= {args.max_tokens} tokens, "
        f"CPU {dtype}{beside}"
    )
    plot(rows, out / "vs_trl.png", title)
    print(f"wrote {out / 'vs_trl.json'} and {out / 'vs_trl.png'}", flush=True)
    print(
        f"speedup_vs_trl={speedup:.3f} train_flops_share={flops_share:.3f} memory_vs_trl={memory:.3f}",
        flush=True,
    )


if __name__ == "__main__":
    main()

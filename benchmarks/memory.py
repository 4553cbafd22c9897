"""Peak memory of one GRPO training step, ours against TRL's GRPOTrainer, as completions grow.

    python benchmarks/memory.py                    # 1k, 2k, 4k, 8k completion tokens (CPU: ~15-25 min)
    python benchmarks/memory.py --quick            # 256 and 512 tokens: a smoke run (~1-2 min)
    python benchmarks/memory.py --device cuda      # on a GPU: torch.cuda.max_memory_allocated
    python benchmarks/memory.py --dry-run          # the plan and settings only; nothing runs

What is measured: one training step -- forward, backward and optimizer step of the policy
loss -- on a batch prepared as generation would have left it (no generation), for
each completion length, on both sides:

- ours: ``verifiers.GRPOTrainer.compute_loss`` (``sequence_logprobs`` then ``compute_loss``
  in verifiers/training/loss/), on a micro-batch shaped as ``batch/prepared.py`` makes it
  (``scoring_inputs``), then ``backward`` and an AdamW step;
- TRL: ``trl.GRPOTrainer.compute_loss`` on the inputs its ``_generate_and_score_completions``
  returns (prompt / completion ids and masks, advantages), then the same. TRL's defaults:
  its fused LM head (``add_fused_lm_head``: log-probs and entropy from the hidden states,
  tiles of 4096 tokens x 32768 vocabulary columns, recomputed in backward; the torch fallback
  off CUDA), ``cast_lm_head_to_fp32=False``.

Both: the same model, weights, token ids, advantages; one prompt of ``--prompt-tokens``
tokens and ``--completions`` completions of ``length`` tokens each (one GRPO group, one
micro-batch); full fine-tuning (every weight trained: the logits' cost shows most clearly);
fp32; on-policy (``num_iterations=1``: neither side computes old log-probs, the loss uses the
current ones detached); entropy computed (both trainers do); no KL term (``beta=0``);
``loss_type='dr_grpo'``; gradient checkpointing on (both trainers' default; enabled here as
``Trainer.train`` would). Ours gets no sampling log-probs (NaN: no importance-sampling
correction), as TRL without vLLM has none.

Model: Qwen3-shaped with random weights from a config -- Qwen3's vocabulary (151,936) and
tied head (as Qwen3-0.6B), but ``--layers`` layers of width ``--hidden`` so a step runs on
two CPU cores.

Memory: each (side, length) runs in its own fresh process. A warm-up step first, on 16-token
completions (AdamW's state and one-time buffers then exist, as in every step of a run but
the first), then the measured step. CPU: glibc's mmap threshold is pinned to
64 KiB (``MALLOC_MMAP_THRESHOLD_``), so every tensor above that is its own mapping, returned
to the kernel when freed -- resident memory then follows live tensor memory instead of
glibc's retained heap; before the step, ``gc.collect`` and ``malloc_trim``, the resident
set is read (baseline: model, optimizer state, batch) and the kernel's peak-RSS mark is
reset (``/proc/self/clear_refs`` = 5); after it, peak = ``VmHWM`` - baseline. The kernel's
mark is exact; a thread also samples ``VmRSS`` every 5 ms (the fallback where the mark
cannot be reset, and the guard that stops a worker at ``--max-rss-gb``: a lower bound is
then reported). CUDA: ``max_memory_allocated`` after ``reset_peak_memory_stats``, minus
``memory_allocated`` before the step.

Goal: ours at or below TRL at every length, growing linearly. Prints a markdown table,
writes ``memory.json`` and ``memory.png`` to ``--out``, and ends with
``peak_vs_trl_at_max=R slope_ours=A slope_trl=B`` (R: ours / TRL at the longest length;
slopes: MiB per 1024 completion tokens, least squares over the lengths measured).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import hashlib
import json
import os
import platform
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

DEFAULT_LENGTHS = (1024, 2048, 4096, 8192)
QUICK_LENGTHS = (256, 512)
SIDES = ("ours", "trl")
MIB = float(1 << 20)
TOKENS_PER_K = 1024  # slopes are per 1024 completion tokens, the unit the lengths come in
QWEN3_VOCAB = 151_936
# "Grows linearly": every measured peak within this share of the fitted line. Not R^2: a nearly
# flat side (a few MiB per 1k tokens) has an R^2 set by noise, yet is the best case.
LINEAR_TOLERANCE = 0.05
SAMPLE_EVERY_S = 0.005
WARMUP_TOKENS = 16  # completion tokens of the warm-up step's batch
OVER_CAP_RC = 3  # a worker's exit code when the RSS guard stopped it
# Every allocation above this many bytes gets its own mapping, given back to the kernel when freed.
MMAP_THRESHOLD = 64 * 1024


# ---------------------------------------------------------------------------------------------
# Pure parts: lengths, fit, table, closing line (tested without torch).
# ---------------------------------------------------------------------------------------------


def parse_lengths(text: str) -> list[int]:
    """``"1024,2048"`` -> ``[1024, 2048]``; sorted, no duplicates; refuses non-positive or junk."""
    try:
        values = [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--lengths takes comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"--lengths needs positive token counts, got {text!r}")
    return sorted(set(values))


def linear_fit(xs: list[float], ys: list[float]) -> dict[str, float]:
    """Least-squares line ``y = slope * x + intercept`` and its R^2 (1.0 when the ys do not vary)."""
    n = len(xs)
    if n < 2:
        nan = float("nan")
        return {"slope": nan, "intercept": ys[0] if ys else nan, "r2": nan, "max_rel_residual": nan, "n": n}
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return {
            "slope": float("nan"),
            "intercept": my,
            "r2": float("nan"),
            "max_rel_residual": float("nan"),
            "n": n,
        }
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    intercept = my - slope * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - (slope * x + intercept)) ** 2 for x, y in zip(xs, ys, strict=True))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    # The worst point's distance from the line, as a share of the line there.
    rel = max(
        abs(y - (slope * x + intercept)) / max(abs(slope * x + intercept), 1e-12)
        for x, y in zip(xs, ys, strict=True)
    )
    return {"slope": slope, "intercept": intercept, "r2": r2, "max_rel_residual": rel, "n": n}


def measured(r: dict[str, Any] | None) -> bool:
    """Whether a worker's result is a full measurement (not stopped at the cap, not failed)."""
    return bool(r) and r.get("status") == "ok"


def side_fit(rows: list[dict[str, Any]], side: str) -> dict[str, float]:
    """Peak MiB against completion tokens / 1024 over the lengths ``side`` was measured at."""
    pts = [
        (row["length"] / TOKENS_PER_K, row[side]["peak_bytes"] / MIB)
        for row in rows
        if measured(row.get(side))
    ]
    return linear_fit([x for x, _ in pts], [y for _, y in pts])


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Fits, the ratio at the longest length, and whether the goal is met.

    A side stopped at the RSS cap at the longest length gives a bound, not a ratio:
    ``ratio_bound`` says which way (ours stopped: R is at least the value; TRL stopped: at most).
    """
    fits = {side: side_fit(rows, side) for side in SIDES}
    last = rows[-1] if rows else {}
    ours, trl = last.get("ours"), last.get("trl")
    ratio, bound = float("nan"), None
    if ours and trl and ours.get("peak_bytes") and trl.get("peak_bytes"):
        ratio = ours["peak_bytes"] / trl["peak_bytes"]
        if ours.get("status") == "over_cap" and trl.get("status") == "ok":
            bound = "lower"
        elif trl.get("status") == "over_cap" and ours.get("status") == "ok":
            bound = "upper"
        elif not (measured(ours) and measured(trl)):
            ratio = float("nan")
    ratios = []
    for row in rows:
        o, t = row.get("ours"), row.get("trl")
        ratios.append(o["peak_bytes"] / t["peak_bytes"] if measured(o) and measured(t) else None)
    complete = bool(rows) and all(r is not None for r in ratios)
    at_or_below = complete and all(r <= 1.0 for r in ratios)
    linear = fits["ours"]["n"] >= 3 and fits["ours"]["max_rel_residual"] <= LINEAR_TOLERANCE
    return {
        "fits": fits,
        "ratios": ratios,
        "peak_vs_trl_at_max": ratio,
        "ratio_bound": bound,
        "met": {"ours_at_or_below_trl": at_or_below, "ours_linear": linear, "all_measured": complete},
    }


def _cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return "-"
    status = r.get("status")
    if status == "ok":
        return f"{r['peak_bytes'] / MIB:,.0f} MiB"
    if status == "over_cap":
        return f"> {r['peak_bytes'] / MIB:,.0f} MiB (stopped at the cap)"
    if status == "skipped":
        return "skipped (over the cap at a shorter length)"
    return f"failed ({r.get('error', 'no result')})"


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: one row per completion length."""
    head = "| completion tokens | ours peak | TRL peak | ours / TRL | ours log-prob path | ours step s | TRL step s |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows:
        o, t = row.get("ours"), row.get("trl")
        if measured(o) and measured(t):
            ratio = f"{o['peak_bytes'] / t['peak_bytes']:.2f}"
        elif o and t and o.get("status") == "over_cap" and measured(t):
            ratio = f"> {o['peak_bytes'] / t['peak_bytes']:.2f}"
        else:
            ratio = "-"
        path = (o or {}).get("path", "-")
        secs = [f"{r['step_s']:.1f}" if measured(r) else "-" for r in (o, t)]
        lines.append(
            f"| {row['length']:,} | {_cell(o)} | {_cell(t)} | {ratio} | {path} | {secs[0]} | {secs[1]} |"
        )
    return "\n".join(lines)


def closing_line(summary: dict[str, Any]) -> str:
    """``peak_vs_trl_at_max=R slope_ours=A slope_trl=B`` (slopes in MiB per 1024 completion tokens);
    ``ratio_bound=lower|upper`` is appended when a side was stopped at the cap at the longest length."""
    f = summary["fits"]
    line = (
        f"peak_vs_trl_at_max={summary['peak_vs_trl_at_max']:.3f} "
        f"slope_ours={f['ours']['slope']:.1f} slope_trl={f['trl']['slope']:.1f}"
    )
    if summary.get("ratio_bound"):
        line += f" ratio_bound={summary['ratio_bound']}"
    return line


def goal_line(summary: dict[str, Any]) -> str:
    met = summary["met"]
    worst = summary["fits"]["ours"]["max_rel_residual"]
    return (
        f"goal: ours <= TRL at every length: {'met' if met['ours_at_or_below_trl'] else 'NOT met'}"
        f"{'' if met['all_measured'] else ' (not every length measured on both sides)'}; "
        f"ours linear in length (every peak within {LINEAR_TOLERANCE:.0%} of the fitted line, >= 3 lengths): "
        f"{'met' if met['ours_linear'] else 'NOT met'} (worst {worst:.1%})"
    )


def plot(rows: list[dict[str, Any]], summary: dict[str, Any], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for side, color, label in (("ours", "tab:blue", "ours (verifiers)"), ("trl", "tab:orange", "TRL")):
        pts = [(row["length"], row[side]["peak_bytes"] / MIB) for row in rows if measured(row.get(side))]
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="o", color=color, label=label)
        capped = [(row["length"], row[side]["peak_bytes"] / MIB) for row in rows
                  if (row.get(side) or {}).get("status") == "over_cap"]  # fmt: skip
        if capped:
            ax.plot(*zip(*capped, strict=True), marker="^", linestyle="none", color=color,
                    label=f"{label}: stopped at the cap (at least)")  # fmt: skip
        fit = summary["fits"][side]
        if fit["slope"] == fit["slope"] and pts:
            xs = [rows[0]["length"], rows[-1]["length"]]
            ys = [fit["slope"] * x / TOKENS_PER_K + fit["intercept"] for x in xs]
            ax.plot(xs, ys, linestyle="--", color=color, alpha=0.5,
                    label=f"{label} fit: {fit['slope']:.0f} MiB / 1k tokens")  # fmt: skip
    ax.set(xlabel="completion tokens (each completion)", ylabel="peak memory of one step (MiB)")
    ax.set_title(title, fontsize=9)  # the settings are long: the default size cuts them off
    ax.set_xscale("log", base=2)
    ax.set_xticks([row["length"] for row in rows], [f"{row['length']:,}" for row in rows])
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def mem_total_bytes() -> int:
    with contextlib.suppress(OSError):
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 0


def mem_available_bytes() -> int:
    with contextlib.suppress(OSError):
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def default_cap_gb() -> float:
    """Three quarters of the memory available now: a worker past it is stopped, not the machine."""
    return round(0.75 * mem_available_bytes() / (1 << 30), 1) or 16.0


def logprobs_version() -> dict[str, Any]:
    """Which verifiers/training/loss/logprobs.py was measured: its hash, and whether it differs from git HEAD."""
    root = Path(__file__).resolve().parents[1]
    src = root / "verifiers" / "training" / "loss" / "logprobs.py"
    out: dict[str, Any] = {"sha1": hashlib.sha1(src.read_bytes()).hexdigest() if src.is_file() else None}
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        )
        diff = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", str(src)], cwd=root, timeout=10)
        out["git_head"] = head.stdout.strip()
        out["modified_since_head"] = diff.returncode == 1
    return out


# ---------------------------------------------------------------------------------------------
# Worker side: one (side, length), in its own process.
# ---------------------------------------------------------------------------------------------


def loss_sources_sha1() -> dict[str, str]:
    """Hashes of the loss modules this worker imported: the tree may change between workers."""
    from verifiers.training import loss

    folder = Path(loss.__file__).parent
    return {f.name: hashlib.sha1(f.read_bytes()).hexdigest()[:12] for f in sorted(folder.glob("*.py"))}


def model_config(args: argparse.Namespace, length: int):
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=QWEN3_VOCAB,
        hidden_size=args.hidden,
        intermediate_size=3 * args.hidden,  # Qwen3-0.6B's ratio (1024 -> 3072)
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=max(args.heads // 2, 1),  # Qwen3-0.6B: 16 query heads, 8 key/value heads
        head_dim=args.hidden // args.heads,
        tie_word_embeddings=True,  # as Qwen3-0.6B (the larger Qwen3s untie)
        max_position_embeddings=max(40_960, args.prompt_tokens + length + 1),
        rope_theta=1_000_000.0,
        use_sliding_window=False,
    )


def build_model(args: argparse.Namespace, length: int):
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(args.seed)
    model = AutoModelForCausalLM.from_config(
        model_config(args, length), attn_implementation="sdpa", dtype=torch.float32
    )
    return model.to(args.device).train()


def build_batch(args: argparse.Namespace, length: int) -> dict[str, Any]:
    """One group: a prompt and ``--completions`` completions of ``length`` tokens, random ids, same on both sides."""
    import torch

    g = torch.Generator().manual_seed(args.seed)
    K, P = args.completions, args.prompt_tokens
    prompt = torch.randint(0, QWEN3_VOCAB, (P,), generator=g)
    completion_ids = torch.randint(0, QWEN3_VOCAB, (K, length), generator=g)
    # Zero-mean, non-zero advantages, as a group's normalized rewards are: every row gets a gradient.
    advantages = torch.linspace(1.0, -1.0, K) if K > 1 else torch.ones(1)
    return {"prompt": prompt, "completion_ids": completion_ids, "advantages": advantages}


def shared_config(args: argparse.Namespace, length: int, out: Path) -> dict[str, Any]:
    """Settings both trainers take under the same name and meaning, with the same value."""
    return dict(
        output_dir=str(out),
        per_device_train_batch_size=args.completions,
        gradient_accumulation_steps=1,
        num_generations=args.completions,
        num_iterations=1,
        max_steps=1,
        learning_rate=1e-5,
        beta=0.0,
        temperature=1.0,
        loss_type="dr_grpo",
        gradient_checkpointing=args.gradient_checkpointing,
        bf16=False,
        use_cpu=args.device == "cpu",
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        seed=args.seed,
    )


def enable_checkpointing_like_train(trainer) -> None:
    """What ``Trainer.train`` does for ``gradient_checkpointing`` (transformers 5: there, not in
    ``__init__``); this benchmark calls ``compute_loss`` directly, so it does it here."""
    args = trainer.args
    if not args.gradient_checkpointing:
        return
    kwargs = dict(args.gradient_checkpointing_kwargs or {})
    kwargs.pop("every_n_layers", None), kwargs.pop("offload", None)
    trainer.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs or None)


def tokenizer():
    from transformers import AutoTokenizer

    from verifiers.models import resolve_model_name

    return AutoTokenizer.from_pretrained(resolve_model_name("smollm2"))


def ours_trainer(args: argparse.Namespace, length: int, out: Path):
    """Our GRPOTrainer, and micro-batches of ``n`` completion tokens as ``batch/prepared.py`` makes them:
    ``(trainer, make_inputs(n), path(inputs))``."""
    import datasets
    import torch

    import verifiers as vf
    from verifiers.training.loss import logprobs as lp

    model = build_model(args, length)
    tok = tokenizer()
    rows = {"question": ["q"], "answer": [""]}
    env = vf.SingleTurnEnv(
        dataset=datasets.Dataset.from_dict(rows), rubric=vf.Rubric(funcs=[lambda **_: 0.0])
    )
    config = vf.GRPOConfig(
        **shared_config(args, length, out),
        max_tokens=length,
        max_prompt_length=max(256, args.prompt_tokens),
        max_seq_len=max(256, args.prompt_tokens) + length,
        num_batches_ahead=0,
        log_completions=False,
    )
    # A client is never used: compute_loss is called directly, nothing is generated or synced.
    trainer = vf.GRPOTrainer(model=model, processing_class=tok, env=env, args=config, client=object())
    enable_checkpointing_like_train(trainer)

    def make_inputs(n: int) -> dict[str, Any]:
        b = build_batch(args, n)
        K, P = args.completions, args.prompt_tokens
        ids = torch.cat([b["prompt"].expand(K, P), b["completion_ids"]], dim=1)
        attn = torch.ones_like(ids)
        loss_mask = torch.zeros_like(ids)
        loss_mask[:, P:] = 1
        # No server log-probs (NaN): no importance-sampling correction, as TRL without vLLM.
        sampling = torch.full(ids.shape, float("nan"))
        micro = lp.scoring_inputs(ids, attn, loss_mask, sampling)
        micro["advantages_B"] = b["advantages"]
        return {k: v.to(args.device) if torch.is_tensor(v) else v for k, v in micro.items()}

    def path(inputs: dict[str, Any]) -> str:
        """Which way sequence_logprobs runs this micro-batch: one packed sequence, or row by row."""
        packs = getattr(lp, "can_pack", None)
        if packs is None:
            return "?"
        ids, attn, start = inputs["input_ids_BT"], inputs["attention_mask_BT"], inputs["start"]
        return "packed" if packs(trainer.model, ids, attn, start) else "rows"

    return trainer, make_inputs, path


def trl_trainer(args: argparse.Namespace, length: int, out: Path):
    """TRL's GRPOTrainer, and inputs of ``n`` completion tokens as its ``_generate_and_score_completions``
    returns them: ``(trainer, make_inputs(n), path(inputs))``."""
    import datasets
    import torch
    from trl import GRPOConfig, GRPOTrainer

    model = build_model(args, length)

    def no_reward(completions, **_):
        return [0.0] * len(completions)

    config = GRPOConfig(**shared_config(args, length, out), max_completion_length=length)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=no_reward,
        args=config,
        train_dataset=datasets.Dataset.from_dict({"prompt": ["q"] * args.completions}),
        processing_class=tokenizer(),
    )
    enable_checkpointing_like_train(trainer)
    # Set by Trainer's loop before compute_loss; dr_grpo divides by it.
    trainer.current_gradient_accumulation_steps = 1

    def make_inputs(n: int) -> dict[str, Any]:
        b = build_batch(args, n)
        K, P = args.completions, args.prompt_tokens
        completion_ids = b["completion_ids"]
        inputs = {
            "prompt_ids": b["prompt"].expand(K, P).contiguous(),
            "prompt_mask": torch.ones(K, P, dtype=torch.long),
            "completion_ids": completion_ids,
            "completion_mask": torch.ones_like(completion_ids),
            "advantages": b["advantages"],
            "num_items_in_batch": torch.tensor(completion_ids.numel()),
        }
        return {k: v.to(args.device) for k, v in inputs.items()}

    return trainer, make_inputs, lambda inputs: "fused LM head"


def trl_defaults() -> dict[str, Any]:
    """TRL's own settings for its log-prob path, read from the installed TRL."""
    import trl
    from trl.trainer import utils as trl_utils

    out: dict[str, Any] = {"version": trl.__version__}
    with contextlib.suppress(Exception):
        from trl.kernels import chunked_logprob

        out["token_tile"] = chunked_logprob.TOKEN_CHUNK_SIZE
        out["triton"] = chunked_logprob._TRITON_AVAILABLE
    out["vocab_tile"] = getattr(trl_utils, "_CHUNKED_LOGPROB_CHUNK_SIZE", None)
    return out


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        m = re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M)
    return int(m.group(1)) if m else 0


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) to the current RSS; False where not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _malloc_trim() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


class RSSMeter:
    """Peak RSS growth over the ``with`` body (kernel mark, else sampled); stops the process past ``cap``."""

    def __init__(self, cap_bytes: int, on_cap):
        self.cap, self.on_cap = cap_bytes, on_cap
        self.sampled_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            rss = _rss_bytes()
            self.sampled_peak = max(self.sampled_peak, rss)
            if rss > self.cap:
                self.on_cap(self.sampled_peak - self.baseline)  # exits the process
            self._stop.wait(SAMPLE_EVERY_S)

    def __enter__(self) -> RSSMeter:
        gc.collect()
        _malloc_trim()  # what glibc still holds of freed memory does not count as the step's
        self.baseline = _rss_bytes()
        self.sampled_peak = self.baseline
        self.kernel_mark = _reset_peak_rss()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        hwm = _status_kib("VmHWM") * 1024 if self.kernel_mark else 0
        self.peak = max(hwm, self.sampled_peak)
        self.method = "VmHWM after clear_refs" if self.kernel_mark else "VmRSS sampled every 5 ms"
        self.peak_bytes = self.peak - self.baseline


class CUDAMeter:
    """Peak allocated CUDA memory over the ``with`` body, above what was allocated before it."""

    def __enter__(self) -> CUDAMeter:
        import torch

        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        self.baseline = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        return self

    def __exit__(self, *exc) -> None:
        import torch

        torch.cuda.synchronize()
        self.peak = torch.cuda.max_memory_allocated()
        self.peak_bytes = self.peak - self.baseline
        self.method = (
            "torch.cuda.max_memory_allocated after reset_peak_memory_stats, minus memory_allocated before"
        )


def worker(args: argparse.Namespace) -> None:
    import torch

    result_path = Path(args.result)
    length = args.length
    out = Path(args.out) / f"{args.worker}-{length}"

    def write(result: dict[str, Any]) -> None:
        tmp = result_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result))
        tmp.replace(result_path)

    t0 = time.perf_counter()
    build = ours_trainer if args.worker == "ours" else trl_trainer
    trainer, make_inputs, path = build(args, length, out)
    model = trainer.model
    # torch's AdamW, Trainer's default optimizer, on both sides.
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)

    def step(inputs: dict[str, Any]) -> float:
        loss = trainer.compute_loss(model, inputs)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss.detach())

    # Warm-up on a short batch: AdamW's state and one-time buffers exist before the measured
    # step (as in every step of a run but the first), for a fraction of a full step's time.
    for _ in range(args.warmup_steps):
        step(make_inputs(WARMUP_TOKENS))
    inputs = make_inputs(length)
    params = sum(p.numel() for p in model.parameters())
    setup_s = time.perf_counter() - t0
    base = {"side": args.worker, "length": length, "path": path(inputs), "params": params, "setup_s": setup_s}

    def over_cap(lower_bound: int) -> None:
        write({**base, "status": "over_cap", "peak_bytes": lower_bound, "cap_bytes": cap})
        os._exit(OVER_CAP_RC)

    cap = int(args.max_rss_gb * (1 << 30))
    meter = CUDAMeter() if args.device == "cuda" else RSSMeter(cap, over_cap)
    t1 = time.perf_counter()
    with meter:
        loss = step(inputs)
    step_s = time.perf_counter() - t1
    write(
        {
            **base,
            "status": "ok",
            "peak_bytes": meter.peak_bytes,
            "baseline_bytes": meter.baseline,
            "peak_abs_bytes": meter.peak,
            "method": meter.method,
            # The 5 ms samples' peak: at most the kernel's mark; far below it would mean a short spike.
            "sampled_peak_bytes": getattr(meter, "sampled_peak", meter.peak) - meter.baseline,
            "loss_sources_sha1": loss_sources_sha1(),
            "step_s": step_s,
            "loss": loss,
            "torch_threads": torch.get_num_threads(),
        }
    )


# ---------------------------------------------------------------------------------------------
# Driver: every (side, length) in a fresh process.
# ---------------------------------------------------------------------------------------------


def worker_command(args: argparse.Namespace, side: str, length: int, result: Path) -> list[str]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", side, "--length", str(length)]
    cmd += ["--result", str(result), "--out", str(args.out), "--device", args.device]
    cmd += ["--completions", str(args.completions), "--prompt-tokens", str(args.prompt_tokens)]
    cmd += ["--hidden", str(args.hidden), "--layers", str(args.layers), "--heads", str(args.heads)]
    cmd += [
        "--warmup-steps",
        str(args.warmup_steps),
        "--max-rss-gb",
        str(args.max_rss_gb),
        "--seed",
        str(args.seed),
    ]
    cmd += ["--gradient-checkpointing" if args.gradient_checkpointing else "--no-gradient-checkpointing"]
    return cmd


def worker_env(device: str) -> dict[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    if device == "cpu":
        env["MALLOC_MMAP_THRESHOLD_"] = str(MMAP_THRESHOLD)  # RSS follows live tensors (see the docstring)
    return env


def spawn(args: argparse.Namespace, side: str, length: int) -> dict[str, Any]:
    out = Path(args.out)
    result = out / f"{side}-{length}.json"
    log = out / f"{side}-{length}.log"
    result.unlink(missing_ok=True)
    cmd = worker_command(args, side, length, result)
    t0 = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=worker_env(args.device))
        try:
            rc = proc.wait(args.worker_timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
            return {"status": "failed", "error": f"timed out after {args.worker_timeout} s; see {log}"}
        finally:
            if proc.poll() is None:  # interrupted: the worker must not outlive the run
                proc.kill()
                proc.wait()
    wall = time.perf_counter() - t0
    if result.is_file() and rc in (0, OVER_CAP_RC):
        return {**json.loads(result.read_text()), "wall_s": wall}
    if rc == -signal.SIGKILL:
        error = f"killed (SIGKILL: out of memory?); see {log}"
    else:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        error = f"exit code {rc}: {(lines or ['(empty log)'])[-1][:200]}; see {log}"
    return {"status": "failed", "error": error, "wall_s": wall}


def settings(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "model": {
            "family": "Qwen3 (random weights from a config)",
            "vocab_size": QWEN3_VOCAB,
            "tied_head": True,
            "hidden_size": args.hidden,
            "intermediate_size": 3 * args.hidden,
            "layers": args.layers,
            "heads": args.heads,
            "kv_heads": max(args.heads // 2, 1),
            "attention": "sdpa",
        },
        "batch": {
            "prompt_tokens": args.prompt_tokens,
            "completions": args.completions,
            "layout": "one prompt, `completions` completions of `length` tokens each, no padding; one micro-batch",
        },
        "training": "full fine-tuning, fp32, AdamW, on-policy (num_iterations=1), beta=0, loss_type='dr_grpo', "
        f"gradient checkpointing {'on' if args.gradient_checkpointing else 'off'}, entropy computed on both sides",
        "steps": f"{args.warmup_steps} warm-up step(s) on {WARMUP_TOKENS}-token completions, then the measured step",
        "device": args.device,
        "memory_method": (
            "torch.cuda.max_memory_allocated after reset_peak_memory_stats, minus memory_allocated before the step"
            if args.device == "cuda"
            else "fresh process per (side, length); MALLOC_MMAP_THRESHOLD_=65536 so freed tensors leave the "
            "resident set; gc.collect + malloc_trim, baseline VmRSS, /proc/self/clear_refs=5, then VmHWM - "
            f"baseline after the step (VmRSS sampled every 5 ms as fallback and as the {args.max_rss_gb} GiB guard)"
        ),
        "units": "MiB = 2^20 bytes; slopes per 1024 completion tokens (each completion)",
    }


def machine() -> dict[str, Any]:
    import torch
    import transformers
    import trl

    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "mem_total_gib": round(mem_total_bytes() / (1 << 30), 1),
        "mem_available_gib_at_start": round(mem_available_bytes() / (1 << 30), 1),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", type=parse_lengths, default=list(DEFAULT_LENGTHS),
                   help="completion tokens per completion, comma-separated (default 1024,2048,4096,8192)")  # fmt: skip
    p.add_argument(
        "--quick", action="store_true", help=f"smoke run at {','.join(map(str, QUICK_LENGTHS))} tokens"
    )
    p.add_argument(
        "--completions", type=int, default=2, help="completions of the one prompt (one micro-batch)"
    )
    p.add_argument("--prompt-tokens", type=int, default=64)
    p.add_argument("--hidden", type=int, default=256, help="model width (Qwen3-0.6B: 1024)")
    p.add_argument("--layers", type=int, default=2, help="decoder layers (Qwen3-0.6B: 28)")
    p.add_argument("--heads", type=int, default=4, help="attention heads (key/value heads: half)")
    p.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=True,
                   help="both trainers' default: on")  # fmt: skip
    p.add_argument("--warmup-steps", type=int, default=1, help="steps before the measured one")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--max-rss-gb", type=float, default=None,
                   help="CPU: stop a worker whose RSS passes this (GiB) and report a lower bound "
                   "(default: 3/4 of the memory available at start)")  # fmt: skip
    p.add_argument("--sides", default="ours,trl", help="which trainers to run (default both)")
    p.add_argument("--worker-timeout", type=int, default=3600, help="seconds per (side, length)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="outputs/benchmarks/memory")
    p.add_argument(
        "--dry-run", action="store_true", help="print the plan, the settings and the commands; run nothing"
    )
    p.add_argument("--worker", choices=SIDES, help=argparse.SUPPRESS)
    p.add_argument("--length", type=int, help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.max_rss_gb is None:
        args.max_rss_gb = default_cap_gb()
    if args.worker:
        worker(args)
        return 0
    if args.quick:
        args.lengths = list(QUICK_LENGTHS)
    sides = [s for s in args.sides.split(",") if s]
    if not sides or set(sides) - set(SIDES):
        raise SystemExit(f"--sides takes ours and/or trl, got {args.sides!r}")
    if args.hidden % args.heads:
        raise SystemExit(f"--hidden {args.hidden} is not a multiple of --heads {args.heads}")
    out = Path(args.out)
    if args.dry_run:
        print(json.dumps(settings(args), indent=2))
        for length in args.lengths:
            for side in sides:
                print(" ".join(worker_command(args, side, length, out / f"{side}-{length}.json")))
        return 0
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: no CUDA device here (--dry-run shows the plan)")
    out.mkdir(parents=True, exist_ok=True)
    # SIGTERM (timeout, CI) unwinds through spawn's finally: the running worker is stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    info = machine()
    print(
        f"machine: {info['cpu']}, {info['cores']} cores, torch threads {info['torch_threads']}, "
        f"{info['mem_total_gib']} GiB RAM ({info['mem_available_gib_at_start']} available); "
        f"torch {info['torch']}, transformers {info['transformers']}, TRL {info['trl']}; device {args.device}",
        flush=True,
    )
    version = logprobs_version()
    started = time.time()
    rows: list[dict[str, Any]] = []
    over: dict[str, int] = {}  # side -> the length it was stopped at: longer ones are skipped
    for length in args.lengths:
        row: dict[str, Any] = {"length": length}
        for side in SIDES:
            if side not in sides:
                row[side] = None
            elif side in over:
                row[side] = {"status": "skipped", "over_cap_at": over[side]}
            else:
                r = row[side] = spawn(args, side, length)
                if r.get("status") == "over_cap":
                    over[side] = length
                peak = f"{r['peak_bytes'] / MIB:,.0f} MiB" if r.get("peak_bytes") is not None else "-"
                print(f"{side} at {length:,} tokens: {r['status']}, peak {peak}, {r.get('wall_s', 0):.0f} s"
                      + (f" ({r['error']})" if r.get("error") else ""), flush=True)  # fmt: skip
        rows.append(row)
    summary = summarize(rows)
    print(table(rows))
    trl_info = trl_defaults()
    title = (
        f"Qwen3-shaped (V=151,936, tied, {args.layers} x {args.hidden}), 1 prompt x {args.completions} completions, "
        f"full FT, fp32, {args.device}"
    )
    report = {
        "settings": {**settings(args), "args": vars(args)},
        "machine": info,
        "trl_log_prob_path": {
            **trl_info,
            "what": "add_fused_lm_head: log-probs and entropy from hidden states in "
            "token_tile x vocab_tile tiles, recomputed in backward (TRL's default)",
        },  # fmt: skip
        "ours_logprobs_py": version,
        "rows": rows,
        **summary,
        "duration_s": time.time() - started,
    }
    (out / "memory.json").write_text(json.dumps(report, indent=2))
    plot(rows, summary, out / "memory.png", title)
    print(f"wrote {out / 'memory.json'} and {out / 'memory.png'} ({report['duration_s']:.0f} s)")
    print(goal_line(summary))
    print(closing_line(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

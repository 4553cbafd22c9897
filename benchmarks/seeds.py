"""Tokens/s of a vf-vllm server with and without a sampling seed on every request.

``GRPOConfig.sampling_seeds="rollout"`` (the default) sends each rollout's request with
its own seed; vLLM then gives that request a ``torch.Generator`` and its sampler draws the
noise request by request every decode step (``vllm/v1/sample/ops/topk_topp_sampler.py``;
on a GPU it also leaves FlashInfer's sampler). ``"none"`` sends no seed. One server; the
same requests (fixed prompts, ``ignore_eos``, exactly ``--max-tokens`` each, as many in
flight as ``--concurrency``) in passes that alternate seeded / unseeded, so a drift in the
machine's load falls on both. Best pass per mode (other load only slows a pass down) and
tokens per server CPU-second, which such load disturbs less.

Prints a markdown table, writes ``seeds.json`` and ``seeds.png`` to ``--out`` and ends
with ``seeded_tok_s=A unseeded_tok_s=B ratio=A/B cpu="MODEL" cores=N``.

    python benchmarks/seeds.py                      # SmolLM2-135M-Instruct (vf-models smollm2)
    python benchmarks/seeds.py --model tiny --passes 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from _common import free_port, vllm_server
from server import PROMPTS, group_cpu_seconds

MODES = ("seeded", "unseeded")


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


async def one_pass(port: int, model: str, n: int, max_tokens: int, concurrency: int, seeded: bool, pid: int):
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="EMPTY", max_retries=0, timeout=600)
    extra = {"ignore_eos": True, "return_token_ids": True}
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> int:
        seed = {"seed": 1000 + i} if seeded else {}
        async with sem:
            out = await client.completions.create(
                model=model, prompt=PROMPTS[i % len(PROMPTS)], max_tokens=max_tokens,
                temperature=1.0, logprobs=1, extra_body=extra, **seed,
            )  # fmt: skip
            return out.usage.completion_tokens

    t0, cpu0 = time.perf_counter(), group_cpu_seconds(pid)
    tokens = sum(await asyncio.gather(*(one(i) for i in range(n))))
    wall, cpu = time.perf_counter() - t0, group_cpu_seconds(pid) - cpu0
    await client.close()
    return {
        "tokens": tokens,
        "wall_s": wall,
        "tok_per_s": tokens / wall,
        "tok_per_cpu_s": tokens / max(cpu, 1e-9),
    }


def plot(results: dict, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for ax, key, label in zip(
        axes, ("tok_per_s", "tok_per_cpu_s"), ("tokens/s (each pass)", "tokens per server CPU-s"), strict=True
    ):
        for x, mode in enumerate(MODES):
            values = [r[key] for r in results[mode]["runs"]]
            ax.scatter([x] * len(values), values, alpha=0.6)
            ax.bar(x, max(values), alpha=0.3)
        ax.set(xticks=range(len(MODES)), xticklabels=MODES, title=label)
        ax.set_ylim(bottom=0)  # from zero: a gap looks as large as it is
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=None, help='model folder, or "tiny" (default: SmolLM2 via vf-models)')
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--concurrency", type=int, default=32, help="requests in flight (the decode batch)")
    p.add_argument("--passes", type=int, default=3, help="timed passes per mode, alternating")
    p.add_argument("--out", default="outputs/benchmarks")
    args = p.parse_args(argv)
    if args.model is None:
        from verifiers.models import smollm2_dir

        args.model = str(smollm2_dir())
    elif args.model == "tiny":
        from verifiers.models import build_tiny_model

        args.model = str(build_tiny_model(Path(tempfile.gettempdir()) / "vf-bench-tiny"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = out / "seeds-server.log"
    results: dict = {
        "model": args.model, "requests": args.requests, "max_tokens": args.max_tokens,
        "concurrency": args.concurrency, "cpu": cpu_model(), "cores": os.cpu_count(),
        **{mode: {"runs": []} for mode in MODES},
    }  # fmt: skip
    extra = ("--max-num-seqs", str(max(64, args.concurrency)), "--uvicorn-log-level", "warning")
    with vllm_server(args.model, port, log, extra_args=extra) as started:
        results["start_s"] = float(started)
        asyncio.run(
            one_pass(port, args.model, 8, args.max_tokens, args.concurrency, True, started.pid)
        )  # warm-up
        for k in range(args.passes):
            order = MODES if k % 2 == 0 else MODES[::-1]
            for mode in order:
                run = asyncio.run(
                    one_pass(port, args.model, args.requests, args.max_tokens, args.concurrency,
                             mode == "seeded", started.pid)
                )  # fmt: skip
                results[mode]["runs"].append(run)
                print(
                    f"{mode}: {run['tok_per_s']:.1f} tok/s, {run['tok_per_cpu_s']:.1f} tok/cpu-s",
                    file=sys.stderr,
                )
    for mode in MODES:
        runs = results[mode]["runs"]
        results[mode].update(
            tok_per_s=max(r["tok_per_s"] for r in runs), tok_per_cpu_s=max(r["tok_per_cpu_s"] for r in runs)
        )
    seeded, unseeded = results["seeded"], results["unseeded"]
    results["ratio"] = seeded["tok_per_s"] / unseeded["tok_per_s"]
    results["cpu_ratio"] = seeded["tok_per_cpu_s"] / unseeded["tok_per_cpu_s"]
    name = Path(args.model).name
    print(f"\n{name} on {results['cpu']} ({results['cores']} cores), {args.requests} requests x "
          f"{args.max_tokens} tokens, {args.concurrency} in flight, best of {args.passes} passes\n")  # fmt: skip
    print("| requests | tokens/s | tokens per server CPU-s |\n|---|---|---|")
    for mode, label in (
        ("seeded", "a seed each (sampling_seeds='rollout')"),
        ("unseeded", "no seed ('none')"),
    ):
        print(f"| {label} | {results[mode]['tok_per_s']:.1f} | {results[mode]['tok_per_cpu_s']:.1f} |")
    print(f"| ratio seeded / unseeded | {results['ratio']:.3f} | {results['cpu_ratio']:.3f} |")
    (out / "seeds.json").write_text(json.dumps(results, indent=2) + "\n")
    plot(results, out / "seeds.png", f"{name}, {results['cpu']}: seeded vs unseeded requests")
    print(f"wrote {out / 'seeds.json'} and {out / 'seeds.png'}; server log {log}")
    print(
        f"seeded_tok_s={seeded['tok_per_s']:.1f} unseeded_tok_s={unseeded['tok_per_s']:.1f} "
        f'ratio={results["ratio"]:.3f} cpu="{results["cpu"]}" cores={results["cores"]}',
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

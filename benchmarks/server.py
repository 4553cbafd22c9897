"""Benchmark vf-vllm against vLLM's own OpenAI server, and time weight updates.

1. Throughput: the same 256 completion requests (fixed prompts, seeds, ``ignore_eos``
   so every request samples exactly ``--max-tokens``; token-data parameters on, as
   environments send them) against ``python -m vllm.entrypoints.openai.api_server``
   and against ``vf-vllm``, started with the same flags, one at a time. Each start
   runs the requests ``--batches`` times; ``--rounds`` starts each server again,
   alternating which goes first. Ratio = best vf-vllm tokens/s / best vLLM
   tokens/s (target >= 0.95): other load on a shared machine only ever slows a
   pass down. Also reported: tokens per CPU-second the server processes spent,
   which such load disturbs less.
2. Weight updates on the vf-vllm server: a full update of every weight of the model
   (``VLLMClient.update_weights``, target <= 1 s on CPU) and a LoRA adapter swap
   (r=8 on q/k/v/o, ``update_lora``, target <= 0.1 s), each repeated; medians reported.

``--neighbour N`` runs both servers beside N busy processes (each spinning on one core,
unpinned, at ``--neighbour-nice``): a user's machine is rarely quiet.

Prints a markdown table, writes JSON (default ``outputs/benchmarks/server.json``) and
ends with ``server_ratio=R full_sync_s=F lora_sync_s=L``.

    python benchmarks/server.py                    # SmolLM2-135M-Instruct (vf-models smollm2)
    python benchmarks/server.py --model DIR --requests 64 --max-tokens 16
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROMPTS = [
    "Write a short story about a robot who learns to paint.",
    "Explain why the sky is blue in simple words.",
    "List three uses of a paperclip that are not holding paper.",
    "What is the capital of France, and what is it known for?",
    "Describe the taste of an orange to someone who has never had one.",
    "Give me a recipe for a quick breakfast.",
    "Summarize the plot of a detective novel in two sentences.",
    "Why do cats purr? Answer briefly.",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server process in its own process group; ``with`` stops it (SIGTERM, then SIGKILL)."""

    def __init__(self, cmd: list[str], port: int, health: str, log: Path):
        self.cmd, self.port, self.health, self.log = cmd, port, health, log
        self.proc: subprocess.Popen | None = None
        self.start_s = 0.0

    def __enter__(self) -> Server:
        import requests

        t0 = time.perf_counter()
        with open(self.log, "wb") as fh:
            from verifiers.inference.server.parent_watch import launcher_env

            # vf-vllm ends with this benchmark, even one killed with SIGKILL (raw vLLM ignores it).
            self.proc = subprocess.Popen(
                self.cmd,
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **launcher_env()},
            )
        while time.perf_counter() - t0 < 600:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.cmd[2]} exited; see {self.log}")
            try:
                if requests.get(f"http://127.0.0.1:{self.port}{self.health}", timeout=2).status_code == 200:
                    self.start_s = time.perf_counter() - t0
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.5)
        self.__exit__()
        raise TimeoutError(f"server did not start in 600 s; see {self.log}")

    def __exit__(self, *exc) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def group_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a server process and all its children (engine core, workers)."""
    import psutil

    total = 0.0
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return total
    for proc in procs:
        try:
            t = proc.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


async def run_requests(port: int, model: str, n: int, max_tokens: int, concurrency: int, pid: int) -> dict:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="EMPTY", max_retries=0, timeout=600)
    extra = {"ignore_eos": True, "return_token_ids": True, "return_tokens_as_token_ids": True}
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> int:
        async with sem:
            out = await client.completions.create(
                model=model, prompt=PROMPTS[i % len(PROMPTS)], max_tokens=max_tokens,
                temperature=1.0, seed=i, logprobs=1, extra_body=extra,
            )  # fmt: skip
            return out.usage.completion_tokens

    await asyncio.gather(*(one(i) for i in range(min(8, n))))  # warm-up, not timed
    t0, cpu0 = time.perf_counter(), group_cpu_seconds(pid)
    tokens = sum(await asyncio.gather(*(one(i) for i in range(n))))
    wall, cpu = time.perf_counter() - t0, group_cpu_seconds(pid) - cpu0
    await client.close()
    # CPU seconds the server spent are steadier than wall time on a shared machine.
    return {
        "tokens": tokens,
        "wall_s": wall,
        "tok_per_s": tokens / wall,
        "cpu_s": cpu,
        "tok_per_cpu_s": tokens / cpu,
    }


def time_syncs(port: int, model_dir: str, repeats: int, lora: bool) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from verifiers.inference.client.vllm_client import VLLMClient

    client = VLLMClient(f"http://127.0.0.1:{port}", update_timeout=600)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():  # from_pretrained maps the checkpoint file; a trainer's weights live in RAM
        for p in model.parameters():
            p.data = p.data.clone()
    full = []
    for _ in range(repeats + 1):  # the first one also reads the weight spec: not counted
        t0 = time.perf_counter()
        client.update_weights(model.named_parameters())
        full.append(time.perf_counter() - t0)
    out = {"full_sync_all_s": full[1:], "full_sync_s": statistics.median(full[1:]),
           "params": sum(p.numel() for p in model.parameters())}  # fmt: skip
    if lora:
        from peft import LoraConfig, get_peft_model

        cfg = LoraConfig(
            r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], lora_dropout=0.0
        )
        peft_model = get_peft_model(model, cfg)
        times = []
        for _ in range(repeats + 1):
            t0 = time.perf_counter()
            client.update_lora(peft_model, name="policy")
            times.append(time.perf_counter() - t0)
        out.update(lora_sync_all_s=times[1:], lora_sync_s=statistics.median(times[1:]))
    client.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--model", default=None, help="model folder (default: SmolLM2-135M-Instruct via vf-models)"
    )
    p.add_argument("--requests", type=int, default=256)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5, help="timed weight updates of each kind")
    p.add_argument(
        "--no-lora", action="store_true", help="serve without --enable-lora and skip the adapter timing"
    )
    p.add_argument(
        "--rounds", type=int, default=1, help="start each server this many times, alternating first"
    )
    p.add_argument("--batches", type=int, default=2, help="passes over the requests per server start")
    p.add_argument("--neighbour", type=int, default=0,
                   help="busy processes beside the servers, each spinning on one core (0: a quiet machine)")  # fmt: skip
    p.add_argument("--neighbour-nice", type=int, default=0, help="their nice value (19: lowest priority)")
    p.add_argument("--out", default="outputs/benchmarks/server.json")
    p.add_argument("--log-dir", default=None, help="server logs (default: a temp dir)")
    args = p.parse_args(argv)

    if args.model is None:
        from verifiers.models import smollm2_dir

        args.model = str(smollm2_dir())
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    log_dir = Path(args.log_dir or tempfile.mkdtemp(prefix="vf-bench-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    flags = ["--model", args.model, "--enforce-eager", "--dtype", "float32", "--max-model-len", "512",
             "--kv-cache-memory-bytes", str(1 << 30), "--max-num-seqs", str(args.concurrency),
             "--uvicorn-log-level", "warning"]  # fmt: skip
    if not args.no_lora:
        flags += ["--enable-lora", "--max-lora-rank", "8"]
    py = sys.executable
    commands = {
        "vllm": ([py, "-m", "vllm.entrypoints.openai.api_server", *flags], "/health"),
        "vf_vllm": ([py, "-m", "verifiers.cli.vllm", *flags], "/vf/health"),
    }
    runs: dict[str, list[dict]] = {"vllm": [], "vf_vllm": []}
    results: dict = {"model": args.model, "flags": flags, "requests": args.requests,
                     "max_tokens": args.max_tokens, "concurrency": args.concurrency}  # fmt: skip

    def serve(name: str, timed_syncs: bool) -> None:
        cmd, health = commands[name]
        port = free_port()
        cmd = cmd + ["--port", str(port), "--host", "127.0.0.1"]
        with Server(cmd, port, health, log_dir / f"{name}-{len(runs[name])}.log") as srv:
            for _ in range(args.batches):
                run = asyncio.run(
                    run_requests(
                        port, args.model, args.requests, args.max_tokens, args.concurrency, srv.proc.pid
                    )
                )
                runs[name].append({"start_s": srv.start_s, **run})
                print(
                    f"{name}: {run['tok_per_s']:.1f} tok/s, {run['tok_per_cpu_s']:.1f} tok/cpu-s",
                    file=sys.stderr,
                )
            if timed_syncs:
                results.update(time_syncs(port, args.model, args.repeats, lora=not args.no_lora))

    from _common import cpu_model, neighbour

    results.update(cpu=cpu_model(), cores=os.cpu_count(),
                   neighbour={"processes": args.neighbour, "nice": args.neighbour_nice})  # fmt: skip
    # Rounds alternate which server goes first, so a drift in the machine's load cancels out.
    with neighbour(args.neighbour, args.neighbour_nice):
        for r in range(args.rounds):
            order = ("vllm", "vf_vllm") if r % 2 == 0 else ("vf_vllm", "vllm")
            for name in order:
                serve(name, timed_syncs=name == "vf_vllm" and r == 0)
    for name, rs in runs.items():
        results[name] = {
            "tok_per_s": max(x["tok_per_s"] for x in rs),  # other load only slows a pass: the best is truest
            "tok_per_cpu_s": max(x["tok_per_cpu_s"] for x in rs),
            "start_s": statistics.median(x["start_s"] for x in rs),
            "runs": rs,
        }
    ratio = results["vf_vllm"]["tok_per_s"] / results["vllm"]["tok_per_s"]
    cpu_ratio = results["vf_vllm"]["tok_per_cpu_s"] / results["vllm"]["tok_per_cpu_s"]
    results.update(server_ratio=ratio, server_cpu_ratio=cpu_ratio)
    lora_s = results.get("lora_sync_s", float("nan"))
    rows = [
        ("server start, vLLM / vf-vllm (s)", f"{results['vllm']['start_s']:.1f} / {results['vf_vllm']['start_s']:.1f}", ""),
        (f"throughput, vLLM ({args.requests} req, best tok/s)", f"{results['vllm']['tok_per_s']:.1f}", ""),
        (f"throughput, vf-vllm ({args.requests} req, best tok/s)", f"{results['vf_vllm']['tok_per_s']:.1f}", ""),
        ("throughput ratio vf-vllm / vLLM", f"{ratio:.3f}", ">= 0.95"),
        ("tokens per server CPU-second, ratio vf-vllm / vLLM", f"{cpu_ratio:.3f}", ""),
        (f"full weight update ({results['params'] / 1e6:.1f}M params, s)", f"{results['full_sync_s']:.3f}", "<= 1.0"),
        ("LoRA adapter swap (r=8, s)", f"{lora_s:.3f}", "<= 0.1"),
    ]  # fmt: skip
    print("| metric | value | target |\n|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    beside = (
        f", beside {args.neighbour} busy process(es) at nice {args.neighbour_nice}" if args.neighbour else ""
    )
    print(f"{results['cpu']}, {results['cores']} cores{beside}")
    print(f"wrote {out}; server logs in {log_dir}")
    print(f"server_ratio={ratio:.3f} full_sync_s={results['full_sync_s']:.3f} lora_sync_s={lora_s:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

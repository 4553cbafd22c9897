"""Soak benchmark: does a long run stay flat? RSS, open fds and threads of trainer and server over steps.

    python benchmarks/soak.py                  # 300 steps on the tiny model (~6 min on 2 busy cores)
    python benchmarks/soak.py --steps 40       # a quick look
    python benchmarks/soak.py --model smollm2  # the same run on SmolLM2-135M (slower)

One vf-vllm server; ``tests/drivers/soak_run.py`` trains against it in a subprocess as
``vf-rl`` would (``RLTrainer``, LoRA, one batch ahead, a checkpoint every 25 steps,
``save_total_limit=2``) and samples both process trees (the server's includes its engine
core) at step 1 and every ``--every`` steps. ``tests/training/test_soak.py`` asserts the
same run at 300 steps. Target: every figure at the last step within 10% of step 100
(``--every`` × 4; × 2 in runs shorter than ``--every`` × 8); the trainer's RSS is the
memory in use and its threads leave out asyncio's pool (see ``soak_run``). Writes
``soak.json`` and ``soak.png`` (one panel per figure, trainer and server) to ``--out``;
the last line printed is
``max_drift=D trainer_rss_mb=.. server_rss_mb=.. seconds=..``, D the largest relative change.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import free_port, vllm_server  # one vf-vllm server for the run

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.drivers.soak_run: the run and the readers of its samples

from tests.drivers.soak_run import FIGURES, SIDES, drift, figure, format_table, read_samples  # noqa: E402

TOLERANCE = 0.10


def plot(samples: dict[int, dict[str, Any]], path: Path, title: str) -> None:
    """One panel per figure (RSS, fds, threads), trainer and server each on its own axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = sorted(samples)
    fig, axes = plt.subplots(len(SIDES), len(FIGURES), figsize=(13, 6), squeeze=False)
    for row, side in enumerate(SIDES):
        for col, name in enumerate(FIGURES):
            ax = axes[row][col]
            ax.plot(steps, [figure(samples[s], side, name) for s in steps], marker=".")
            pool = " (without asyncio's pool)" if (side, name) == ("trainer", "threads") else ""
            ax.set(title=f"{side}: {name}{pool}", xlabel="step")
            ax.set_ylim(bottom=0)  # from zero: a drift looks as large as it is
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny", help='"tiny" (the tests\' tiny Llama), or a model name/folder')
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--every", type=int, default=25, help="sample (and checkpoint) every N steps")
    p.add_argument("--port", type=int, default=0, help="the server's port (0: a free one)")
    p.add_argument("--out", default="outputs/benchmarks/soak")
    args = p.parse_args()
    if args.every < 1 or args.steps < 2 * args.every:
        p.error(f"--steps ({args.steps}) must be at least twice --every ({args.every}), which must be >= 1")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # exit through the finally blocks
    out = Path(args.out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    run_dir = out / "run"
    if run_dir.exists():  # old checkpoints would be resumed past or rotated into the count
        import shutil

        shutil.rmtree(run_dir)
    from verifiers.models import build_tiny_model, resolve_model_name

    if args.model == "tiny":
        cache = Path(os.environ.get("VF_CACHE_DIR", "~/.cache/verifiers")).expanduser()
        model_dir = str(build_tiny_model(cache / "models" / "tiny-llama-seed0-tied"))
    else:
        model_dir = resolve_model_name(args.model)
    port = args.port or free_port()
    first = (4 if args.steps >= 8 * args.every else 2) * args.every  # after the warm-up (test_soak.py)
    with vllm_server(model_dir, port, out / "vf-vllm.log") as startup_s:
        cmd = [
            sys.executable, "-m", "tests.drivers.soak_run", "--port", str(port),
            "--server-pid", str(startup_s.pid), "--model", model_dir, "--out", str(run_dir),
            "--steps", str(args.steps), "--every", str(args.every), "--save-steps", str(args.every),
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        started = time.perf_counter()
        with open(out / "soak.log", "wb") as log:
            rc = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
        seconds = time.perf_counter() - started
    if rc != 0:
        raise SystemExit(f"the soak run failed (exit {rc}); see {out / 'soak.log'}")
    samples = read_samples(run_dir)
    changes = drift(samples, first, args.steps)
    worst = max(abs(v) for v in changes.values())
    last = samples[args.steps]
    summary = {
        "model": args.model,
        "settings": vars(args),
        "server_startup_s": float(startup_s),
        "seconds": seconds,
        "compared": [first, args.steps],
        "drift": changes,
        "max_drift": worst,
        "met": worst <= TOLERANCE,
        "checkpoints": sorted(p.name for p in run_dir.glob("checkpoint-*")),
        "samples": [samples[s] for s in sorted(samples)],
    }
    (out / "soak.json").write_text(json.dumps(summary, indent=2))
    plot(samples, out / "soak.png", f"{args.model} model, {args.steps} steps: footprint at step ends")
    print(format_table(samples))
    print(f"step {first} -> {args.steps}: " + ", ".join(f"{k} {v:+.1%}" for k, v in changes.items()))
    print(f"wrote {out / 'soak.json'} and {out / 'soak.png'}", flush=True)
    print(
        f"max_drift={worst:.4f} trainer_rss_mb={last['trainer']['rss_mb']:.0f} "
        f"server_rss_mb={last['server']['rss_mb']:.0f} seconds={seconds:.0f}",
        flush=True,
    )


if __name__ == "__main__":
    main()

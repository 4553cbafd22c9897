"""How cost grows: our GRPOTrainer against TRL's as rollouts per step and completion length grow.

    python benchmarks/scaling.py          # default points; prints its time estimate first (~34 min at
                                          # issue 16's starting speed, less as ours gets faster)
    python benchmarks/scaling.py --steps 1 --rollouts 16 --lengths 32 --trl-rollouts 16 --trl-lengths 32  # smoke

The same task, model, LoRA, loss and seed as ``benchmarks/vs_trl.py`` (SmolLM2-135M + LoRA r8 on
reverse-text, fp32 on the CPU), whose worker runs each point: one trainer in its own subprocess.
Two axes:

- ``rollouts``: rollouts per optimizer step 16, 32, 64, 128 (prompts x 8 generations), 64 tokens each;
- ``length``: completion length 32, 64, 128, 256 tokens at 64 rollouts per step.

Reverse-text answers are short, so every completion is forced to exactly the point's length
(``vs_trl.py --min-tokens``): ours sends vLLM's ``min_tokens`` = ``max_tokens``, TRL passes
``generation_kwargs={"min_new_tokens": n}`` to ``model.generate``; both suppress EOS until then.
Every completion then ends at the limit, so ``mask_truncated_completions`` is off in both (it
would drop every token from the loss). The mean completion length of each point is recorded.

Ours' points share one vf-vllm server (vs_trl.py's flags); TRL's points run after it is stopped,
so TRL has the whole machine. TRL is slow (~110 s/step at 64 x 64), so by default it runs at fewer
points: rollouts 16, 32, 64 and lengths 32, 64, 128 (``--trl-rollouts``, ``--trl-lengths``).
Per point: seconds per step and completion tokens/s over steps 2..n (step 1 is warm-up, as in
vs_trl.py), peak memory (ours: the trainer's peak RSS + the server's process tree's peak PSS sum while that
point ran; TRL: its one process's peak RSS). Writes a markdown table, ``scaling.json`` (rewritten after every point) and
``scaling.png`` to ``--out``, and ends with one line: the log-log slopes of s/step on each axis
(the exponent: 1.0 = cost grows linearly) and TRL's s/step over ours' at the largest point both ran.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import SERVER_FLAGS, PeakTreeRSS, free_port, matmul_flops, vllm_server

GIB = float(1 << 30)
FIXED_ROLLOUTS, FIXED_LENGTH = 64, 64  # the other axis' value on each axis (vs_trl.py's setting)
GENERATIONS = 8  # rollouts per prompt
TOOLS = ("ours", "trl")
# Time estimate before anything ran: s/step at 64 rollouts x 64 tokens (issue 16: TRL ~110 s,
# ours 1.94x faster), replaced by outputs/benchmarks/vs_trl/vs_trl.json when present and then
# by this run's own points; plus start-up per trainer run and for the server.
PRIOR_S_PER_STEP = {"ours": 57.0, "trl": 110.0}
START_S = {"run": 30.0, "server": 45.0}


@dataclass(frozen=True)
class Point:
    rollouts: int
    length: int

    @property
    def work(self) -> float:
        """Completion tokens per step relative to 64 x 64 (the estimate takes cost as linear in it)."""
        return self.rollouts * self.length / (FIXED_ROLLOUTS * FIXED_LENGTH)

    @property
    def name(self) -> str:
        return f"r{self.rollouts}-l{self.length}"


def axis_points(rollouts: list[int], lengths: list[int]) -> dict[str, list[Point]]:
    return {
        "rollouts": [Point(r, FIXED_LENGTH) for r in rollouts],
        "length": [Point(FIXED_ROLLOUTS, n) for n in lengths],
    }


def unique(axes: dict[str, list[Point]]) -> list[Point]:
    """Each point once (64 x 64 lies on both axes), cheapest first so the estimate calibrates early."""
    return sorted({p for points in axes.values() for p in points}, key=lambda p: (p.work, p.rollouts))


def loglog_slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log(y) on log(x): the exponent k in y ~ x^k (nan below two points)."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys, strict=True) if x > 0 and y > 0]
    if len({x for x, _ in pts}) < 2:
        return float("nan")
    mx, my = sum(x for x, _ in pts) / len(pts), sum(y for _, y in pts) / len(pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


# ---------------------------------------------------------------------------------------------
# Running the points.
# ---------------------------------------------------------------------------------------------


def prior_s_per_step(vs_trl_json: Path) -> dict[str, float]:
    """s/step at 64 x 64 per tool: from the last vs_trl.py run when there is one, else the constants."""
    prior = dict(PRIOR_S_PER_STEP)
    try:
        data = json.loads(vs_trl_json.read_text())
        a = data["settings"]["args"]
        work = Point(GENERATIONS * a["prompts"], a["max_tokens"]).work
        for run in data["runs"]:
            tool = "trl" if run["name"] == "trl" else "ours"
            if run["name"] in ("trl", "ours-default", "ours-ahead1"):  # ours' default row (old and new name)
                prior[tool] = run["summary"]["s_per_step"] / work
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return prior


class Estimate:
    """Seconds left: the remaining points at the prior rate, scaled by measured / predicted so far."""

    def __init__(self, plan: list[tuple[str, Point]], steps: int, prior: dict[str, float], server: bool):
        self.plan, self.steps, self.prior = plan, steps, prior
        self.server_s = START_S["server"] if server else 0.0
        self.done: dict[str, list[float]] = {t: [0.0, 0.0] for t in TOOLS}  # [measured, predicted]

    def _prior(self, tool: str, p: Point) -> float:
        return START_S["run"] + self.steps * self.prior[tool] * p.work

    def predict(self, tool: str, p: Point) -> float:
        measured, predicted = self.done[tool]
        return self._prior(tool, p) * (measured / predicted if predicted else 1.0)

    def record(self, tool: str, p: Point, seconds: float) -> None:
        self.done[tool][0] += seconds
        self.done[tool][1] += self._prior(tool, p)

    def left(self, index: int) -> float:
        """Seconds for plan[index:] (and the server start while none of ours' points ran)."""
        pending_server = self.server_s if all(t != "ours" for t, _ in self.plan[:index]) else 0.0
        return pending_server + sum(self.predict(t, p) for t, p in self.plan[index:])


def worker_args(args: argparse.Namespace, vs_trl, p: Point, out: Path) -> argparse.Namespace:
    """vs_trl.py's worker flags for one point; lengths forced with --min-tokens."""
    ns = argparse.Namespace(
        model=args.model,
        steps=args.steps,
        prompts=p.rollouts // GENERATIONS,
        max_tokens=p.length,
        min_tokens=p.length,
        lr=args.lr,
        seed=args.seed,
        port=args.port,
        out=str(out),
        threads_while_generating=0,
    )
    missing = [f for f in vs_trl.WORKER_FLAGS if not hasattr(ns, f)]
    if missing:
        raise SystemExit(f"vs_trl.py has worker flags scaling.py does not set: {missing}")
    return ns


def run_point(args, vs_trl, tool: str, p: Point, server_pid: int | None) -> dict[str, Any]:
    out = Path(args.out) / f"{tool}-{p.name}"
    out.mkdir(parents=True, exist_ok=True)
    ns = worker_args(args, vs_trl, p, out)
    row: dict[str, Any] = {"tool": tool, "rollouts": p.rollouts, "length": p.length}
    t0 = time.perf_counter()
    try:
        if server_pid is None:
            result = vs_trl.spawn(tool, ns, out)
        else:
            with PeakTreeRSS(server_pid) as peak:
                result = vs_trl.spawn(tool, ns, out)
            result["server_peak_rss_bytes"] = peak.peak
            result["server_peak_pss_bytes"] = peak.peak_pss
    except SystemExit as exc:  # one failed point (e.g. out of memory) must not lose the others
        if not isinstance(exc.code, str):  # SIGTERM / exit code, not spawn's failure message: stop
            raise
        print(f"  {tool} {p.name} failed: {str(exc)[:2000]}", flush=True)
        return {**row, "error": str(exc)[-3000:], "seconds": time.perf_counter() - t0}
    result["rollouts_per_step"] = p.rollouts
    return {**row, "seconds": time.perf_counter() - t0, "run": result}


def summarize_point(row: dict[str, Any], vs_trl, machine_flops: float) -> None:
    if "run" not in row:
        return
    r = row["run"]
    s = vs_trl.summarize(r, machine_flops)
    lengths = [x for x in r["completion_len"] if x == x]  # drop NaN
    row.update(
        s_per_step=s["s_per_step"],
        completion_tokens_per_s=s["completion_tokens_per_s"],
        train_flops_share=s["train_flops_share"],
        completion_len_mean=sum(lengths) / len(lengths) if lengths else float("nan"),
        trainer_peak_rss_bytes=r["peak_rss_bytes"],
        server_peak_bytes=vs_trl.server_peak_bytes(r),  # PSS summed (vs_trl.py says why)
        server_peak_rss_sum_bytes=r.get("server_peak_rss_bytes", 0),
        peak_rss_bytes=vs_trl.total_peak_bytes(r),
        summary=s,
    )
    if lengths and row["completion_len_mean"] < 0.95 * row["length"]:
        print(
            f"  warning: mean completion length {row['completion_len_mean']:.1f} < {row['length']}",
            flush=True,
        )


# ---------------------------------------------------------------------------------------------
# Report.
# ---------------------------------------------------------------------------------------------


def lookup(rows: list[dict[str, Any]], tool: str, p: Point) -> dict[str, Any] | None:
    for r in rows:
        if r["tool"] == tool and (r["rollouts"], r["length"]) == (p.rollouts, p.length) and "s_per_step" in r:
            return r
    return None


def slopes(rows: list[dict[str, Any]], axes: dict[str, list[Point]]) -> dict[str, float]:
    out = {}
    for axis, points in axes.items():
        for tool in TOOLS:
            got = [(p, r) for p in points if (r := lookup(rows, tool, p))]
            xs = [float(p.rollouts if axis == "rollouts" else p.length) for p, _ in got]
            out[f"slope_{axis}_{tool}"] = loglog_slope(xs, [r["s_per_step"] for _, r in got])
    return out


def ratio_at_max(rows: list[dict[str, Any]], axes: dict[str, list[Point]]) -> tuple[float, Point | None]:
    """TRL s/step / ours s/step at the largest-work point both ran."""
    both = [p for p in unique(axes) if lookup(rows, "ours", p) and lookup(rows, "trl", p)]
    if not both:
        return float("nan"), None
    p = both[-1]
    return lookup(rows, "trl", p)["s_per_step"] / lookup(rows, "ours", p)["s_per_step"], p


def table(rows: list[dict[str, Any]], axes: dict[str, list[Point]]) -> str:
    head = (
        "| axis | value | ours s/step | TRL s/step | TRL/ours | ours tokens/s | TRL tokens/s | "
        "ours peak RSS (trainer + server) | TRL peak RSS |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for axis, points in axes.items():
        for p in points:
            o, t = lookup(rows, "ours", p), lookup(rows, "trl", p)
            cell = lambda r, k, f: f.format(r[k]) if r else "-"  # noqa: E731
            mem = (
                f"{o['peak_rss_bytes'] / GIB:.2f} GiB ({o['trainer_peak_rss_bytes'] / GIB:.2f} + "
                f"{o['server_peak_bytes'] / GIB:.2f})"
                if o
                else "-"
            )
            ratio = f"{t['s_per_step'] / o['s_per_step']:.2f}x" if o and t else "-"
            trl_mem = f"{t['peak_rss_bytes'] / GIB:.2f} GiB" if t else "-"
            value = p.rollouts if axis == "rollouts" else p.length
            lines.append(
                f"| {axis} | {value} | {cell(o, 's_per_step', '{:.1f}')} | {cell(t, 's_per_step', '{:.1f}')} | "
                f"{ratio} | {cell(o, 'completion_tokens_per_s', '{:.0f}')} | "
                f"{cell(t, 'completion_tokens_per_s', '{:.0f}')} | {mem} | {trl_mem} |"
            )
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], axes: dict[str, list[Point]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import LogLocator, ScalarFormatter

    fig, grid = plt.subplots(2, 2, figsize=(11, 8))
    style = {"ours": ("tab:blue", "o"), "trl": ("tab:orange", "s")}
    fits = slopes(rows, axes)
    for col, (axis, points) in enumerate(axes.items()):
        x_of = lambda p: p.rollouts if axis == "rollouts" else p.length  # noqa: B023, E731
        for tool in TOOLS:
            got = [(x_of(p), r) for p in points if (r := lookup(rows, tool, p))]
            if not got:
                continue
            xs = [x for x, _ in got]
            color, marker = style[tool]
            slope = fits[f"slope_{axis}_{tool}"]
            label = f"{'ours' if tool == 'ours' else 'TRL'}" + (
                f" (slope {slope:.2f})" if slope == slope else ""
            )
            grid[0][col].plot(xs, [r["s_per_step"] for _, r in got], marker=marker, color=color, label=label)
            mem = [r["peak_rss_bytes"] / GIB for _, r in got]
            grid[1][col].plot(
                xs,
                mem,
                marker=marker,
                color=color,
                label="ours: trainer + server" if tool == "ours" else "TRL",
            )
            if tool == "ours":
                trainer = [r["trainer_peak_rss_bytes"] / GIB for _, r in got]
                grid[1][col].plot(
                    xs, trainer, marker=marker, color=color, ls="--", alpha=0.6, label="ours: trainer"
                )
        fixed = f"{FIXED_LENGTH} tokens" if axis == "rollouts" else f"{FIXED_ROLLOUTS} rollouts"
        xlabel = "rollouts per step" if axis == "rollouts" else "completion length (tokens)"
        grid[0][col].set(
            title=f"seconds per step vs {axis} ({fixed})", xscale="log", yscale="log", ylabel="s/step"
        )
        grid[1][col].set(title=f"peak memory vs {axis} ({fixed})", xscale="log", xlabel=xlabel, ylabel="GiB")
        grid[1][col].set_ylim(bottom=0)
        for ax in (grid[0][col], grid[1][col]):
            ticks = sorted({x_of(p) for p in points})
            ax.set_xticks(ticks, [str(t) for t in ticks])
            ax.minorticks_off()
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        grid[0][col].yaxis.set_major_locator(
            LogLocator(subs=(1.0, 2.0, 3.0, 5.0))
        )  # labelled ticks on a short range
        grid[0][col].yaxis.set_major_formatter(ScalarFormatter())
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def parse_ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2")
    p.add_argument("--steps", type=int, default=2, help="optimizer steps per point (step 1 is warm-up)")
    p.add_argument(
        "--rollouts", default="16,32,64,128", help=f"ours' rollouts per step at {FIXED_LENGTH} tokens"
    )
    p.add_argument(
        "--lengths", default="32,64,128,256", help=f"ours' completion lengths at {FIXED_ROLLOUTS} rollouts"
    )
    p.add_argument("--trl-rollouts", default="16,32,64", help="TRL's rollout points (fewer: TRL is slow)")
    p.add_argument("--trl-lengths", default="32,64,128", help="TRL's length points (fewer: TRL is slow)")
    p.add_argument("--skip-trl", action="store_true", help="ours only")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--port", type=int, default=0, help="vf-vllm port (0: a free one)")
    p.add_argument(
        "--server-args",
        default="--block-size 32 --max-num-seqs 128",
        help="extra vf-vllm flags (vs_trl.py's, and room for the 128-rollout point's requests at once)",
    )
    p.add_argument(
        "--server-cpus", default="", help="pin the vf-vllm process tree to these cores (as vs_trl.py)"
    )
    p.add_argument("--out", default="outputs/benchmarks/scaling")
    args = p.parse_args()
    import vs_trl  # the worker; imported here, as it imports verifiers

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the server and workers too
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.port = args.port or free_port()
    axes = axis_points(parse_ints(args.rollouts), parse_ints(args.lengths))
    trl_axes = (
        {} if args.skip_trl else axis_points(parse_ints(args.trl_rollouts), parse_ints(args.trl_lengths))
    )
    for pt in unique(axes) + unique(trl_axes):
        if pt.rollouts % GENERATIONS:
            raise SystemExit(f"rollouts per step must be a multiple of {GENERATIONS}, got {pt.rollouts}")
    # Table, slopes and plot cover the points of either tool (--trl-* may name points ours skips).
    both = {k: sorted({*axes[k], *trl_axes.get(k, [])}, key=lambda q: (q.rollouts, q.length)) for k in axes}
    plan = [("ours", pt) for pt in unique(axes)] + [("trl", pt) for pt in unique(trl_axes)]
    prior = prior_s_per_step(Path("outputs/benchmarks/vs_trl/vs_trl.json"))
    est = Estimate(plan, args.steps, prior, server=bool(unique(axes)))
    print(
        f"plan: ours at {[pt.name for pt in unique(axes)]}, TRL at {[pt.name for pt in unique(trl_axes)]} "
        f"(r = rollouts per step, l = completion tokens), {args.steps} step(s) each; estimated "
        f"{est.left(0) / 60:.0f} min (ours {prior['ours']:.0f} s/step, TRL {prior['trl']:.0f} s/step at "
        f"64 x 64, linear in rollouts x length, + {START_S['run']:.0f} s start per run)",
        flush=True,
    )
    from verifiers.models import resolve_model_name

    # One server for every point of ours: its KV cache sized (as vs_trl.py sizes it) for the largest.
    kv = max(
        (vs_trl.kv_cache_tokens(worker_args(args, vs_trl, pt, out)) for pt in unique(axes)), default=None
    )

    machine_flops = matmul_flops()
    rows: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    warm_up = ", step 1 (warm-up) excluded" if args.steps > 1 else ""
    title = f"reverse-text, {args.model} + LoRA r8, CPU fp32, {args.steps} step(s) per point{warm_up}"

    def report(final: bool) -> dict[str, Any]:
        ratio, at = ratio_at_max(rows, both)
        data = {
            "complete": final,
            "task": "reverse-text",
            "model": args.model,
            "args": vars(args),
            "points": {
                "ours": {k: [pt.name for pt in v] for k, v in axes.items()},
                "trl": {k: [pt.name for pt in v] for k, v in trl_axes.items()},
                "fixed": {"rollouts_axis_length": FIXED_LENGTH, "length_axis_rollouts": FIXED_ROLLOUTS},
            },
            "lengths_forced": "every completion exactly `length` tokens: ours sends vLLM's min_tokens = max_tokens "
            "(in extra_body), TRL passes generation_kwargs={'min_new_tokens': length} to model.generate; both "
            "suppress EOS until then. mask_truncated_completions is off in both (every completion ends at the "
            "limit). completion_len_mean per point shows what was generated",
            "server": {
                "flags": [*SERVER_FLAGS, "--dtype", "float32", *shlex.split(args.server_args)],
                "kv_cache_tokens": kv,
                "cpus": args.server_cpus,
                "note": "one vf-vllm server for all of ours' points, its KV cache sized for the largest "
                "(vs_trl.kv_cache_tokens), so its memory is about the same at every point; stopped before TRL's; "
                "ours runs with vs_trl.spawn's default cpu_phases",
            },
            "memory": "ours: trainer's peak RSS + the server process tree's peak PSS sum (each page once) sampled while the point ran; "
            "TRL: its process's peak RSS",
            "warm_up": "step 1 is excluded from s/step and tokens/s (vs_trl.summarize)",
            "machine_fp32_matmul_flops": machine_flops,
            **slopes(rows, both),
            "slopes_note": "log-log least-squares slope of s/step against the axis value (1.0 = linear)",
            "ratio_at_max": ratio,
            "ratio_at_max_point": at.name if at else None,
            "rows": rows,
        }
        (out / "scaling.json").write_text(json.dumps(data, indent=2))
        return data

    def run_all(tool: str, server_pid: int | None) -> None:
        for i, (t, pt) in enumerate(plan):
            if t != tool:
                continue
            row = run_point(args, vs_trl, tool, pt, server_pid)
            summarize_point(row, vs_trl, machine_flops)
            rows.append(row)
            est.record(tool, pt, row["seconds"])
            rate = f"{row['s_per_step']:.1f} s/step" if "s_per_step" in row else "FAILED"
            print(
                f"[{i + 1}/{len(plan)}] {tool} {pt.rollouts} rollouts x {pt.length} tokens: {rate}, "
                f"{row['seconds']:.0f} s; elapsed {(time.perf_counter() - t_start) / 60:.1f} min, "
                f"about {est.left(i + 1) / 60:.0f} min left",
                flush=True,
            )
            report(final=False)

    if unique(axes):
        server_args = shlex.split(args.server_args)
        model_dir, log = resolve_model_name(args.model), out / "vf-vllm.log"
        with vllm_server(model_dir, args.port, log, server_args, args.server_cpus, kv_tokens=kv) as server:
            run_all("ours", server.pid)
    run_all("trl", None)  # after the server is stopped: TRL gets the whole machine
    data = report(final=True)
    print(table(rows, both))
    plot(rows, both, out / "scaling.png", title)
    print(f"wrote {out / 'scaling.json'} and {out / 'scaling.png'}", flush=True)
    fit = {
        k: data[k]
        for k in ("slope_rollouts_ours", "slope_rollouts_trl", "slope_length_ours", "slope_length_trl")
    }
    print(
        " ".join(f"{k}={v:.3f}" for k, v in fit.items()) + f" ratio_at_max={data['ratio_at_max']:.3f}",
        flush=True,
    )


if __name__ == "__main__":
    main()

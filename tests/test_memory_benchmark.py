"""benchmarks/memory.py without its workers: lengths, fit, table, closing line, JSON, the RSS meter.

The measurement itself (a fresh process per side and length, building a Qwen3-shaped model
and both trainers) takes a minute or more on this machine: only the ``slow`` test runs it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("memory_bench", ROOT / "benchmarks" / "memory.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["memory_bench"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("memory_bench", None)


def ok(peak_mib: float, **kw) -> dict:
    return {"status": "ok", "peak_bytes": int(peak_mib * MIB), "step_s": 1.0, "path": "packed", **kw}


def rows_of(ours: list, trl: list, lengths=(1024, 2048, 4096, 8192)) -> list[dict]:
    return [{"length": n, "ours": o, "trl": t} for n, o, t in zip(lengths, ours, trl, strict=True)]


CLOSING = re.compile(
    r"^peak_vs_trl_at_max=(\S+) slope_ours=(\S+) slope_trl=(\S+)( ratio_bound=(lower|upper))?$"
)


def test_lengths_are_sorted_unique_and_junk_is_refused(bench):
    assert bench.parse_lengths("4096,1024,1024, 2048") == [1024, 2048, 4096]
    for bad in ("", "0,1024", "1k", "-5"):
        with pytest.raises(argparse.ArgumentTypeError):
            bench.parse_lengths(bad)
    args = bench.parser().parse_args([])
    assert args.lengths == [1024, 2048, 4096, 8192]
    assert bench.parser().parse_args(["--lengths", "512,256"]).lengths == [256, 512]


def test_linear_fit_recovers_a_line_and_scores_a_curve_lower(bench):
    fit = bench.linear_fit([1, 2, 4, 8], [300 + 50 * x for x in (1, 2, 4, 8)])
    assert fit["slope"] == pytest.approx(50) and fit["intercept"] == pytest.approx(300)
    assert fit["r2"] == pytest.approx(1.0)
    assert fit["max_rel_residual"] == pytest.approx(0.0, abs=1e-12)
    curved = bench.linear_fit([1, 2, 4, 8], [x * x for x in (1, 2, 4, 8)])
    assert curved["max_rel_residual"] > bench.LINEAR_TOLERANCE  # quadratic growth is not called linear
    assert (
        bench.linear_fit([1], [5])["slope"] != bench.linear_fit([1], [5])["slope"]
    )  # NaN: one point fits no line


def test_ours_below_trl_everywhere_meets_the_goal_and_the_closing_line_parses(bench):
    rows = rows_of([ok(400 + 100 * k) for k in (1, 2, 4, 8)], [ok(600 + 200 * k) for k in (1, 2, 4, 8)])
    s = bench.summarize(rows)
    assert s["met"] == {"ours_at_or_below_trl": True, "ours_linear": True, "all_measured": True}
    assert s["peak_vs_trl_at_max"] == pytest.approx(1200 / 2200)
    # Slopes in MiB per 1024 tokens: the synthetic peaks grow 100 and 200 MiB per 1k.
    assert s["fits"]["ours"]["slope"] == pytest.approx(100) and s["fits"]["trl"]["slope"] == pytest.approx(
        200
    )
    m = CLOSING.match(bench.closing_line(s))
    assert m and float(m.group(1)) == pytest.approx(0.545, abs=1e-3) and m.group(4) is None
    assert float(m.group(2)) == pytest.approx(100) and float(m.group(3)) == pytest.approx(200)
    assert "NOT" not in bench.goal_line(s)


def test_a_flat_noisy_side_is_linear_and_a_quadratic_one_is_not(bench):
    # Nearly flat with a few MiB of noise: R^2 is low, but no point is off the line by 5%.
    flat = rows_of([ok(v) for v in (1474, 1504, 1499, 1554)], [ok(5000)] * 4)
    s = bench.summarize(flat)
    assert s["fits"]["ours"]["r2"] < 0.95 and s["met"]["ours_linear"]
    curved = rows_of([ok(100 * k * k) for k in (1, 2, 4, 8)], [ok(1e6)] * 4)
    s = bench.summarize(curved)
    assert not s["met"]["ours_linear"] and "ours linear in length" in bench.goal_line(s)
    assert "NOT met (worst" in bench.goal_line(s)


def test_one_length_above_trl_fails_the_goal(bench):
    rows = rows_of([ok(500), ok(700), ok(2000), ok(1500)], [ok(600), ok(800), ok(1000), ok(1800)])
    s = bench.summarize(rows)
    assert not s["met"]["ours_at_or_below_trl"]
    assert s["ratios"][2] == pytest.approx(2.0)
    assert "ours <= TRL at every length: NOT met" in bench.goal_line(s)


def test_a_side_stopped_at_the_cap_gives_a_bound_not_a_ratio(bench):
    capped = {"status": "over_cap", "peak_bytes": 16 * 1024 * MIB}
    skipped = {"status": "skipped", "over_cap_at": 4096}
    rows = rows_of([ok(500), ok(900), capped, skipped], [ok(600), ok(800), ok(1000), ok(1400)])
    s = bench.summarize(rows)
    assert s["ratio_bound"] is None and s["peak_vs_trl_at_max"] != s["peak_vs_trl_at_max"]  # NaN at 8k
    assert not s["met"]["all_measured"] and not s["met"]["ours_at_or_below_trl"]
    assert s["fits"]["ours"]["n"] == 2  # the fit uses the measured lengths only
    text = bench.table(rows)
    assert "> 16,384 MiB (stopped at the cap)" in text and "> 16.38" in text
    assert "skipped (over the cap at a shorter length)" in text
    # Stopped at the longest length itself: the ratio is a lower bound, and the line says so.
    s2 = bench.summarize(rows_of([ok(500), capped], [ok(600), ok(1000)], lengths=(1024, 2048)))
    assert s2["ratio_bound"] == "lower" and s2["peak_vs_trl_at_max"] == pytest.approx(16.384)
    assert bench.closing_line(s2).endswith(" ratio_bound=lower")


def test_table_has_a_row_per_length_with_ratio_and_failures_named(bench):
    rows = rows_of(
        [ok(512), {"status": "failed", "error": "exit code 1: boom"}],
        [ok(1024), ok(1024)],
        lengths=(256, 512),
    )
    lines = bench.table(rows).splitlines()
    assert lines[0].startswith("| completion tokens | ours peak | TRL peak | ours / TRL |")
    assert len(lines) == 4
    assert "| 256 | 512 MiB | 1,024 MiB | 0.50 | packed |" in lines[2]
    assert "failed (exit code 1: boom)" in lines[3]


def test_main_writes_json_png_and_ends_with_the_closing_line(bench, tmp_path, monkeypatch, capsys):
    peaks = {"ours": {256: 300, 512: 400}, "trl": {256: 350, 512: 600}}
    calls = []

    def fake_spawn(args, side, length):
        calls.append((side, length))
        return {**ok(peaks[side][length]), "side": side, "length": length, "wall_s": 1.0}

    monkeypatch.setattr(bench, "spawn", fake_spawn)
    monkeypatch.setattr(bench, "machine", lambda: {
        "cpu": "Test CPU", "cores": 2, "torch_threads": 2, "mem_total_gib": 8.0,
        "mem_available_gib_at_start": 6.0, "torch": "t", "transformers": "x", "trl": "y",
    })  # fmt: skip
    monkeypatch.setattr(
        bench, "trl_defaults", lambda: {"version": "y", "token_tile": 4096, "vocab_tile": 32768}
    )
    assert bench.main(["--quick", "--out", str(tmp_path), "--max-rss-gb", "4"]) == 0
    assert calls == [("ours", 256), ("trl", 256), ("ours", 512), ("trl", 512)]
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].startswith("machine: Test CPU, 2 cores")
    m = CLOSING.match(out[-1])
    assert m and float(m.group(1)) == pytest.approx(400 / 600, abs=1e-3)
    # Per 1024 tokens: +100 and +250 MiB from 256 to 512 tokens are 400 and 1000 MiB per 1k.
    assert float(m.group(2)) == pytest.approx(400) and float(m.group(3)) == pytest.approx(1000)
    report = json.loads((tmp_path / "memory.json").read_text())
    assert [r["length"] for r in report["rows"]] == [256, 512]
    assert report["met"]["ours_at_or_below_trl"] is True
    assert report["settings"]["model"]["vocab_size"] == 151_936 and report["settings"]["model"]["tied_head"]
    assert "clear_refs" in report["settings"]["memory_method"]
    assert (tmp_path / "memory.png").read_bytes()[:4] == b"\x89PNG"


def test_a_side_over_the_cap_is_not_run_at_longer_lengths(bench, tmp_path, monkeypatch, capsys):
    calls = []

    def fake_spawn(args, side, length):
        calls.append((side, length))
        if side == "ours" and length >= 2048:
            return {"status": "over_cap", "peak_bytes": 4 << 30, "wall_s": 1.0}
        return {**ok(100), "wall_s": 1.0}

    monkeypatch.setattr(bench, "spawn", fake_spawn)
    monkeypatch.setattr(bench, "machine", lambda: {k: 0 for k in (
        "cpu", "cores", "torch_threads", "mem_total_gib", "mem_available_gib_at_start", "torch", "transformers", "trl")})  # fmt: skip
    monkeypatch.setattr(bench, "trl_defaults", lambda: {})
    bench.main(["--lengths", "1024,2048,4096", "--out", str(tmp_path), "--max-rss-gb", "4"])
    assert ("ours", 4096) not in calls and ("trl", 4096) in calls
    report = json.loads((tmp_path / "memory.json").read_text())
    assert report["rows"][2]["ours"] == {"status": "skipped", "over_cap_at": 2048}


def test_dry_run_prints_every_worker_command_and_runs_none(bench, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(bench, "spawn", lambda *a: pytest.fail("the dry run started a worker"))
    assert bench.main(["--dry-run", "--device", "cuda", "--out", str(tmp_path), "--max-rss-gb", "4"]) == 0
    out = capsys.readouterr().out
    commands = [line for line in out.splitlines() if "--worker" in line]
    assert len(commands) == 8 and all("--device cuda" in c for c in commands)
    assert "max_memory_allocated" in out


def test_worker_env_pins_the_mmap_threshold_on_cpu_only(bench, monkeypatch):
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert bench.worker_env("cpu")["MALLOC_MMAP_THRESHOLD_"] == "65536"
    assert "MALLOC_MMAP_THRESHOLD_" not in bench.worker_env("cuda")


def test_rss_meter_sees_memory_touched_inside_it_and_not_before(bench):
    before = b"a" * (32 * MIB)  # resident before: part of the baseline, not of the peak
    with bench.RSSMeter(cap_bytes=1 << 40, on_cap=lambda _: pytest.fail("cap")) as meter:
        block = b"x" * (64 * MIB)  # every page written
        del block
    assert 60 * MIB <= meter.peak_bytes < 200 * MIB, meter.peak_bytes / MIB
    assert meter.sampled_peak - meter.baseline <= meter.peak_bytes
    del before


def test_rss_meter_calls_the_guard_past_the_cap(bench):
    seen = []
    with bench.RSSMeter(cap_bytes=1, on_cap=seen.append):  # any process is over 1 byte
        import time

        time.sleep(0.05)
    assert seen and all(v >= 0 for v in seen)


def _spawn_args(tmp_path):
    return argparse.Namespace(out=str(tmp_path), worker_timeout=30, device="cpu")


def test_spawn_reports_a_failed_worker_in_one_line(bench, tmp_path, monkeypatch):
    script = "import sys; print('loading'); print('RuntimeError: boom'); sys.exit(1)"
    monkeypatch.setattr(bench, "worker_command", lambda *a: [sys.executable, "-c", script])
    r = bench.spawn(_spawn_args(tmp_path), "ours", 256)
    assert r["status"] == "failed" and r["error"].startswith("exit code 1: RuntimeError: boom; see ")


def test_spawn_reads_the_result_a_worker_stopped_at_the_cap_wrote(bench, tmp_path, monkeypatch):
    result = tmp_path / "trl-256.json"
    script = (
        f"import json, sys; open({str(result)!r}, 'w').write(json.dumps("
        f"{{'status': 'over_cap', 'peak_bytes': 5}})); sys.exit({bench.OVER_CAP_RC})"
    )
    monkeypatch.setattr(bench, "worker_command", lambda *a: [sys.executable, "-c", script])
    r = bench.spawn(_spawn_args(tmp_path), "trl", 256)
    assert r["status"] == "over_cap" and r["peak_bytes"] == 5


@pytest.mark.slow
def test_one_tiny_measurement_end_to_end(bench, tmp_path):
    """Both real workers at 32 tokens on a one-layer model: both measured, peaks above zero."""
    import subprocess

    cmd = [sys.executable, str(ROOT / "benchmarks" / "memory.py"), "--lengths", "32,64", "--hidden", "64"]
    cmd += ["--layers", "1", "--heads", "2", "--out", str(tmp_path)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert CLOSING.match(done.stdout.strip().splitlines()[-1])
    report = json.loads((tmp_path / "memory.json").read_text())
    for row in report["rows"]:
        for side in ("ours", "trl"):
            assert row[side]["status"] == "ok" and row[side]["peak_bytes"] > 0, row[side]

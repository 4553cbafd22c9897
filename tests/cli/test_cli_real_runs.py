"""vf-vllm and vf-train as users start them, against a real server (tiny model, CPU).

* vf-vllm with no memory flag at all starts on these shared machines: on CPU it
  sizes its KV cache from ``--max-num-seqs`` × ``--max-model-len`` and says so in
  one line, instead of vLLM's 92% of a memory node (which fails to start when
  other processes hold memory).
* ``[trainer.args] resume_from_checkpoint = true`` makes ``vf-train`` continue from
  the last complete checkpoint: the step count goes on from there.

One server serves both (a start costs ~30 s on 2 cores). The default tier runs the first;
the resume (two vf-train runs) and vf-rl's own-server run are ``slow``.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm")
pytest.importorskip("torch")

from tests.doubles.configs import REAL_RUN_CONFIG as CONFIG  # noqa: E402
from tests.doubles.vllm_server import CPU_FLAGS, VLLM_CACHE_ROOT, Server  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MEMORY_FLAGS = ("--kv-cache-memory-bytes", "--gpu-memory-utilization")


@pytest.fixture(scope="module")
def plain_server(tiny_model_dir, tmp_path_factory):
    """vf-vllm on the tiny model without any KV-cache or memory flag (the fixture's own size removed)."""
    server = Server(
        tiny_model_dir, tmp_path_factory.mktemp("vf-vllm-plain"), "--max-num-seqs", "16", "--seed", "0"
    )
    i = server.cmd.index("--kv-cache-memory-bytes")
    del server.cmd[i : i + 2]
    assert not set(server.cmd) & set(MEMORY_FLAGS) and "--enforce-eager" in CPU_FLAGS
    server.env.pop("VLLM_CPU_KVCACHE_SPACE", None)  # vLLM's legacy size variable: none either
    server.start()
    try:
        server.wait_ready(240)
        yield server
    finally:
        server.stop()


@pytest.mark.server
def test_vf_vllm_without_memory_flags_sizes_its_cache_for_its_sequences(plain_server):
    lines = [line for line in plain_server.tail(200_000).splitlines() if "vf-vllm: KV cache" in line]
    assert len(lines) == 1, plain_server.tail()
    # 16 sequences × 512 tokens (--max-model-len of the fixture), tiny model: 2 layers × 2 KV heads × 32.
    assert "for 8192 tokens (16 sequences × 512 tokens" in lines[0], lines[0]
    with contextlib.closing(plain_server.client()) as client:
        out = client.sync_openai.completions.create(
            model=client.health()["model"], prompt="Hello", max_tokens=4, temperature=1.0
        )
    assert out.choices[0].text is not None


def vf_train(cfg: Path, *overrides: str) -> str:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "environments" / "reverse_text")]),
    }
    out = subprocess.run(
        [sys.executable, "-m", "verifiers.cli.train", "@", str(cfg), *overrides],
        cwd=cfg.parent, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-4000:]
    return text


@pytest.mark.server
@pytest.mark.slow  # two vf-train runs; test_trainer resumes against a real server in the default tier
def test_vf_train_resume_from_checkpoint_continues_the_step_count(plain_server, tiny_model_dir, tmp_path):
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(CONFIG.format(model=tiny_model_dir, port=plain_server.port))
    first = vf_train(cfg)
    assert "Step 1/2:" in first and "Step 2/2:" in first, first[-3000:]
    run = tmp_path / "outputs" / "resume-e2e"
    assert (run / "checkpoint-2" / "trainer_state.json").is_file()

    second = vf_train(cfg, "--trainer.args.max_steps", "3", "--trainer.args.resume_from_checkpoint", "true")
    assert "Step 3/3:" in second, second[-3000:]
    assert "Step 1/3:" not in second and "Step 2/3:" not in second, second[-3000:]  # resumed, not restarted
    state = json.loads((run / "checkpoint-3" / "trainer_state.json").read_text())
    assert state["global_step"] == 3


@pytest.mark.server
@pytest.mark.slow
def test_vf_rl_plain_cpu_config_starts_its_server_and_trains(tiny_model_dir, tmp_path, short_tmp):
    """A guide-style TOML (``[inference] gpus = 0``, no memory flags): vf-rl sizes the cache for the run."""
    from tests.doubles.vllm_server import free_port

    cfg = tmp_path / "cfg.toml"
    text = CONFIG.format(model=tiny_model_dir, port=free_port())
    text = text.replace(
        "[trainer]\n", '[inference.args]\nenforce_eager = true\ndtype = "float32"\n\n[trainer]\n'
    )
    cfg.write_text(text.replace("max_steps = 2", "max_steps = 1"))
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "VLLM_CACHE_ROOT": VLLM_CACHE_ROOT,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "environments" / "reverse_text")]),
    }
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)
    env["TMPDIR"] = str(short_tmp)  # the run's own temp dir, to see what the run leaves there
    out = subprocess.run(
        [sys.executable, "-m", "verifiers.cli.rl.plan", "@", str(cfg), "--no-tmux"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-4000:]
    # vLLM's engine sockets and rendezvous file went with the server; nothing else stayed but
    # torch's inductor cache (its default place: one folder that the next run reuses).
    left = sorted(p.name for p in short_tmp.iterdir() if p.name != f"torchinductor_{getpass.getuser()}")
    assert left == [], left
    # 8 rollouts a step × max_seq_len 256, raised to one sequence of the tiny model's length (2048) + a block.
    assert "--kv-cache-tokens 2048" in text and "Step 1/1:" in text, text[-4000:]
    log = (tmp_path / "outputs" / "resume-e2e" / "logs" / "inference.log").read_text()
    assert "for 2304 tokens (--kv-cache-tokens 2048, 1.0 KiB per token; raised to one" in log, log[-3000:]

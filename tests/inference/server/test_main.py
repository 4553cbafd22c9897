"""vf-vllm's command line (verifiers/inference/server/main.py): defaults, retired flags dropped with a
warning, the CPU KV cache sized for the run unless the user sizes it, and verifiers' tool template
served unless told otherwise. Tier 1 (argument parsing, no server started)."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")

from tests.doubles.chat_templates import TOOLS_TEMPLATE  # noqa: E402
from verifiers.errors import ConfigError  # noqa: E402
from verifiers.tokenization.chat_template import is_tool_template, wrap_chat_template  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_template_override")  # tests/conftest.py


def test_cli_defaults_and_retired_flags(capsys):
    from verifiers.inference.server.main import EXTENSION, drop_retired_flags, parse_args

    argv = [
        "--model",
        "m",
        "--disable-log-requests",
        "--swap-space",
        "4",
        "--multi-step-stream-outputs",
        "false",
    ]
    kept, warnings = drop_retired_flags(argv, known=set())
    assert kept == ["--model", "m"] and len(warnings) == 3
    assert all(w.count("\n") == 0 and "retired" in w for w in warnings)
    assert drop_retired_flags(["--disable-log-requests"], known={"--disable-log-requests"})[0] == [
        "--disable-log-requests"
    ]  # a flag vLLM knows again passes through

    args, settings = parse_args(["m", "--disable-log-requests", "--guided-decoding-backend=xgrammar"])
    err = capsys.readouterr().err
    assert "--disable-log-requests" in err and "--guided-decoding-backend" in err
    assert args.model == "m" and args.host == "127.0.0.1" and settings.loopback
    assert args.worker_extension_cls == EXTENSION and settings.admin_token is None
    assert args.logprobs_mode == "processed_logprobs"  # the temperature-scaled policy the trainer scores
    assert args.enable_chunked_prefill is False  # CPU: seeded requests fail with chunked prompts
    args, _ = parse_args(["m", "--logprobs-mode", "raw_logprobs", "--enable-chunked-prefill"])
    assert args.logprobs_mode == "raw_logprobs" and args.enable_chunked_prefill is True
    args, settings = parse_args(["--model", "m", "--host", "0.0.0.0", "--admin-token", "t"])
    assert not settings.loopback and settings.admin_token == "t"


def test_cli_sizes_the_cpu_kv_cache_unless_the_user_does(tiny_model_dir, capsys, monkeypatch):
    """On CPU: no memory flag -> --max-num-seqs × --max-model-len; any user size (or the env var) stands."""
    from verifiers.inference.server.main import parse_args

    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    base = ["--model", str(tiny_model_dir), "--max-model-len", "512", "--dtype", "float32"]
    args, _ = parse_args([*base, "--max-num-seqs", "8"])
    per_token = 2 * 2 * 2 * 32 * 4  # K and V × 2 layers × 2 KV heads × head size 32 × fp32
    assert args.kv_cache_memory_bytes == 8 * 512 * per_token
    line = [x for x in capsys.readouterr().err.splitlines() if "KV cache" in x]
    assert line == [
        "vf-vllm: KV cache 4.0 MiB for 4096 tokens (8 sequences × 512 tokens, 1.0 KiB per token); "
        "--kv-cache-memory-bytes or --gpu-memory-utilization set it yourself"
    ]
    args, _ = parse_args([*base, "--kv-cache-tokens", "10000"])
    assert args.kv_cache_memory_bytes == 10240 * per_token  # whole 256-token granules
    assert "(--kv-cache-tokens 10000, 1.0 KiB per token)" in capsys.readouterr().err
    for own in (["--gpu-memory-utilization", "0.5"], ["--kv-cache-memory-bytes", "1000000"]):
        args, _ = parse_args([*base, *own])
        assert args.kv_cache_memory_bytes in (None, 1000000)
    assert "KV cache" not in capsys.readouterr().err
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    assert parse_args(base)[0].kv_cache_memory_bytes is None  # vLLM's legacy variable decides


def test_vf_vllm_serves_the_fallback_unless_told_otherwise(tiny_model_dir, tmp_path, capsys):
    pytest.importorskip("vllm")
    from verifiers.inference.server.main import parse_args

    base = ["--model", str(tiny_model_dir), "--max-model-len", "512", "--kv-cache-memory-bytes", "1000000"]
    args, settings = parse_args(base)
    lines = [x for x in capsys.readouterr().err.splitlines() if "tool template" in x]
    assert len(lines) == 1 and "ignores tools" in lines[0] and "--no-tool-template" in lines[0]
    assert args.enable_auto_tool_choice and args.tool_call_parser == "hermes"
    assert settings.tool_template == args.chat_template and is_tool_template(open(args.chat_template).read())

    args, settings = parse_args([*base, "--no-tool-template"])
    assert args.chat_template is None and not args.enable_auto_tool_choice and settings.tool_template is None

    mine = tmp_path / "mine.jinja"
    mine.write_text(TOOLS_TEMPLATE)
    args, settings = parse_args([*base, "--chat-template", str(mine)])
    assert (
        args.chat_template == str(mine) and args.tool_call_parser is None and settings.tool_template is None
    )
    ours = tmp_path / "ours.jinja"  # a file written by `python -m verifiers.tokenization.chat_template`
    ours.write_text(wrap_chat_template(TOOLS_TEMPLATE))
    args, _ = parse_args([*base, "--chat-template", str(ours)])
    assert (
        args.chat_template == str(ours) and args.tool_call_parser == "hermes" and args.enable_auto_tool_choice
    )

    with pytest.raises(ConfigError, match="--tool-call-parser mistral"):
        parse_args([*base, "--enable-auto-tool-choice", "--tool-call-parser", "mistral"])
    assert "tool template" not in capsys.readouterr().err

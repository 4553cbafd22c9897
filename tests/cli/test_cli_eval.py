"""vf-eval end to end against the local fake OpenAI server, its error contract, and the display tables."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import REVERSE_TEXT_DIR
from tests.doubles.openai_server import fake_server, reverse_text_reply, unused_url
from verifiers.cli import eval as vf_eval
from verifiers.types import GenerateOutputs
from verifiers.utils.display import print_prompt_completions_sample, print_results_table

pytestmark = pytest.mark.usefixtures("fresh_log_handler")
ROOT = REVERSE_TEXT_DIR.parents[1]


def max_tokens(body: dict) -> int | None:
    """The token limit of a request (environments may send either spelling)."""
    return body.get("max_completion_tokens", body.get("max_tokens"))


@pytest.fixture
def server():
    with fake_server(reply=reverse_text_reply) as srv:
        yield srv


def assert_one_error(capsys, rc: int, *fragments: str) -> str:
    """The CLI error contract: exit 2, exactly one `error:` line, no traceback; return that line."""
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


# -- end to end ------------------------------------------------------------------


def test_eval_saves_results_and_prints_table(workdir, server, capsys):
    rc = vf_eval.main(
        [
            "reverse-text",
            "-b",
            server.url,
            "-m",
            "fake-model",
            "-n",
            "3",
            "-r",
            "2",
            "-s",
            "-t",
            "512",
            "-T",
            "0.5",
        ]
        + ["-a", '{"num_eval_examples": 5}']
    )
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "reward" in out and "lcs_reward" in out and "format_reward_func" in out
    assert "Sample rollout" in out and "1.200" in out  # perfect answers: 1.0 + 0.2 format
    saved = Path(out.strip().splitlines()[-1].removeprefix("saved results to "))
    assert saved.parent == Path("outputs/evals/reverse-text--fake-model")
    assert sorted(p.name for p in saved.iterdir()) == ["metadata.json", "results.jsonl"]
    assert not [p for p in saved.parent.iterdir() if p.name.startswith(".tmp")]

    rows = [json.loads(line) for line in (saved / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 6
    for row in rows:
        assert {"prompt", "completion", "answer", "task", "info", "reward", "lcs_reward"} <= row.keys()
        assert row["reward"] == pytest.approx(1.2) and row["error"] is None
        assert row["completion"][-1]["role"] == "assistant"
    meta = json.loads((saved / "metadata.json").read_text())
    assert meta["env"] == "reverse-text" and meta["model"] == "fake-model" and meta["base_url"] == server.url
    assert meta["env_args"] == {"num_eval_examples": 5}
    assert meta["sampling_args"] == {"max_tokens": 512, "temperature": 0.5}
    assert meta["num_rollouts"] == 6 and meta["avg_reward"] == pytest.approx(1.2)
    assert meta["avg_metrics"]["lcs_reward"] == pytest.approx(1.0)
    assert meta["time_taken_s"] >= 0 and meta["date"]

    chat = [body for path, body in server.requests if path.endswith("/chat/completions")]
    assert len(chat) == 6
    assert all(b["model"] == "fake-model" and max_tokens(b) == 512 and b["temperature"] == 0.5 for b in chat)


def test_sampling_json_wins_over_flags(workdir, server, capsys):
    rc = vf_eval.main(
        ["reverse-text", "-b", server.url, "-n", "1", "-r", "1", "-t", "10", "-S", '{"max_tokens": 99}']
    )
    assert rc == 0, capsys.readouterr().err
    body = [b for p, b in server.requests if p.endswith("/chat/completions")][0]
    assert max_tokens(body) == 99


@pytest.mark.parametrize("suffix", [".py", ".toml", ".json"])
def test_endpoint_alias_selects_model_url_and_key(workdir, server, capsys, monkeypatch, suffix):
    monkeypatch.setenv("FAKE_KEY_VAR", "secret-123")
    entry = {"model": "served-model", "url": server.url, "key": "FAKE_KEY_VAR"}
    path = workdir / f"endpoints{suffix}"
    if suffix == ".py":
        path.write_text(f"ENDPOINTS = {{'small': {entry!r}}}\n")
    elif suffix == ".toml":
        path.write_text(f'[small]\nmodel = "served-model"\nurl = "{server.url}"\nkey = "FAKE_KEY_VAR"\n')
    else:
        path.write_text(json.dumps({"small": entry}))
    rc = vf_eval.main(["reverse-text", "-m", "small", "-e", str(path), "-n", "1", "-r", "1"])
    assert rc == 0, capsys.readouterr().err
    assert "served-model" in capsys.readouterr().out
    body = [b for p, b in server.requests if p.endswith("/chat/completions")][0]
    assert body["model"] == "served-model"


@pytest.mark.parametrize("suffix", [".json", ".py"])
def test_guides_endpoint_format_with_a_default_entry(workdir, server, capsys, suffix):
    """``{"default": {"base_url": ..., "api_key": ...}}``: any -m goes there, with that key."""
    entries = {"default": {"base_url": server.url, "api_key": "sk-guide"}, "alias": {"base_url": server.url}}
    path = workdir / f"endpoints{suffix}"
    path.write_text(json.dumps(entries) if suffix == ".json" else f"ENDPOINTS = {entries!r}\n")
    rc = vf_eval.main(["reverse-text", "-m", "my-served-model", "-e", str(path), "-n", "1", "-r", "1"])
    assert rc == 0, capsys.readouterr().err
    assert [b["model"] for p, b in server.requests if p.endswith("/chat/completions")] == ["my-served-model"]
    rc = vf_eval.main(["reverse-text", "-m", "alias", "-e", str(path), "-n", "1", "-r", "1"])
    assert rc == 0, capsys.readouterr().err
    assert server.requests[-1][1]["model"] == "alias"  # model defaults to the alias


def test_endpoint_resolution_rules(workdir, monkeypatch):
    from verifiers.cli.common import DEFAULT_MODEL, Endpoint, resolve_endpoint

    path = workdir / "endpoints.json"
    path.write_text(
        json.dumps(
            {
                "default": {"base_url": "http://127.0.0.1:9/v1/", "api_key": "sk-default", "model": "served"},
                "remote": {"model": "big", "url": "https://api.example.com/v1", "key": "REMOTE_KEY"},
            }
        )
    )
    e = str(path)
    assert resolve_endpoint(None, None, None, e) == Endpoint(
        "served", "http://127.0.0.1:9/v1", "OPENAI_API_KEY", "sk-default"
    )
    assert resolve_endpoint("other", None, None, e).model == "other"  # -m wins over the default's model
    assert resolve_endpoint("remote", None, None, e) == Endpoint(
        "big", "https://api.example.com/v1", "REMOTE_KEY"
    )
    explicit = resolve_endpoint("other", "http://127.0.0.1:7/v1", "MY_VAR", e)  # -b and -k win over the file
    assert explicit == Endpoint("other", "http://127.0.0.1:7/v1", "MY_VAR", None)
    plain = resolve_endpoint(None, None, None, None)  # no file: 0.1.x defaults
    assert plain == Endpoint(DEFAULT_MODEL, "https://api.openai.com/v1", "OPENAI_API_KEY")


def test_hub_style_env_id_is_saved_under_its_plain_name(workdir, server, capsys):
    rc = vf_eval.main(["primeintellect/reverse-text", "-b", server.url, "-n", "1", "-r", "1", "-s"])
    assert rc == 0, capsys.readouterr().err
    runs = list((workdir / "outputs" / "evals").glob("*/*/metadata.json"))
    assert len(runs) == 1 and runs[0].parent.parent.name.startswith("reverse-text--"), runs
    assert json.loads(runs[0].read_text())["env"] == "primeintellect/reverse-text"


def test_default_endpoints_file_is_used_when_present(workdir, server, capsys):
    (workdir / "configs").mkdir()
    (workdir / "configs" / "endpoints.py").write_text(
        f"ENDPOINTS = {{'local': {{'model': 'm-local', 'url': '{server.url}', 'key': 'UNSET_KEY_VAR_Q'}}}}\n"
    )
    assert vf_eval.main(["reverse-text", "-m", "local", "-n", "1", "-r", "1"]) == 0, capsys.readouterr().err


def test_subprocess_run_and_error(tmp_path, server):
    """One real process: the console entry point's exit status and output streams."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(REVERSE_TEXT_DIR)])}
    env.pop("OPENAI_API_KEY", None)
    cmd = [
        sys.executable,
        "-m",
        "verifiers.cli.eval",
        "reverse-text",
        "-b",
        server.url,
        "-n",
        "2",
        "-r",
        "1",
        "-s",
    ]
    ok = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert ok.returncode == 0, ok.stderr
    assert "lcs_reward" in ok.stdout and "saved results to" in ok.stdout
    assert list((tmp_path / "outputs" / "evals").glob("reverse-text--*/*/results.jsonl"))

    bad = subprocess.run(
        cmd + ["-a", "{nope"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180
    )
    assert bad.returncode == 2
    assert [line for line in bad.stderr.splitlines() if line.strip()] == [bad.stderr.strip()]
    assert bad.stderr.startswith("error: -a/--env-args is not valid JSON") and "Traceback" not in bad.stderr


# -- bad input: one line, exit 2 -----------------------------------------------------


def test_invalid_env_args_json(workdir, server, capsys):
    rc = vf_eval.main(["reverse-text", "-b", server.url, "-a", '{"num_eval_examples": 5,}'])
    line = assert_one_error(capsys, rc, "-a/--env-args is not valid JSON", "line 1 column 25")
    assert ">>>}" in line  # marks where the parser stopped


def test_sampling_args_must_be_an_object(workdir, server, capsys):
    assert_one_error(
        capsys, vf_eval.main(["reverse-text", "-b", server.url, "-S", "[1, 2]"]), "-S/--sampling-args"
    )


def test_unknown_env_id(workdir, server, capsys):
    rc = vf_eval.main(["no-such-env-q", "-b", server.url])
    assert_one_error(capsys, rc, "no-such-env-q", "vf-init")


def test_unknown_env_arg_lists_accepted(workdir, server, capsys):
    rc = vf_eval.main(["reverse-text", "-b", server.url, "-a", '{"num_examples": 3}'])
    assert_one_error(capsys, rc, "num_examples", "accepted: num_train_examples, num_eval_examples")


def test_unreachable_endpoint_names_the_url(workdir, capsys):
    url = unused_url()
    assert_one_error(capsys, vf_eval.main(["reverse-text", "-b", url, "-n", "1", "-r", "1"]), url)


def test_missing_api_key_for_remote_url(workdir, capsys):
    rc = vf_eval.main(["reverse-text", "-b", "https://api.example.invalid/v1", "-k", "MY_MISSING_KEY_VAR"])
    assert_one_error(capsys, rc, "MY_MISSING_KEY_VAR")


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("ENDPOINTS = {'a': {'model': 'm', 'key': 'K'}}\n", "lacks url"),
        ("ENDPOINTS = {'a': {'model': 'm', 'url': 'http://x', 'token': 'v'}}\n", "unknown key(s) token"),
        (
            "ENDPOINTS = {'a': {'model': 'm', 'url': 'http://x', 'key': 'K', 'api_key': 'v'}}\n",
            "sets both key and api_key",
        ),
        ("ENDPOINTS = {'a': {'url': 'http://x', 'base_url': 'http://y'}}\n", "sets both url and base_url"),
        ("ENDPOINTS = {'a': {'url': 'http://x', 'api_key': ''}}\n", "api_key must be non-empty strings"),
        ("ENDPOINTS = [1]\n", "must be a mapping"),
        ("ENDPOINT = {}\n", "defines no ENDPOINTS"),
        ("ENDPOINTS = {\n", "SyntaxError"),
    ],
)
def test_bad_endpoints_file(workdir, capsys, content, fragment):
    path = workdir / "endpoints.py"
    path.write_text(content)
    assert_one_error(capsys, vf_eval.main(["reverse-text", "-e", str(path), "-m", "a"]), str(path), fragment)


def test_missing_endpoints_file(workdir, capsys):
    assert_one_error(capsys, vf_eval.main(["reverse-text", "-e", "nope/endpoints.py"]), "nope/endpoints.py")


@pytest.mark.parametrize(
    "argv",
    [
        ["reverse-text", "-n", "abc"],
        ["reverse-text", "-n", "0"],
        ["reverse-text", "-r", "0"],
        ["reverse-text", "-b", "ftp://x"],
        [],
    ],
)
def test_bad_flags(workdir, capsys, argv):
    assert_one_error(capsys, vf_eval.main(argv))


@pytest.mark.parametrize(
    "flags, fragment",
    [
        (["-t", "0"], "-t/--max-tokens must be at least 1, got 0"),
        (["-T", "-0.5"], "-T/--temperature must be a finite number >= 0, got -0.5"),
        (["-T", "nan"], "-T/--temperature must be a finite number >= 0, got nan"),
        (["-c", "-2"], "-c/--max-concurrent must be positive or -1"),
        (["-n", "-3"], "-n/--num-examples must be positive or -1"),
    ],
)
def test_numbers_out_of_range_are_refused_naming_the_flag(workdir, server, capsys, flags, fragment):
    # A reachable server: the flag itself must be the error, before any request.
    assert_one_error(capsys, vf_eval.main(["reverse-text", "-b", server.url, *flags]), fragment)
    assert not server.requests


def test_every_rollout_failing_is_an_error(workdir, capsys):
    with fake_server(reply=lambda req: {"status": 404, "error": "model 'nope' does not exist"}) as srv:
        rc = vf_eval.main(["reverse-text", "-b", srv.url, "-m", "nope", "-n", "2", "-r", "1", "-s"])
    assert_one_error(capsys, rc, "all 2 rollouts failed")
    assert not Path("outputs").exists()


# -- display -------------------------------------------------------------------------


def _results(n: int = 4) -> GenerateOutputs:
    prompt = [{"role": "system", "content": "Reverse it."}, {"role": "user", "content": "hello world"}]
    return GenerateOutputs(
        prompt=[prompt] * n,
        completion=[[{"role": "assistant", "content": "<reversed_text>dlrow olleh</reversed_text>"}]] * n,
        answer=["dlrow olleh"] * n,
        state=[{}] * n,
        info=[{}] * n,
        task=["default"] * n,
        reward=[1.0, 0.5, 0.0, 0.5][:n],
        metrics={
            "lcs_reward": [1.0, 0.5, 0.0, 0.5][:n],
            "a_very_long_metric_name_that_keeps_going": [0.0] * n,
        },
    )


def _console(width: int = 80):
    from rich.console import Console

    return Console(width=width, record=True, force_terminal=False, color_system=None)


def test_results_table_shows_stats_and_a_sample():
    console = _console()
    print_results_table(_results(), env_id="reverse-text", model="m", rollouts_per_example=2, console=console)
    text = console.export_text()
    assert "reverse-text" in text and "lcs_reward" in text
    assert "0.500" in text  # mean reward
    assert "0.354" in text  # population std of [1, .5, 0, .5]
    assert "hello world" in text and "dlrow olleh" in text and "r2: [0.50, 0.50]" in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_prompt_completions_sample_fits_80_columns():
    console = _console()
    r = _results(2)
    print_prompt_completions_sample(r.prompt, r.completion, r.reward, step=7, num_samples=2, console=console)
    text = console.export_text()
    assert "Step 7" in text and "hello world" in text and "1.000" in text
    assert max(len(line) for line in text.splitlines()) <= 80
    console = _console()
    print_prompt_completions_sample(
        ["plain prompt"], ["plain answer"], {"lcs": [0.25], "fmt": [1.0]}, 1, console=console
    )
    text = console.export_text()
    assert "lcs: 0.250" in text and "plain answer" in text


def test_sample_print_defaults_to_stdout(capsys):
    print_prompt_completions_sample(["p"], ["c"], [0.5], step=0)
    assert "0.500" in capsys.readouterr().out


def test_interrupted_save_leaves_no_partial_results(tmp_path, monkeypatch):
    calls = {"n": 0}
    real_dumps = json.dumps

    def failing_dumps(obj, **kw):
        calls["n"] += 1
        if calls["n"] == 2:  # die after the first row was written
            raise KeyboardInterrupt
        return real_dumps(obj, **kw)

    monkeypatch.setattr(vf_eval.json, "dumps", failing_dumps)
    with pytest.raises(KeyboardInterrupt):
        vf_eval.save_results(_results(), {"env": "x"}, "x", "org/model", root=tmp_path)
    assert list((tmp_path / "x--org--model").iterdir()) == []
    monkeypatch.setattr(vf_eval.json, "dumps", real_dumps)
    saved = vf_eval.save_results(_results(), {"env": "x"}, "x", "org/model", root=tmp_path)
    assert saved.parent == tmp_path / "x--org--model"
    assert len((saved / "results.jsonl").read_text().splitlines()) == 4

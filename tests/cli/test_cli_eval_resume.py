"""vf-eval options of upstream 0.1.10-0.1.12: resumed runs, pass@k, --max-total-tokens."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest
from datasets import Dataset

from tests.cli.conftest import REVERSE_TEXT_DIR
from tests.doubles.openai_server import fake_server, reverse_text_reply
from verifiers.cli import eval as vf_eval
from verifiers.envs.multiturn import MultiTurnEnv
from verifiers.envs.results import pass_at_k, pass_at_k_summary, pass_k_values
from verifiers.errors import ConfigError
from verifiers.rubrics.rubric import Rubric

pytestmark = pytest.mark.usefixtures("fresh_log_handler")
ROOT = REVERSE_TEXT_DIR.parents[1]


def chat_requests(server) -> list[dict]:
    return [body for path, body in server.requests if path.endswith("/chat/completions")]


def run_dirs() -> list[Path]:
    parent = Path("outputs/evals/reverse-text--fake-model")
    return sorted(p for p in parent.iterdir() if p.is_dir()) if parent.is_dir() else []


def saved_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "results.jsonl").read_text().splitlines() if line.strip()]


def finished_row_count(path: Path) -> int:
    """Rows a running (or killed) vf-eval has finished writing: its folder comes before its
    ``results.jsonl``, and its last line may be half written."""
    try:
        text = (path / "results.jsonl").read_text()
    except FileNotFoundError:
        return 0
    return sum(1 for line in text.split("\n")[:-1] if line.strip())


ARGS = ["reverse-text", "-m", "fake-model", "-n", "3", "-r", "2", "-c", "1", "-a", '{"num_eval_examples": 5}']


# -- pass@k: pure arithmetic -----------------------------------------------------------


def test_pass_at_k_hand_worked():
    # n=4 rollouts, c=1 correct: pass@2 = 1 - C(3,2)/C(4,2) = 1 - 3/6; pass^2 = C(1,2)/6 = 0.
    assert pass_at_k(4, 1, 2) == pytest.approx((0.5, 0.0))
    # c=2: pass@2 = 1 - C(2,2)/6 = 5/6; pass^2 = C(2,2)/6 = 1/6. pass@1 is c/n.
    assert pass_at_k(4, 2, 2) == pytest.approx((5 / 6, 1 / 6))
    assert pass_at_k(4, 3, 1) == pytest.approx((0.75, 0.75))
    assert pass_at_k(4, 0, 4) == (0.0, 0.0) and pass_at_k(4, 4, 4) == (1.0, 1.0)
    assert pass_k_values(1) == [] and pass_k_values(5) == [1, 2, 4] and pass_k_values(8) == [1, 2, 4, 8]
    with pytest.raises(ConfigError, match="n=2, c=0, k=3"):
        pass_at_k(2, 0, 3)


def test_pass_at_k_summary_averages_complete_examples():
    # ex0: 1 of 4 correct; ex1: 3 of 4 (0.6 >= 0.5, 0.2 is not); ex2 has 1 rollout only: left out.
    rewards = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.6, 0.2, 1.0]
    ids = [0, 0, 0, 0, 1, 1, 1, 1, 2]
    at, every = pass_at_k_summary(rewards, ids, 4)
    # pass@1 = (1/4 + 3/4)/2; pass@2 = (1/2 + 1)/2 (ex1: C(1,2) = 0); pass@4 = 1.
    assert at == pytest.approx({"1": 0.5, "2": 0.75, "4": 1.0})
    # pass^2 = (0 + C(3,2)/6)/2 = 0.25; pass^4 = 0.
    assert every == pytest.approx({"1": 0.5, "2": 0.25, "4": 0.0})
    # a higher threshold makes 0.6 wrong too: ex1 has 2 of 4.
    at, _ = pass_at_k_summary(rewards, ids, 4, threshold=0.9)
    assert at["2"] == pytest.approx((0.5 + 5 / 6) / 2)
    assert pass_at_k_summary([1.0], [0], 1) == ({}, {})


# -- resumed runs ------------------------------------------------------------------------


def test_interrupted_run_resumes_from_its_saved_rollouts(workdir, capsys, monkeypatch):
    real_append = vf_eval.EvalRun.append
    calls = {"n": 0}

    def append_then_stop(self, rows):
        calls["n"] += 1
        if calls["n"] == 2:  # Ctrl-C after the first example's group was saved
            # A real SIGINT, as a terminal sends it: asyncio.run cancels its main task, then raises
            # KeyboardInterrupt. (Raised here, inside a task, it left that task's exception
            # unretrieved: "Task exception was never retrieved" at teardown, which Ctrl-C never does.)
            os.kill(os.getpid(), signal.SIGINT)
            return
        real_append(self, rows)

    monkeypatch.setattr(vf_eval.EvalRun, "append", append_then_stop)
    # Python's own SIGINT handler, as in a terminal: a background job (`cmd &` in a script, as CI may
    # run the suite) starts with SIGINT ignored, and the signal above would then be lost.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with fake_server(reply=reverse_text_reply) as first:
            rc = vf_eval.main([*ARGS, "-b", first.url, "-s"])
    finally:
        signal.signal(signal.SIGINT, previous)
    err = capsys.readouterr().err
    assert rc != 0 and "-R outputs/evals/reverse-text--fake-model/" in err
    [path] = run_dirs()
    assert len(saved_rows(path)) == 2
    assert json.loads((path / "metadata.json").read_text())["complete"] is False

    monkeypatch.setattr(vf_eval.EvalRun, "append", real_append)
    with fake_server(reply=reverse_text_reply) as second:
        rc = vf_eval.main([*ARGS, "-b", second.url, "-R"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "2 of 6 rollouts already saved" in err
    # only the 2 missing examples' 4 rollouts were asked for, and they are the right prompts
    asked = chat_requests(second)
    assert len(asked) == 4
    assert run_dirs() == [path]  # the same folder, no second run
    rows = saved_rows(path)
    keys = [(r["example_id"], r["rollout_index"]) for r in rows]
    assert sorted(keys) == [(e, j) for e in range(3) for j in range(2)]  # complete, no duplicates
    first_prompts = {json.dumps(r["prompt"]) for r in rows if r["example_id"] == 0}
    assert not first_prompts & {json.dumps(b["messages"]) for b in asked}
    meta = json.loads((path / "metadata.json").read_text())
    assert meta["complete"] is True and meta["num_rollouts"] == 6 and meta["resumed_rollouts"] == 2
    assert meta["env_id"] == "reverse-text" and meta["rollouts_per_example"] == 2
    assert meta["pass_at_k"] == {"1": 1.0, "2": 1.0} and meta["pass_threshold"] == 0.5
    assert "pass@1=1.000, pass@2=1.000" in out

    # a finished run is not picked up again: -R alone starts a new run
    with fake_server(reply=reverse_text_reply) as third:
        assert vf_eval.main([*ARGS, "-b", third.url, "-R"]) == 0
    assert len(run_dirs()) == 2 and len(chat_requests(third)) == 6


def test_resume_drops_a_half_written_last_line_and_grows_n(workdir, capsys):
    with fake_server(reply=reverse_text_reply) as server:
        assert vf_eval.main([*ARGS, "-b", server.url, "-s", "-n", "2"]) == 0
    [path] = run_dirs()
    lines = (path / "results.jsonl").read_text().splitlines()
    # the run died while writing the last row, and an earlier example was never saved
    kept = [line for line in lines if json.loads(line)["example_id"] == 1]
    (path / "results.jsonl").write_text("\n".join(kept) + '\n{"prompt": [{"ro')
    capsys.readouterr()
    with fake_server(reply=reverse_text_reply) as server:
        rc = vf_eval.main([*ARGS, "-b", server.url, "-R", str(path), "-n", "3"])
        assert len(chat_requests(server)) == 4  # example 0 again, and the new example 2
    assert rc == 0, capsys.readouterr().err
    keys = sorted((r["example_id"], r["rollout_index"]) for r in saved_rows(path))
    assert keys == [(e, j) for e in range(3) for j in range(2)]


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["-r", "3"], "it was run with rollouts_per_example=2, this command has 3"),
        (["-m", "other-model"], "it was run with model='fake-model', this command has 'other-model'"),
        (["-n", "1"], "it covers num_examples=3, this command 1"),
    ],
)
def test_resume_refuses_a_run_with_other_settings(workdir, capsys, extra, fragment):
    with fake_server(reply=reverse_text_reply) as server:
        assert vf_eval.main([*ARGS, "-b", server.url, "-s"]) == 0
        [path] = run_dirs()
        capsys.readouterr()
        rc = vf_eval.main([*ARGS, "-b", server.url, "-R", str(path), *extra])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    [line] = [line for line in err.splitlines() if "error:" in line]
    assert fragment in line


def test_resume_path_that_is_not_a_run_is_refused(workdir, capsys):
    with fake_server(reply=reverse_text_reply) as server:
        rc = vf_eval.main([*ARGS, "-b", server.url, "-R", "nowhere"])
        assert not chat_requests(server)
    err = capsys.readouterr().err
    assert rc == 2 and "-R/--resume nowhere: not a saved run" in err


@pytest.mark.parametrize(
    "flags, fragment",
    [
        (["--max-total-tokens", "1"], "--max-total-tokens must be at least 2"),
        (["--max-total-tokens", "100", "-t", "100"], "-t/--max-tokens=100 must be < --max-total-tokens=100"),
    ],
)
def test_bad_max_total_tokens_is_refused(workdir, capsys, flags, fragment):
    with fake_server(reply=reverse_text_reply) as server:
        rc = vf_eval.main([*ARGS, "-b", server.url, *flags])
        assert not server.requests
    err = capsys.readouterr().err
    assert rc == 2 and fragment in err


# -- --max-total-tokens -------------------------------------------------------------------


class Chatty(MultiTurnEnv):
    """Never done by itself: answers every turn with 'more'."""

    async def env_response(self, messages, state, **kwargs):
        return [{"role": "user", "content": "more"}], state


def test_max_total_tokens_ends_the_rollout_at_the_cap(tmp_path):
    # fake server: one token per byte; each reply is 'abcdefgh' + <|end|>.
    env = Chatty(
        dataset=Dataset.from_dict({"question": ["q"], "answer": ["a"]}),
        rubric=Rubric(funcs=[lambda completion, **kw: 1.0]),
        max_turns=50,
    )
    with fake_server(reply=lambda req: "abcdefgh") as server:
        out = env.generate(
            {"prompt": [[{"role": "user", "content": "q"}]]},
            server.client(),
            "fake-model",
            sampling_args={"max_total_tokens": 120, "max_tokens": 30},
        )
        bodies = chat_requests(server)
    state = out.state[0]
    assert all("max_total_tokens" not in json.dumps(b) for b in bodies)  # never sent to the server
    totals = [len(t.prompt_ids) + len(t.completion_ids) for t in state["turn_tokens"]]
    assert state["is_truncated"] is True and state["turn"] < 50
    assert totals[-1] >= 120 > totals[-2]  # it stopped at the first call that reached the cap
    # each later turn asked for at most what was left after the previous call
    for prev, body in zip(totals, bodies[1:], strict=False):
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        assert limit == min(30, 120 - prev)


def test_killed_process_resumes_without_duplicates(workdir, capsys):
    """A real vf-eval process killed (SIGKILL) midway: -R finishes the run, nothing run twice."""
    import os
    import signal
    import subprocess
    import time

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(REVERSE_TEXT_DIR)])}
    env.pop("OPENAI_API_KEY", None)
    argv = ["reverse-text", "-m", "fake-model", "-n", "4", "-r", "2", "-c", "2"]
    argv += ["-a", '{"num_eval_examples": 5}']
    with fake_server(reply=reverse_text_reply, delay=0.4) as slow:
        proc = subprocess.Popen(
            [sys.executable, "-m", "verifiers.cli.eval", *argv, "-b", slow.url, "-s"],
            cwd=workdir,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and proc.poll() is None:
                dirs = run_dirs()
                if dirs and finished_row_count(dirs[0]) >= 2:
                    break
                time.sleep(0.05)
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.wait(timeout=30)
    [path] = run_dirs()
    before = finished_row_count(path)  # a half-written last line is dropped by -R and run again
    assert 2 <= before < 8 and json.loads((path / "metadata.json").read_text())["complete"] is False

    with fake_server(reply=reverse_text_reply) as server:
        assert vf_eval.main([*argv, "-b", server.url, "-R"]) == 0, capsys.readouterr().err
        assert len(chat_requests(server)) == 8 - before
    keys = [(r["example_id"], r["rollout_index"]) for r in saved_rows(path)]
    assert keys == [(e, j) for e in range(4) for j in range(2)]  # complete, ordered, no duplicates

"""What of the inference server's lines vf-rl's shared terminal shows (cli/rl/echo.py)."""

from __future__ import annotations

from pathlib import Path

from verifiers.cli.rl.echo import ServerEcho

LOG = Path("outputs/rt/logs/inference.log")
# Lines as vLLM 0.32 and uvicorn wrote them in the README's demo (2026-11-29), pids and times kept.
ACCESS = 'INFO:     127.0.0.1:50412 - "POST /v1/chat/completions HTTP/1.1" 200 OK'
DTYPE = (
    "(Worker pid=3852) WARNING 11-29 14:25:37 [utils.py:333] Attempted to load weight "
    "layers.{}.mlp.down_proj.weight with dtype torch.float32 into parameter with dtype torch.bfloat16"
)
ERROR = "(APIServer pid=3819) ERROR 11-29 14:29:09 [async_llm.py:906] AsyncLLM output_handler failed."
OURS = "14:25:53 INFO verifiers.inference.server: weight update 18dbb78a (v1) committed"


def shown(echo: ServerEcho, lines: list[str]) -> list[str]:
    return [out for line in lines for out in echo.lines(line)]


def test_request_lines_are_left_out_with_one_note_naming_the_log():
    out = shown(ServerEcho(LOG), [ACCESS, ACCESS, "ready"])
    assert len(out) == 2 and out[1] == "ready"
    assert str(LOG) in out[0] and "request" in out[0]


def test_a_failed_request_stays():
    bad = ACCESS.replace("200 OK", "500 Internal Server Error")
    assert shown(ServerEcho(LOG), [bad, ACCESS.replace("200 OK", "404 Not Found")])[0] == bad


def test_each_vllm_call_site_is_shown_once():
    echo = ServerEcho(LOG)
    out = shown(echo, [DTYPE.format(i) for i in range(30)])
    assert out[0] == DTYPE.format(0)
    assert len(out) == 2  # the first, then the note; the other 29 only in the log
    other = "(EngineCore pid=3840) INFO 11-29 14:25:29 [core.py:133] Initializing a V1 LLM engine"
    assert echo.lines(other) == [other]


def test_errors_and_lines_in_other_formats_always_stay():
    echo = ServerEcho(LOG)
    traceback = "Traceback (most recent call last):"
    lines = [ERROR, ERROR, OURS, OURS, traceback, traceback]
    assert shown(echo, lines) == lines


def test_nothing_once_vf_rl_stops_the_server_until_a_new_one_starts():
    echo = ServerEcho(LOG)
    assert echo.lines(OURS) == [OURS]
    echo.stopping = True
    out = shown(echo, [ERROR, "Traceback (most recent call last):", OURS])
    assert len(out) == 1 and str(LOG) in out[0]  # the note, once
    echo.started()
    assert echo.lines(ERROR) == [ERROR]

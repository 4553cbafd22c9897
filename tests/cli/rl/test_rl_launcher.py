"""vf-rl's supervision (cli/rl/launcher.py) with fake server and trainer processes, tmux mode included."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.doubles.configs import RL_CONFIG as CONFIG  # noqa: E402 (the same config as the dry runs)
from tests.doubles.rl_processes import FAKE_SERVER, fake_server, fake_trainer, gone, make_plan, on_a_terminal  # noqa: E402
from tests.doubles.vllm_server import free_port  # noqa: E402
from verifiers.cli.rl import launcher as rl_launcher  # noqa: E402
from verifiers.cli.rl import plan as rl_cli  # noqa: E402
from verifiers.errors import ServerError, ServerTimeoutError  # noqa: E402
from verifiers.utils import process_tree  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_process")  # tests/cli/conftest.py


def test_launcher_runs_server_then_trainer_and_stops_the_server(tmp_path, capsys):
    port = free_port()
    trainer = fake_trainer("print('Step 1/1: reward=1.000'); print('bye')")
    plan = make_plan(tmp_path, fake_server(tmp_path, port, delay=0.5), trainer, port=port)
    assert rl_cli.Launcher(plan).run() == 0
    out = capsys.readouterr().out
    assert "[inference] fake server ready" in out
    assert "Inference server ready after" in out
    assert "[trainer] Step 1/1: reward=1.000" in out
    assert "Training finished; outputs in outputs/rt/" in out
    assert out.index("Inference server ready") < out.index("Starting the trainer")
    assert "Step 1/1: reward=1.000\nbye\n" == plan.trainer.log.read_text()
    assert "fake server ready" in plan.server.log.read_text()
    assert plan.server.proc.poll() is not None and gone(plan.server.proc)


CHATTY = textwrap.dedent(
    """
    import signal, sys
    for i in range(5):
        print(f'INFO:     127.0.0.1:{50000 + i} - "POST /v1/chat/completions HTTP/1.1" 200 OK', flush=True)
        print(f"(Worker pid=9) WARNING 11-29 14:25:37 [utils.py:333] Attempted to load weight layers.{i}", flush=True)

    def shutdown(*_):
        print("(APIServer pid=8) ERROR 11-29 14:29:09 [async_llm.py:906] AsyncLLM output_handler failed.", flush=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, shutdown)
    """
)


def test_the_terminal_shows_the_servers_repeats_once_and_no_requests_or_shutdown(tmp_path, capsys):
    port = free_port()
    server = [sys.executable, "-c", CHATTY + FAKE_SERVER, str(port), "0", "60"]
    trainer = fake_trainer("import time; time.sleep(1); print('Step 1/1: reward=1.000')")
    plan = make_plan(tmp_path, server, trainer, port=port)
    assert rl_cli.Launcher(plan).run() == 0
    out = capsys.readouterr().out
    assert "[inference] fake server ready" in out and "[trainer] Step 1/1: reward=1.000" in out
    out = "\n".join(line for line in out.splitlines() if line.startswith("[inference]"))  # not the command
    assert out.count("Attempted to load weight") == 1 and "layers.0" in out
    assert "POST /v1/chat/completions" not in out and "output_handler failed" not in out
    assert out.count(f"every line is in {plan.server.log}") == 1
    log = plan.server.log.read_text()  # the file keeps every line
    assert log.count("POST /v1/chat/completions") == 5 and log.count("Attempted to load weight") == 5
    assert "output_handler failed" in log


def test_launcher_exit_status_follows_a_failed_trainer(tmp_path, capsys):
    port = free_port()
    trainer = fake_trainer("import sys; print('crash'); sys.exit(3)")
    plan = make_plan(tmp_path, fake_server(tmp_path, port), trainer, port=port)
    assert rl_cli.Launcher(plan).run() == 3
    err = capsys.readouterr().err
    assert f"error: training failed with exit status 3 (full log: {plan.trainer.log})" in err
    assert gone(plan.server.proc)


def test_server_that_dies_before_ready_is_reported_with_its_log(tmp_path, capsys):
    server = fake_trainer("import sys; print('CUDA out of memory'); sys.exit(4)")
    plan = make_plan(tmp_path, server, fake_trainer("print('never')"))
    launcher = rl_cli.Launcher(plan)
    launcher.echo = False  # as in tmux mode: the last lines are printed with the error
    with pytest.raises(ServerError, match="exited with status 4 before it was ready"):
        launcher.run()
    assert plan.trainer.proc is None
    assert "[inference] CUDA out of memory" in capsys.readouterr().err


def test_server_readiness_has_one_total_timeout(tmp_path):
    port = free_port()
    plan = make_plan(
        tmp_path, fake_server(tmp_path, port, delay=30), fake_trainer("pass"), timeout=1.0, port=port
    )
    started = time.monotonic()
    with pytest.raises(ServerTimeoutError, match="not ready within 1 s"):
        rl_cli.Launcher(plan).run()
    assert time.monotonic() - started < 15
    assert gone(plan.server.proc)


def test_server_dying_during_training_stops_the_trainer(tmp_path):
    port = free_port()
    server = fake_server(tmp_path, port, lifetime=2.0)
    # restarts off (inference.max_restarts = 0): restarts are tested in test_rl_supervision.py
    plan = make_plan(tmp_path, server, fake_trainer("import time; time.sleep(60)"), port=port, max_restarts=0)
    with pytest.raises(ServerError, match="exited with status 7 during training"):
        rl_cli.Launcher(plan).run()
    assert gone(plan.trainer.proc)


def test_stop_ends_the_whole_process_group():
    proc = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60"], start_new_session=True)
    time.sleep(0.3)
    rl_launcher.stop(proc, grace=5)
    assert proc.poll() is not None and gone(proc)
    stubborn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(60)",
        ],
        start_new_session=True,
        stdout=subprocess.PIPE,
    )
    stubborn.stdout.readline()  # SIGTERM is ignored from here on
    rl_launcher.stop(stubborn, grace=0.5)
    assert stubborn.returncode == -signal.SIGKILL
    rl_launcher.stop(None)


# As torch's elastic agent (accelerate launch, 2+ processes) starts its ranks: each with
# start_new_session=True, so outside the launcher's process group. The rank ignores SIGTERM (one
# that is stopped, or deadlocked, acts on nothing) and says its pid.
AGENT = (
    "import subprocess, sys, time; "
    "rank = subprocess.Popen([sys.executable, '-c', "
    "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)'], "
    "start_new_session=True); print(rank.pid, flush=True); time.sleep(120)"
)


def start_agent():
    agent = subprocess.Popen([sys.executable, "-c", AGENT], start_new_session=True, stdout=subprocess.PIPE)
    rank = int(agent.stdout.readline())
    assert os.getpgid(rank) != agent.pid  # a group kill alone misses it
    return agent, rank


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("how", ["kill", "stop"])
def test_a_rank_in_a_session_of_its_own_ends_with_the_trainer(how):
    """A SIGKILL of the trainer's group (a hung or stopped rank) ended accelerate's agent and left its
    ranks running: the stopped one was continued later and trained beside the restarted trainer."""
    agent, rank = start_agent()
    try:
        os.kill(rank, signal.SIGSTOP)  # a stopped rank, as the watch finds it
        if how == "kill":
            rl_launcher._kill_group(agent, wait=5)
        else:
            rl_launcher.stop(agent, grace=0.5)
        deadline = time.monotonic() + 5
        while process_tree.running({rank}):  # a zombie (killed, not yet reaped by init) has ended
            assert time.monotonic() < deadline, "the rank outlived its trainer"
            time.sleep(0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(rank, signal.SIGKILL)
        agent.kill()
        agent.wait()


TMUX_CHILD = """
import sys
from pathlib import Path
import tests.doubles.rl_processes as T
from verifiers.cli.rl import plan as rl_cli
tmp, port, code = Path(sys.argv[1]), T.free_port(), sys.argv[2]
plan = T.make_plan(tmp, T.fake_server(tmp, port), T.fake_trainer(code), port=port)
rc = rl_cli.Launcher(plan, use_tmux=True).run()
print("RESULT", rc, T.gone(plan.server.proc), T.gone(plan.trainer.proc), flush=True)
"""


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_tmux_mode_shows_panes_and_stops_everything(tmp_path):
    """On a terminal (a pty here), the logs go to tmux panes; the result is the same as interleaved."""
    code = "import sys, time\nfor i in range(3):\n    print(f'Step {i + 1}/3', flush=True); time.sleep(0.5)\nsys.exit(5)\n"
    text = on_a_terminal([sys.executable, "-c", TMUX_CHILD, str(tmp_path), code])
    assert "RESULT 5 True True" in text, text[-2000:]
    assert "error: training failed with exit status 5" in text
    assert "[trainer] Step 3/3" in text  # the failed side's last lines, once tmux is gone
    assert (tmp_path / "logs" / "vf-rl.log").read_text().startswith("Starting the inference server")


RANK_SCRIPT = "import os\nprint('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'], flush=True)\n"


def test_a_multi_process_trainer_launch_leaves_nothing_in_the_temp_dir(tmp_path, short_tmp):
    """vf-rl's own ``accelerate launch`` prefix, run for real (2 CPU processes): torch's elastic agent
    makes no ``torchelastic_*`` folder. The same launch without ``--log_dir`` leaves one, so the
    check would see it."""
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(CONFIG)
    argv = ["@", str(cfg), "--inference.gpus", "2", "--trainer.gpus", "2"]
    cli = rl_cli.parse_command_line(argv, "vf-rl", rl_cli.FLAGS, rl_cli.DESCRIPTION)
    trainer = rl_cli.build_plan(rl_cli.load_config(cli.configs, cli.overrides), cli, gpu_ids=None).trainer
    launch = trainer.cmd[: trainer.cmd.index("verifiers.cli.train") - 1]  # up to `-m verifiers.cli.train`
    assert launch[1:3] == ["-m", "accelerate.commands.launch"], launch
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    cpu = {"CUDA_VISIBLE_DEVICES": "", "ACCELERATE_USE_CPU": "1"}  # `--multi_gpu` on CPU, as DDP tests run
    env = {**os.environ, **trainer.env, **cpu, "TMPDIR": str(short_tmp)}
    port = ["--main_process_port", str(free_port())]

    def run(cmd: list[str]) -> list[str]:
        proc = subprocess.run([*cmd[:3], *port, *cmd[3:], str(script)], env=env, capture_output=True, text=True,
                              timeout=180)  # fmt: skip
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0 and "rank 1 of 2" in out, out[-3000:]
        return sorted(p.name for p in short_tmp.iterdir())

    assert run(launch) == []
    i = launch.index("--log_dir")
    assert [name.split("_")[0] for name in run(launch[:i] + launch[i + 2 :])] == ["torchelastic"]


# -- the server's port: free before the start, and answered by the server vf-rl started ---------

FOREIGN_HEALTH = textwrap.dedent(
    """
    import http.server, sys
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # answers like a ready server: /health, /vf/health, /v1/models
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"status": "ready"}')
        def log_message(self, *args):
            pass
    server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    print("listening", flush=True)
    server.serve_forever()
    """
)


@pytest.fixture
def foreign_http(tmp_path):
    """Another process's HTTP server answering every path with 200, on a free port."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", FOREIGN_HEALTH, str(port)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "listening"
    yield port
    proc.terminate()
    proc.wait(timeout=10)


def marker_server(tmp_path) -> tuple[list[str], Path]:
    """A server command that only leaves a file behind (to see whether it was started) and waits."""
    marker = tmp_path / "server-started"
    return [
        sys.executable,
        "-c",
        f"import pathlib, time; pathlib.Path({str(marker)!r}).touch(); time.sleep(60)",
    ], marker


def test_port_held_by_a_plain_listener_is_refused_before_the_server_starts(tmp_path, capsys):
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        cmd, marker = marker_server(tmp_path)
        plan = make_plan(tmp_path, cmd, fake_trainer("print('never')"), port=port)
        with pytest.raises(ServerError) as info:
            rl_cli.Launcher(plan).run()
    line = str(info.value)
    assert line.startswith(f"inference port {port} on 127.0.0.1 is already in use by another process")
    assert f"--inference.port {port + 1}" in line and "\n" not in line
    assert not marker.exists() and plan.server.proc is None and plan.trainer.proc is None


def test_port_held_by_another_http_server_is_refused(tmp_path, foreign_http):
    cmd, marker = marker_server(tmp_path)
    plan = make_plan(tmp_path, cmd, fake_trainer("print('never')"), port=foreign_http)
    with pytest.raises(ServerError, match=f"inference port {foreign_http} on 127.0.0.1 is already in use"):
        rl_cli.Launcher(plan).run()
    assert not marker.exists() and plan.trainer.proc is None


def test_readiness_never_takes_another_server_for_its_own(tmp_path, foreign_http, monkeypatch):
    """A server that took the port after the check (a race), answering /health with 200: the
    readiness wait sees its listener is not in the started server's session and refuses."""
    monkeypatch.setattr(rl_launcher, "check_port_free", lambda host, port: None)
    cmd, _ = marker_server(tmp_path)
    plan = make_plan(tmp_path, cmd, fake_trainer("print('never')"), port=foreign_http, timeout=20)
    with pytest.raises(ServerError) as info:
        rl_cli.Launcher(plan).run()
    assert str(info.value).startswith(
        f"port {foreign_http} answers /health, but not from the inference server vf-rl started"
    )
    assert plan.server.proc is not None and plan.trainer.proc is None  # ours ran; the trainer never did
    assert gone(plan.server.proc)


def test_listener_ownership_follows_the_server_session(tmp_path):
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert not rl_launcher.listener_is_foreign(port, os.getsid(0))  # this session's listener
        other = subprocess.Popen(["sleep", "30"], start_new_session=True)
        try:
            assert rl_launcher.listener_is_foreign(port, other.pid)
        finally:
            other.kill()
            other.wait()
    assert not rl_launcher.listener_is_foreign(port, os.getsid(0))  # nobody listens: nothing foreign


def test_the_first_error_skips_what_was_logged_as_handled(tmp_path):
    """A killed process's failure line names its error, never one it logged as a warning and
    recovered from (a retried request) before something else killed it."""
    log = tmp_path / "trainer.log"
    log.write_text(
        "INFO 11-29 10:00:01 [client.py:40] no answer yet: ConnectionError: connection refused\n"
        "2026-11-29 10:00:02 WARNING verifiers: retrying after ReadTimeout: timed out (1/5)\n"
        "step 3 done\n"
    )
    assert rl_launcher.first_error(log) == ""
    with log.open("a") as f:
        f.write("(EngineCore pid=7) ERROR 11-29 10:00:09 [core.py:9] RuntimeError: CPU out of memory\n")
        f.write("Traceback (most recent call last):\nValueError: bad shape\n")
    assert rl_launcher.first_error(log) == ": RuntimeError: CPU out of memory"
    log.write_text("Traceback (most recent call last):\n  ...\nValueError: bad shape\n")
    assert rl_launcher.first_error(log) == ": ValueError: bad shape"

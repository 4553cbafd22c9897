"""vf-rl restarts a dead inference server, gives up cleanly, and stops in two steps on Ctrl-C/SIGTERM.

Small local doubles: a fake server that crashes on cue (one lifetime per start) and fake
trainers that follow the shutdown contract (the first signal "saves a checkpoint" and exits
128 + signal; a second one exits at once). The real run, a vLLM server killed mid-training,
is the last test (server + slow).
"""

from __future__ import annotations

import json
import os
import re
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

from tests.doubles.real_rl_run import start_real_run, step_lines  # noqa: E402
from tests.doubles.rl_processes import FAKE_SERVER, ROOT, gone, make_plan, on_a_terminal, wait_for  # noqa: E402
from tests.doubles.vllm_server import free_port  # noqa: E402
from verifiers.cli.rl.launcher import DRAIN_LINE, Launcher  # noqa: E402
from verifiers.errors import ServerError  # noqa: E402

pytestmark = pytest.mark.usefixtures(
    "one_process", "quick_restarts"
)  # tests/cli/conftest.py, tests/cli/rl/conftest.py


# Start k (1, 2, ...) is test_rl_launcher's fake server living lifetimes[k-1] seconds, then
# crashing with status 7; a negative lifetime crashes before it is ready (status 4). Each
# start appends its argv and $VF_FAKE to the state file.
FLAKY_SERVER = (
    textwrap.dedent(
        """
    import json, os, sys
    port, state, lifetimes = sys.argv[1], sys.argv[2], [float(x) for x in sys.argv[3].split(",")]
    with open(state, "a") as f:
        f.write(json.dumps([sys.argv, os.environ.get("VF_FAKE")]) + "\\n")
    start = sum(1 for _ in open(state))
    lifetime = lifetimes[min(start, len(lifetimes)) - 1]
    if lifetime < 0:
        print("ValueError: cannot start this time", flush=True)
        sys.exit(4)
    sys.argv = [sys.argv[0], port, "0", str(lifetime)]
    """
    )
    + FAKE_SERVER
)

# Steps every 0.1 s until `steps` are done (exit 0), or, given a file and a text, until a line
# of the file starts with the text (vf-rl's log also shows this very command); the first
# SIGINT/SIGTERM "saves a checkpoint" for `save_s` seconds and exits 128 + signal; a second
# one exits at once.
CONTRACT_TRAINER = textwrap.dedent(
    """
    import os, signal, sys, time
    steps, save_s = int(sys.argv[1]), float(sys.argv[2])
    until = sys.argv[3:5]
    got = []

    def seen():
        try:
            return any(line.startswith(until[1]) for line in open(until[0]))
        except OSError:
            return False

    def on_signal(signum, frame):
        if got:
            print("second signal: exiting at once", flush=True)
            os._exit(128 + signum)
        got.append(signum)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    print("trainer running", flush=True)
    for step in range(1, steps + 1):
        if got or (until and seen()):
            break
        print(f"Step {step}/{steps}", flush=True)
        time.sleep(0.1)
    if not got:
        sys.exit(0)
    name = signal.Signals(got[0]).name
    print(f"saving checkpoint after {name}", flush=True)
    time.sleep(save_s)
    print(f"Stopped by {name}; checkpoint saved", flush=True)
    sys.exit(128 + got[0])
    """
)


def flaky_server(tmp_path: Path, port: int, lifetimes: str) -> list[str]:
    script = tmp_path / "flaky_server.py"
    script.write_text(FLAKY_SERVER)
    return [sys.executable, str(script), str(port), str(tmp_path / "starts.jsonl"), lifetimes]


def contract_trainer(
    tmp_path: Path, steps: int = 1000, save_s: float = 1.5, until: tuple[Path, str] | None = None
) -> list[str]:
    script = tmp_path / "contract_trainer.py"
    script.write_text(CONTRACT_TRAINER)
    return [sys.executable, str(script), str(steps), str(save_s), *(map(str, until) if until else ())]


def starts(tmp_path: Path) -> list[list]:
    return [json.loads(line) for line in (tmp_path / "starts.jsonl").read_text().splitlines()]


def status_lines(tmp_path: Path) -> str:
    return (tmp_path / "logs" / "vf-rl.log").read_text()


# -- restarts ---------------------------------------------------------------------------------


def test_a_dead_server_is_restarted_with_the_same_command_and_env(tmp_path):
    port = free_port()
    # The trainer trains until vf-rl says the server is back (at most 100 s), not for a fixed
    # 4 s: on a loaded machine the restarted server could take longer than that to be ready.
    trainer = contract_trainer(
        tmp_path, until=(tmp_path / "logs" / "vf-rl.log", "Inference server ready again")
    )
    plan = make_plan(tmp_path, flaky_server(tmp_path, port, "2.5,60"), trainer, port=port)
    plan.server.env["VF_FAKE"] = "same env"
    assert Launcher(plan).run() == 0
    first, second = starts(tmp_path)
    assert first == second and first[1] == "same env"  # same argv, same environment
    log = status_lines(tmp_path)
    line = re.search(
        r"Inference server exited with status 7 at \d\d:\d\d:\d\d; restarting it \(1/3\) in 0.2 s: (.*)", log
    )
    assert line and line.group(1) == "RuntimeError: fake server exits", log
    assert "Inference server ready again after" in log and "Training finished" in log
    assert gone(plan.server.proc)


def test_restarts_are_bounded_then_the_trainer_checkpoints_and_the_run_ends(tmp_path, capsys):
    port = free_port()
    trainer = contract_trainer(tmp_path)
    plan = make_plan(tmp_path, flaky_server(tmp_path, port, "2.5"), trainer, port=port, max_restarts=2)
    started = time.monotonic()
    with pytest.raises(ServerError) as err:
        Launcher(plan).run()
    assert time.monotonic() - started < 30
    message = str(err.value)
    assert re.match(
        r"the inference server exited with status 7 during training at \d\d:\d\d:\d\d: RuntimeError: "
        r"fake server exits; not restarting it \(restarted 2 time\(s\) already, inference.max_restarts = 2\)",
        message,
    ), message
    assert len(starts(tmp_path)) == 3  # the first start and 2 restarts
    log = status_lines(tmp_path)
    assert "restarting it (1/2)" in log and "restarting it (2/2)" in log and "(3/2)" not in log
    assert "stopping the trainer (it saves a checkpoint first)" in log
    # SIGTERM reached the trainer, which finished its checkpoint before vf-rl ended
    assert plan.trainer.proc.returncode == 128 + signal.SIGTERM
    assert "Stopped by SIGTERM; checkpoint saved" in plan.trainer.log.read_text()
    assert gone(plan.trainer.proc) and gone(plan.server.proc)


def test_a_restart_that_dies_before_ready_ends_the_run(tmp_path):
    port = free_port()
    plan = make_plan(tmp_path, flaky_server(tmp_path, port, "2.5,-1"), contract_trainer(tmp_path), port=port)
    with pytest.raises(
        ServerError,
        match=r"restart 1/3 failed: the inference server exited with status 4 "
        r"before it was ready: ValueError: cannot start this time",
    ):
        Launcher(plan).run()
    assert plan.trainer.proc.returncode == 128 + signal.SIGTERM


def test_max_restarts_0_ends_the_run_at_the_first_crash(tmp_path):
    port = free_port()
    plan = make_plan(
        tmp_path,
        flaky_server(tmp_path, port, "2.5,60"),
        contract_trainer(tmp_path),
        port=port,
        max_restarts=0,
    )
    with pytest.raises(
        ServerError, match=r"not restarting it \(restarts are off, inference.max_restarts = 0\)"
    ):
        Launcher(plan).run()
    assert len(starts(tmp_path)) == 1 and plan.trainer.proc.returncode == 128 + signal.SIGTERM


# -- Ctrl-C and SIGTERM -----------------------------------------------------------------------

LAUNCHER_CHILD = """
import sys
from pathlib import Path
import tests.cli.rl.test_rl_supervision as T
from tests.doubles.rl_processes import make_plan
from verifiers.cli.rl import launcher as rl_launcher
from verifiers.cli.common import run_cli
tmp, port, save_s, tmux = Path(sys.argv[1]), T.free_port(), float(sys.argv[2]), sys.argv[3] == "tmux"
plan = make_plan(tmp, T.flaky_server(tmp, port, "600"), T.contract_trainer(tmp, save_s=save_s), port=port)
launcher = rl_launcher.Launcher(plan, use_tmux=tmux)
rc = run_cli(lambda argv: launcher.run())
print("RESULT", rc, T.gone(plan.server.proc), T.gone(plan.trainer.proc), flush=True)
sys.exit(rc)
"""


def trainer_running(tmp_path: Path) -> bool:
    log = tmp_path / "logs" / "trainer.log"
    return log.exists() and "Step 3/" in log.read_text()


def launch_child(tmp_path: Path, save_s: float) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", LAUNCHER_CHILD, str(tmp_path), str(save_s), "plain"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_first_signal_lets_the_trainer_checkpoint_then_stops_with_130_or_143(tmp_path, sig):
    child = launch_child(tmp_path, save_s=2.0)
    wait_for(lambda: trainer_running(tmp_path))
    child.send_signal(sig)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 128 + sig, out
    assert f"RESULT {128 + sig} True True" in out
    name = signal.Signals(sig).name
    trainer_log = (tmp_path / "logs" / "trainer.log").read_text()
    assert f"saving checkpoint after {name}" in trainer_log  # the trainer got the same signal
    assert f"Stopped by {name}; checkpoint saved" in trainer_log  # and vf-rl waited for it
    log = status_lines(tmp_path)
    assert DRAIN_LINE in log and f"Trainer stopped after {name} (exit status {128 + sig})" in log
    assert "second signal" not in trainer_log and "restarting" not in log


def test_second_signal_stops_everything_at_once(tmp_path):
    child = launch_child(tmp_path, save_s=120.0)  # a checkpoint that would take minutes
    wait_for(lambda: trainer_running(tmp_path))
    child.send_signal(signal.SIGINT)
    wait_for(lambda: "saving checkpoint" in (tmp_path / "logs" / "trainer.log").read_text())
    time.sleep(1.2)  # the contract: a trainer ignores a repeat within ~1 s
    started = time.monotonic()
    child.send_signal(signal.SIGTERM)
    out, _ = child.communicate(timeout=60)
    assert time.monotonic() - started < 15
    assert child.returncode == 143 and "RESULT 143 True True" in out, out
    assert "error: stopped by SIGTERM" in out
    assert "second signal: exiting at once" in (tmp_path / "logs" / "trainer.log").read_text()


def test_a_signal_before_training_stops_at_once(tmp_path):
    port = free_port()
    code = f"""
import sys
from pathlib import Path
import tests.cli.rl.test_rl_supervision as T
from tests.doubles.rl_processes import make_plan, fake_server
from verifiers.cli.rl import launcher as rl_launcher
from verifiers.cli.common import run_cli
tmp = Path(sys.argv[1])
plan = make_plan(tmp, fake_server(tmp, {port}, delay=60), T.contract_trainer(tmp), port={port})
rc = run_cli(lambda argv: rl_launcher.Launcher(plan).run())
print("RESULT", rc, plan.trainer.proc is None, T.gone(plan.server.proc), flush=True)
sys.exit(rc)
"""
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    wait_for(
        lambda: (
            (tmp_path / "logs" / "inference.log").exists()
            and "starting" in (tmp_path / "logs" / "inference.log").read_text()
        )
    )
    child.send_signal(signal.SIGTERM)
    out, _ = child.communicate(timeout=30)
    assert child.returncode == 143 and "RESULT 143 True True" in out, out


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_ctrl_c_in_a_tmux_pane_lets_the_trainer_checkpoint(tmp_path):
    """Ctrl-C typed into the tmux session (the trainer's pane is active) reaches vf-rl once;
    the pane stays (tail ignores it) and the run stops after the checkpoint with 130."""
    sent = []

    def ctrl_c(fd: int) -> None:
        if not sent and trainer_running(tmp_path):
            time.sleep(0.5)
            os.write(fd, b"\x03")
            sent.append(True)

    text = on_a_terminal([sys.executable, "-c", LAUNCHER_CHILD, str(tmp_path), "2.0", "tmux"], ctrl_c)
    assert sent and "RESULT 130 True True" in text, text[-2000:]
    assert "Stopped by SIGINT; checkpoint saved" in (tmp_path / "logs" / "trainer.log").read_text()
    assert DRAIN_LINE in status_lines(tmp_path)


# -- a real run: the vLLM server killed mid-training --------------------------------------------


@pytest.mark.server
@pytest.mark.slow
def test_vf_rl_run_survives_its_server_killed_mid_run(tiny_model_dir, tmp_path):
    """kill -9 of vf-vllm's pid after step 2: vf-rl restarts it, the trainer re-syncs, every step runs once."""
    pytest.importorskip("vllm")
    steps = 6
    child, run = start_real_run(tiny_model_dir, tmp_path, steps)
    logs = run / "logs"
    try:
        wait_for(
            lambda: (logs / "trainer.log").exists() and "Step 2/" in (logs / "trainer.log").read_text(), 400
        )
        pid = int(re.search(r"Inference server ready after \d+ s \(pid (\d+)\)", status_lines(run)).group(1))
        os.kill(pid, signal.SIGKILL)
        out, _ = child.communicate(timeout=480)
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)  # vf-rl stops its children
            child.communicate(timeout=60)
    assert child.returncode == 0, out[-5000:]
    status = status_lines(run)
    assert "Inference server exited with status -9 at " in status and "restarting it (1/3)" in status, status
    assert "Inference server ready again after" in status
    steps_run = step_lines(run)
    assert [r["step"] for r in steps_run] == list(range(1, steps + 1)), [r["step"] for r in steps_run]
    assert sum(r.get("errors/server_restarts", 0) for r in steps_run) >= 1, steps_run
    assert f"Step {steps}/{steps}:" in out


# -- a server that hangs ----------------------------------------------------------------------

# Start 1 answers for `serve_s` seconds, then hangs: "stop" SIGSTOPs itself (nothing answers),
# "stall" keeps answering /vf/progress with 3 requests pending and a counter that no longer
# moves (an engine core stopped behind a live API process). Start 2 serves normally. Each start
# appends its pid to the state file.
HANGING_SERVER = textwrap.dedent(
    """
    import http.server, json, os, signal, sys, time
    port, state, mode, serve_s = int(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
    with open(state, "a") as f:
        f.write(f"{os.getpid()}\\n")
    first = sum(1 for _ in open(state)) == 1
    started = time.monotonic()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/vf/progress":
                moving = not first or time.monotonic() - started < serve_s
                steps = int(time.monotonic() * 10) if moving else 0
                body = {"steps": steps, "tokens": steps, "pending": 3, "paused": False, "counted": True}
                self.send_response(200)
                self.end_headers()
                self.wfile.write(json.dumps(body).encode())
                return
            self.send_response(200 if self.path in ("/health", "/v1/models") else 404)
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    http.server.HTTPServer.allow_reuse_address = True
    server = http.server.HTTPServer(("127.0.0.1", port), Handler)
    server.timeout = 0.1
    print("fake server ready", flush=True)
    while True:
        server.handle_request()
        if first and mode == "stop" and time.monotonic() - started > serve_s:
            print("fake server stops itself", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
    """
)


@pytest.mark.parametrize("mode", ["stop", "stall"])
def test_a_hung_server_is_found_within_its_bound_killed_and_restarted(tmp_path, monkeypatch, mode):
    import dataclasses

    from verifiers.cli.rl import server_watch

    monkeypatch.setattr(server_watch, "PROBE_INTERVAL_S", 0.2)
    monkeypatch.setattr(server_watch, "PROBE_TIMEOUT_S", 0.5)
    port = free_port()
    script = tmp_path / "hanging_server.py"
    script.write_text(HANGING_SERVER)
    server = [sys.executable, str(script), str(port), str(tmp_path / "pids"), mode, "2.0"]
    trainer = contract_trainer(
        tmp_path, until=(tmp_path / "logs" / "vf-rl.log", "Inference server ready again")
    )
    plan = make_plan(tmp_path, server, trainer, port=port)
    bound = 2.0
    plan.config = dataclasses.replace(
        plan.config,
        inference=dataclasses.replace(plan.config.inference, hang_timeout_s=bound, progress_timeout_s=bound),
    )
    assert Launcher(plan).run() == 0
    first, second = (int(pid) for pid in (tmp_path / "pids").read_text().split())
    log = status_lines(tmp_path)
    if mode == "stop":
        pattern = (
            rf"Inference server \(pid {first}\) did not answer /vf/progress for (\d+) s at \d\d:\d\d:\d\d "
            r"\(stopped or deadlocked; inference.hang_timeout_s = 2\); killed it, restarting it \(1/3\) in 0.2 s\n"
        )
    else:
        pattern = (
            rf"vLLM engine core of the inference server \(pid {first}\) made no progress for (\d+) s with 3 "
            r"requests pending at \d\d:\d\d:\d\d \(stopped or deadlocked; inference.progress_timeout_s = 2\); "
            r"killed it, restarting it \(1/3\) in 0.2 s\n"
        )
    found = re.findall(pattern, log)
    assert len(found) == 1, log  # one line
    # within the bound, plus at most one probe's interval and timeout
    assert bound <= int(found[0]) <= bound + 0.2 + 0.5 + 1, log
    assert "Inference server ready again after" in log and "Training finished" in log
    with pytest.raises(ProcessLookupError):
        os.kill(first, 0)  # the stopped one is gone, not left behind
    assert second == plan.server.proc.pid and gone(plan.server.proc)

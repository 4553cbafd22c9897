"""Running a ``vf-rl`` plan: both children, the readiness wait, supervision and shutdown.

``Launcher`` starts the inference server, waits until it serves the model, starts the
trainer, pumps both logs (to files and the terminal, or tmux panes) and stops both
process groups when training ends (plan.py makes the plan).

Supervision: a server that dies during training is restarted with the same command
and environment, at most ``inference.max_restarts`` times, after a backoff; the
trainer waits for it (``vllm_server_timeout``), re-syncs its weights and goes on
(inference/client/recovery.py). Crash to ready must fit in that same timeout, or the trainer
would give up first. When the server cannot be restarted, the trainer gets SIGTERM,
saves its checkpoint, and vf-rl ends with one line saying why. A server that hangs (alive,
but not answering, or its engine without progress while requests wait: server_watch.py)
is killed (SIGKILL of its group) and goes the same way, counted in the same restarts.

Trainer: a trainer that exits non-zero during training (a crash, SIGKILL, the OOM killer, a rank
ended by the collective timeout), or one whose rank stops making progress while alive (SIGSTOP, a
hang: trainer_watch.py reads the heartbeats each rank writes), is restarted with the same command
and environment (plus ``$VF_RL_ATTEMPT``) from its last complete checkpoint, after a backoff, at
most ``trainer.max_restarts`` times; the server keeps running, and the restarted trainer re-syncs
its weights (it pushes them whole when the server holds another version). A first attempt that
fails before training began is not restarted: a start-up error (config, import, no memory for the
model) would only repeat.

Port: before the server starts, its port must be free (another process listening there is
refused in one line; vf-rl never picks another port by itself, since the trainer and any
client read the configured one); and the readiness wait accepts only the server vf-rl
started: the process listening on the port must be in the server's session (Linux /proc),
else a foreign server answering /health there is refused instead of trained against.

Shutdown: the first Ctrl-C or SIGTERM goes to the trainer's process group only, which
finishes its step and saves a checkpoint; vf-rl waits for it (no timeout), then stops
the server and exits 130 or 143. A second signal stops everything at once.
"""

from __future__ import annotations

import collections
import errno
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from verifiers.cli.common import print_error
from verifiers.cli.rl.echo import ServerEcho
from verifiers.cli.rl.server_watch import Hang, Prober
from verifiers.cli.rl.trainer_watch import LIVE_BOUND_S, Stall, TrainerWatch, hang_bound
from verifiers.errors import ServerError, ServerTimeoutError
from verifiers.utils import process_tree
from verifiers.utils.backoff import Backoff, poll_until

if TYPE_CHECKING:
    from verifiers.cli.run_config.load import RunConfig

STOP_GRACE_S = 10.0
TAIL_LINES = 20
# Delays before restarting a dead server: 2 s, 4 s, 8 s, ... at most 30 s (a crash loop
# is not restarted at full speed, and the wait stays small beside the server's start-up).
RESTART_FIRST_DELAY_S = 2.0
RESTART_MAX_DELAY_S = 30.0
DRAIN_LINE = "Stopping after the current step and saving a checkpoint; Ctrl-C again to stop at once"


@dataclass
class Side:
    """One child process (``inference`` or ``trainer``), its command and its log."""

    name: str
    cmd: list[str]
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen | None = None
    tail: collections.deque = field(default_factory=lambda: collections.deque(maxlen=TAIL_LINES))
    pump: threading.Thread | None = None
    log_start: int = 0  # where the current process's lines begin in ``log`` (after restarts)

    def shown(self) -> str:
        gpus = self.env.get("CUDA_VISIBLE_DEVICES")
        return (f"CUDA_VISIBLE_DEVICES={gpus} " if gpus is not None else "") + shlex.join(self.cmd)


class Plan(Protocol):
    """What the launcher reads of a plan (``plan.Plan``; plan.py imports this module, not the reverse)."""

    config: RunConfig
    server: Side
    trainer: Side
    timeout: float


# -- running ----------------------------------------------------------------------------------


class Launcher:
    """Runs a :class:`Plan`: server, readiness wait, trainer, supervision, shutdown.

    vf-rl's own status lines go to the terminal and to ``logs/vf-rl.log``; in tmux
    mode a small top pane shows that file. Tails and the failure line are printed
    at the end, once the terminal is ours again.
    """

    def __init__(self, plan: Plan, use_tmux: bool = False):
        self.plan = plan
        self.use_tmux = use_tmux
        self.echo = not use_tmux  # children's lines and notes go to this terminal too
        self.server_echo = ServerEcho(plan.server.log)  # what of the server's lines it shows (echo.py)
        self.logs = plan.server.log.parent
        self.stopping = threading.Event()
        # Reentrant: the signal handler prints a note on the main thread, maybe inside note().
        self.print_lock = threading.RLock()
        self.start_lock = threading.Lock()  # no child starts once stopping has begun
        self.failed: Side | None = None  # whose last lines to show at the end
        self.failure: str | None = None  # the error line for a failed training run
        self.signum: int | None = None  # the first SIGINT/SIGTERM received
        self.draining = False  # the trainer got SIGINT/SIGTERM and is saving its checkpoint
        self.restarts = 0  # restarts of the server so far
        self.restart_backoff = Backoff(first=RESTART_FIRST_DELAY_S, max_delay=RESTART_MAX_DELAY_S)
        self.trainer_restarts = 0
        self.trainer_backoff = Backoff(first=RESTART_FIRST_DELAY_S, max_delay=RESTART_MAX_DELAY_S)
        self.trainer_cmd = list(plan.trainer.cmd)  # a restart adds only its resume_from_checkpoint
        self.trainer_watch = TrainerWatch(self.logs / "heartbeats", LIVE_BOUND_S, hang_bound(plan.config))
        inference = plan.config.inference
        self.server_watch = Prober(inference.url, inference.hang_timeout_s, inference.progress_timeout_s)
        name = "".join(ch if ch.isalnum() else "-" for ch in plan.config.run_name)
        self.session = f"vf-rl-{name}-{os.getpid()}"

    def run(self) -> int:
        """Run the plan; the exit status is the trainer's (non-zero if training failed),
        130/143 after Ctrl-C/SIGTERM."""
        self.logs.mkdir(parents=True, exist_ok=True)
        for side in (self.plan.server, self.plan.trainer):
            side.log.write_text("")
        (self.logs / "vf-rl.log").write_text("")
        # Handled also when vf-rl was started with SIGINT ignored (a background job).
        handlers = (
            {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
            if threading.current_thread() is threading.main_thread()
            else {}
        )
        try:
            return self._run_in_tmux() if self.use_tmux else self._drive()
        except KeyboardInterrupt:  # a second signal, or one before training started: stop at once
            if self.signum != signal.SIGTERM:
                raise  # run_cli: "interrupted", 130
            self.failure = "stopped by SIGTERM"
            return 128 + signal.SIGTERM
        finally:
            with self.start_lock:
                self.stopping.set()
            self.server_echo.stopping = True
            self.server_watch.close()
            for side in (self.plan.trainer, self.plan.server):
                stop(side.proc)
            for side in (self.plan.trainer, self.plan.server):
                if side.pump is not None:
                    side.pump.join(timeout=2)
            if self.use_tmux:
                subprocess.run(["tmux", "kill-session", "-t", self.session], capture_output=True)
            for sig, previous in handlers.items():
                signal.signal(sig, previous)
            self._report()

    def _drive(self) -> int:
        """Start the server, wait for it, start the trainer, and watch both until one ends."""
        server, trainer = self.plan.server, self.plan.trainer
        check_port_free(self.plan.config.inference.host, self.plan.config.inference.port)
        self.note(f"Starting the inference server: {server.shown()}")
        self._start(server)
        self._wait_ready()
        self.server_watch.arm()
        self.note(f"Starting the trainer: {trainer.shown()}")
        self._start_trainer(attempt=1)
        while not self.stopping.is_set():
            status, stall = trainer.proc.poll(), None
            if status is None and not self.draining:
                stall = self.trainer_watch.check(time.monotonic())
                if stall is not None:  # stopped or stuck: it cannot checkpoint, so no SIGTERM first
                    _kill_group(trainer.proc)
                    status = trainer.proc.returncode
            if status is not None:
                if trainer.pump is not None:
                    trainer.pump.join(timeout=5)  # its last lines, before the summary
                if self.signum is not None:
                    name = signal.Signals(self.signum).name
                    self.note(
                        f"Trainer stopped after {name} (exit status {status}); stopping the inference server"
                    )
                    return 128 + self.signum
                if status == 0:
                    self.note(f"Training finished; outputs in {self.plan.config.output_dir}/")
                    return 0
                if self._restart_trainer(status, stall):
                    continue
                return status if 0 < status < 256 else 1
            if server.proc.poll() is not None and not self.draining:
                self._restart_server()
            elif not self.draining and (hang := self.server_watch.hang()) is not None:
                self._restart_server(hang)
            time.sleep(0.5)
        return 130

    def _restart_server(self, hang: Hang | None = None) -> None:
        """The server died (or hangs: ``hang``, and is killed here) during training: start it again
        (same command and environment) after a backoff, or, past ``inference.max_restarts``,
        stop the trainer and end the run."""
        server, limit = self.plan.server, self.plan.config.inference.max_restarts
        self.server_watch.disarm()  # a starting server answers nothing; armed again once ready
        died, at = time.monotonic(), time.strftime("%H:%M:%S")
        status, pid = server.proc.returncode, server.proc.pid
        self.server_echo.stopping = True  # vf-rl ends what is left of it: its own line says why
        if hang is not None:
            # SIGKILL: a stopped process holds SIGTERM until continued, a deadlocked one may
            # never act on it, and the trainer's requests fail (and it waits) only once it is gone.
            _kill_group(server.proc)
        stop(server.proc)  # what is left of its group (vLLM's engine core) holds memory and the port
        if server.pump is not None:
            server.pump.join(timeout=5)
        # One killed for a hang did not die of an error in its log (see _restart_trainer).
        error = first_error(server.log, start=server.log_start) if hang is None else ""
        if self.restarts >= limit:
            done = f"restarted {self.restarts} time(s) already" if limit else "restarts are off"
            if hang is None:
                what = f"the inference server exited with status {status} during training at {at}"
            else:
                what = hang.describe(pid, f"during training at {at}")
                what = what[0].lower() + what[1:]
            self._give_up(f"{what}{error}; not restarting it ({done}, inference.max_restarts = {limit})")
        self.restarts += 1
        delay = self.restart_backoff.next_delay() or RESTART_FIRST_DELAY_S
        what = (
            f"Inference server exited with status {status} at {at}"
            if hang is None
            else hang.describe(pid, f"at {at}")
        )
        killed = "killed it, " if hang else ""
        self.note(f"{what}; {killed}restarting it ({self.restarts}/{limit}) in {delay:.3g} s{error}")
        self.stopping.wait(delay)  # interruptible: a signal still reaches the handler
        if self.draining or self.stopping.is_set():
            return
        self._start(server)
        # Counted from the crash: the trainer waits vllm_server_timeout from when it noticed.
        left = self.plan.timeout - (time.monotonic() - died)
        try:
            self._wait_ready(max(left, 1.0), again=True)
        except ServerError as err:
            self._give_up(f"restart {self.restarts}/{limit} failed: {err.message}")
        self.server_watch.arm()

    def _start_trainer(self, attempt: int) -> None:
        from verifiers.training.lifecycle.heartbeat import ENV_ATTEMPT, ENV_DIR

        self.plan.trainer.env.update({ENV_DIR: str(self.trainer_watch.folder), ENV_ATTEMPT: str(attempt)})
        self.trainer_watch.reset()  # the last attempt's beats would read as this one's silence
        self._start(self.plan.trainer)

    def _restart_trainer(self, status: int, stall: Stall | None) -> bool:
        """The trainer failed (``status``; ``stall``: killed by the watch): start it again from its last
        complete checkpoint after a backoff (True), or set the failure line and return False."""
        from verifiers.training.lifecycle.checkpoint import last_complete_checkpoint

        trainer, limit = self.plan.trainer, self.plan.config.trainer.max_restarts
        at = time.strftime("%H:%M:%S")
        _kill_group(trainer.proc)  # what is left of its group (other ranks, workers) holds memory
        if trainer.pump is not None:
            trainer.pump.join(timeout=5)
        # A trainer killed for a stall did not die of an error in its log (one handled before, a
        # rollout during a server outage, would read as the cause).
        error = first_error(trainer.log, start=trainer.log_start) if stall is None else ""
        named = f" ({exit_text(status)})" if status < 0 else ""
        cause = stall.line() if stall is not None else f"training failed with exit status {status}{named}"
        if stall is None and self.trainer_restarts == 0 and not self.trainer_watch.reached_training():
            # A start-up error (config, import, no memory for the model) would only repeat.
            self.failed, self.failure = trainer, f"{cause} (full log: {trainer.log})"
            return False
        if self.trainer_restarts >= limit:
            done = f"restarted {self.trainer_restarts} time(s) already" if limit else "restarts are off"
            self.failed = trainer
            self.failure = (
                f"{cause} at {at}{error}; not restarting it ({done}, trainer.max_restarts = {limit}) "
                f"(full log: {trainer.log})"
            )
            return False
        self.trainer_restarts += 1
        delay = self.trainer_backoff.next_delay() or RESTART_FIRST_DELAY_S
        checkpoint = last_complete_checkpoint(self.plan.config.output_dir)
        if checkpoint is not None:
            where = Path(checkpoint).name
        elif self.plan.config.trainer.resume_from_checkpoint:  # nothing saved yet: its first start again
            where = "the checkpoint it started from"
        else:
            where = "the start"
        what = f"T{stall.line()[1:]}; killed it" if stall else f"Trainer exited with {exit_text(status)}"
        self.note(
            f"{what} at {at}; restarting it ({self.trainer_restarts}/{limit}) from {where} in {delay:.3g} s{error}"
        )
        self.stopping.wait(delay)  # interruptible: a signal still reaches the handler
        # "true", not the folder: the trainer then takes the newest checkpoint that verifies in full
        # (checksums; a corrupt one is moved aside with one line, checkpoint.resolve_resume), where
        # the pick above, for the line, compares sizes only. A folder named explicitly and found
        # corrupt would fail every restart the same way.
        resume = ["--trainer.args.resume_from_checkpoint", "true"] if checkpoint else []
        trainer.cmd = self.trainer_cmd + resume  # the last override wins over one the user gave
        self._start_trainer(attempt=self.trainer_restarts + 1)
        return True

    def _give_up(self, reason: str) -> NoReturn:
        """End the run because of the server: SIGTERM the trainer (it saves a checkpoint),
        wait for it, then raise the one-line error."""
        server, trainer = self.plan.server, self.plan.trainer
        self.failed, self.draining = server, True
        stop(server.proc)
        if trainer.proc is not None and trainer.proc.poll() is None:
            self.note(f"{reason[0].upper()}{reason[1:]}; stopping the trainer (it saves a checkpoint first)")
            _signal_group(trainer.proc, signal.SIGTERM)
            while trainer.proc.poll() is None and not self.stopping.is_set():  # no timeout: the checkpoint
                time.sleep(0.2)
            if trainer.pump is not None:
                trainer.pump.join(timeout=5)
        raise ServerError(reason, hint=f"full log: {server.log}")

    def _on_signal(self, signum: int, frame: Any) -> None:
        """First SIGINT/SIGTERM during training: the trainer's group only (it checkpoints; we wait).
        Before training, during the wait or a second time: stop everything at once."""
        if self.stopping.is_set():
            return  # already stopping everything
        trainer = self.plan.trainer.proc
        first = self.signum is None and not self.draining
        self.signum = signum  # the exit status follows the last signal
        if not first or trainer is None or trainer.poll() is not None:
            raise KeyboardInterrupt
        self.draining = True
        self.note(DRAIN_LINE)
        _signal_group(trainer, signum)

    def note(self, message: str) -> None:
        """A vf-rl status line: to ``logs/vf-rl.log``, and to the terminal unless tmux holds it."""
        with self.print_lock:
            with (self.logs / "vf-rl.log").open("a", encoding="utf-8") as f:
                f.write(message + "\n")
            if self.echo:
                print(message, flush=True)

    def _start(self, side: Side) -> None:
        from verifiers.inference.server.parent_watch import launcher_env

        with self.start_lock:
            if self.stopping.is_set():
                raise KeyboardInterrupt
            side.log_start = side.log.stat().st_size if side.log.exists() else 0
            if side is self.plan.server:
                self.server_echo.started()
            side.proc = subprocess.Popen(
                side.cmd,
                # The server ends with vf-rl even when vf-rl is killed with SIGKILL (parent_watch).
                env={**os.environ, **side.env, **launcher_env()},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: stopped as a whole, spared the terminal's Ctrl-C
            )
        side.pump = threading.Thread(target=self._pump, args=(side,), daemon=True, name=f"vf-rl-{side.name}")
        side.pump.start()

    def _pump(self, side: Side) -> None:
        """Copy a child's output to its log file (and to this terminal, prefixed)."""
        with side.log.open("a", encoding="utf-8") as log:
            # Text mode with universal newlines: progress bars' \r also ends a line.
            for line in open(side.proc.stdout.fileno(), encoding="utf-8", errors="replace", closefd=False):
                line = line.rstrip("\n")
                log.write(line + "\n")
                log.flush()
                side.tail.append(line)
                if self.echo:
                    shown = self.server_echo.lines(line) if side is self.plan.server else [line]
                    with self.print_lock:
                        for text in shown:
                            print(f"[{side.name}] {text}", flush=True)

    def _wait_ready(self, timeout: float | None = None, again: bool = False) -> None:
        """Poll ``/health``, then ``/v1/models``, within one total timeout; fail fast if the server dies.

        ``again``: a restart during training; the wait also ends when the trainer ends or stops.
        """
        server, url = self.plan.server, self.plan.config.inference.url
        timeout = self.plan.timeout if timeout is None else timeout
        self.note(f"Waiting for the inference server at {url} (up to {timeout:.0f} s)")
        started = time.monotonic()
        trainer = self.plan.trainer.proc

        def check() -> str | None:
            if self.stopping.is_set() or self.draining:
                return "stopped"
            if again and trainer is not None and trainer.poll() is not None:
                return "trainer ended"  # the supervision loop reports it
            if server.proc.poll() is not None:
                if server.pump is not None:
                    server.pump.join(timeout=5)
                self.failed = server
                raise ServerError(
                    f"the inference server exited with status {server.proc.returncode} before it was ready"
                    + first_error(server.log, start=server.log_start),
                    hint=f"full log: {server.log}",
                )
            if not (_http_ok(url + "/health") and _http_ok(url + "/v1/models")):
                return None
            port = self.plan.config.inference.port
            if listener_is_foreign(port, server.proc.pid):
                self.failed = server
                raise ServerError(
                    f"port {port} answers /health, but not from the inference server vf-rl started "
                    f"(pid {server.proc.pid}): another process listens there",
                    hint=f"stop that process, or set inference.port to a free one, e.g. --inference.port {port + 1}",
                )
            return "ready"

        outcome = poll_until(check, Backoff(first=1.0, max_delay=1.0, timeout=timeout))
        if outcome == "ready":
            took = time.monotonic() - started
            if again:
                self.note(
                    f"Inference server ready again after {took:.0f} s (pid {server.proc.pid}); "
                    "the trainer re-syncs its weights and goes on"
                )
            else:
                self.note(f"Inference server ready after {took:.0f} s (pid {server.proc.pid})")
        elif outcome is None:
            raise ServerTimeoutError(
                f"the inference server was not ready within {timeout:.0f} s",
                hint=f"see {server.log}; raise trainer.args.vllm_server_timeout if it is only slow",
            )

    def _report(self) -> None:
        """At the end: what tmux showed (status), the failed side's last lines, the failure line."""
        if not self.echo:
            status = (self.logs / "vf-rl.log").read_text(encoding="utf-8").splitlines()
            for line in status[-2:]:
                print(line)
            if self.failed is not None:
                print(f"--- last lines of {self.failed.log} ---", file=sys.stderr)
                for line in self.failed.tail:
                    print(f"[{self.failed.name}] {line}", file=sys.stderr)
        if self.failure:
            print_error(self.failure)

    def _run_in_tmux(self) -> int:
        """Show the logs in tmux panes (status, inference, trainer) while a worker thread drives the run."""
        pid = os.getpid()

        def pane(log: Path) -> str:
            # Ctrl-C in a pane interrupts vf-rl itself (the first one stops after the step, see
            # _on_signal). tail runs in the background, where sh ignores SIGINT: the pane stays
            # and shows the trainer saving its checkpoint. sh, whatever the user's shell is.
            script = (
                f"trap 'kill -INT {pid}' INT; tail -n +1 -F {shlex.quote(str(log))} & t=$!; "
                'while kill -0 "$t" 2>/dev/null; do wait "$t"; done'
            )
            return f"sh -c {shlex.quote(script)}"

        def tmux(*args: str, check: bool = False) -> None:
            subprocess.run(["tmux", *args], check=check, capture_output=not check)

        tmux(
            "new-session",
            "-d",
            "-s",
            self.session,
            "-x",
            "200",
            "-y",
            "50",
            pane(self.logs / "vf-rl.log"),
            check=True,
        )
        tmux("split-window", "-v", "-t", f"{self.session}.0", pane(self.plan.server.log), check=True)
        tmux("split-window", "-v", "-t", f"{self.session}.1", pane(self.plan.trainer.log), check=True)
        tmux("select-layout", "-t", self.session, "even-vertical")
        tmux("resize-pane", "-t", f"{self.session}.0", "-y", "4")
        tmux("set-option", "-t", self.session, "pane-border-status", "top")
        for index, title in enumerate(("vf-rl", "inference", "trainer")):
            tmux("select-pane", "-t", f"{self.session}.{index}", "-T", title)
        outcome: dict[str, Any] = {}
        done = threading.Event()

        def work() -> None:
            try:
                outcome["status"] = self._drive()
            except BaseException as err:  # handed to the main thread
                outcome["error"] = err
            finally:
                done.set()
                tmux("kill-session", "-t", self.session)  # ends the attach below

        worker = threading.Thread(target=work, daemon=True, name="vf-rl-driver")
        worker.start()
        subprocess.run(["tmux", "attach-session", "-t", self.session])
        if not done.is_set():  # detached (C-b d): go on here, interleaved
            self.echo = True
            self.note(
                f"Detached from tmux; vf-rl goes on here (Ctrl-C stops after the step). Logs: {self.logs}/"
            )
            while worker.is_alive():
                worker.join(0.5)
        if "error" in outcome:
            raise outcome["error"]
        return outcome.get("status", 130)


def stop(proc: subprocess.Popen | None, grace: float = STOP_GRACE_S) -> None:
    """SIGTERM a child's process group, then SIGKILL what is left of its tree after ``grace`` seconds.

    The tree, not only the group: torch's elastic agent runs each trainer rank in a session of its
    own (utils/process_tree.py); it forwards the SIGTERM to them, but a rank left over at the
    SIGKILL would outlive it."""
    if proc is None:
        return
    below = _below(proc)  # read first: once the launcher is gone, its orphans are not below it
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        # A stopped member (SIGSTOP, a debugger) holds the SIGTERM until continued: continue it,
        # so that it ends now rather than at the SIGKILL; the ranks' own sessions too.
        os.killpg(proc.pid, signal.SIGCONT)
    except (ProcessLookupError, PermissionError):
        return
    process_tree.signal_all(below - {proc.pid}, signal.SIGCONT)

    if poll_until(lambda: _tree_gone(proc, below), Backoff(first=0.1, max_delay=0.1, timeout=grace)):
        return
    _kill_group(proc, grace, below)


def _group_gone(proc: subprocess.Popen) -> bool | None:
    """True once nobody is left in a child's process group (vLLM's engine, accelerate's workers)."""
    proc.poll()
    try:
        os.killpg(proc.pid, 0)
    except (ProcessLookupError, PermissionError):
        return True
    return None


def _below(proc: subprocess.Popen) -> set[int]:
    """The processes below a running child, itself included; none once it has ended and been reaped
    (its pid may then be another process's, and its orphans hang below init)."""
    return process_tree.tree(proc.pid) if proc.poll() is None else set()


def _tree_gone(proc: subprocess.Popen, below: set[int]) -> bool | None:
    """True once the child's group and every process that was below it have ended."""
    if _group_gone(proc) and not process_tree.running(below - {proc.pid}):
        return True
    return None


def _kill_group(proc: subprocess.Popen, wait: float = STOP_GRACE_S, below: set[int] | None = None) -> None:
    """SIGKILL a child's whole process group and every process below it (a stopped one too; the
    trainer's ranks lead sessions of their own: utils/process_tree.py) and wait until all are gone.
    ``below``: the tree as read before (``stop`` reads it before its SIGTERM)."""
    if below is None:
        below = _below(proc)  # before the kill, which re-parents them to init
    _signal_group(proc, signal.SIGKILL)
    process_tree.signal_all(below - {proc.pid}, signal.SIGKILL)
    poll_until(lambda: _tree_gone(proc, below), Backoff(first=0.05, max_delay=0.2, timeout=wait))
    proc.wait()


def exit_text(status: int) -> str:
    """``-9`` -> ``"SIGKILL"``, ``3`` -> ``"status 3"`` (Popen's negative status: killed by a signal)."""
    if status < 0:
        try:
            return signal.Signals(-status).name
        except ValueError:
            pass
    return f"status {status}"


def _signal_group(proc: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


_ERROR_LINE = re.compile(r"(?:^|[\s\]])((?:[A-Z]\w*(?:Error|Exception))|error): (.+)")
# A line logged below ERROR names an error that was handled (a retried request, a fallback):
# a process killed later (SIGKILL, a hang) did not die of it.
_HANDLED = re.compile(r"\b(?:WARNING|WARN|INFO|DEBUG)\b")


def first_error(log: Path, limit: int = 300, start: int = 0) -> str:
    """``": <the first error line of a log>"`` (from byte ``start``: the current process's lines), or
    ``""``: in vLLM's multi-process logs the root cause comes first and the generic wrappers
    ("Engine core initialization failed") after. Lines logged as warnings or info are skipped:
    what they name was handled, and a process killed afterwards did not die of it."""
    try:
        with log.open("rb") as f:
            f.seek(start)
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    for line in text.splitlines():
        match = _ERROR_LINE.search(line)
        if match and not _HANDLED.search(line, 0, match.start()):
            return f": {match.group(1)}: {match.group(2).strip()}"[: limit + 2]
    return ""


def check_port_free(host: str, port: int) -> None:
    """Raise ``ServerError`` (one line) if another process already listens on ``host:port``.

    Bound as the server will bind it (``SO_REUSEADDR``, as uvicorn does): a port left in
    TIME_WAIT by a previous run is free, one with a listener is not."""
    try:
        addrs = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return  # an unresolvable host: the server reports it with its own error
    for family, kind, proto, _, addr in addrs:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(addr)
            except OSError as e:
                if e.errno != errno.EADDRINUSE:
                    continue
                raise ServerError(
                    f"inference port {port} on {host} is already in use by another process; vf-rl starts "
                    "its own server and never trains against one it did not start",
                    hint=f"stop that process, or set inference.port to a free one, e.g. --inference.port {port + 1}",
                ) from None


def _listening_inodes(port: int) -> set[str] | None:
    """Socket inodes listening on TCP ``port`` (any address), from /proc/net; None without /proc."""
    found: set[str] = set()
    seen_table = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        seen_table = True
        for line in lines:
            cols = line.split()
            # local_address is ADDR:PORT in hex; state 0A is LISTEN; cols[9] is the inode
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                found.add(cols[9])
    return found if seen_table else None


def _session_socket_inodes(sid: int) -> set[str]:
    """Socket inodes held by the processes of session ``sid`` (the server and its children)."""
    inodes: set[str] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[3]) != sid:  # after "(comm)": state ppid pgrp session
                continue
            for fd in os.listdir(f"/proc/{entry}/fd"):
                target = os.readlink(f"/proc/{entry}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except (OSError, ValueError, IndexError):
            continue  # gone, or not ours to read
    return inodes


def listener_is_foreign(port: int, server_pid: int) -> bool:
    """True if something listens on ``port`` and none of it belongs to the server vf-rl started
    (its session: ``start_new_session`` made ``server_pid`` the session id). False when it is
    the server's, or when this system cannot tell (no /proc)."""
    listening = _listening_inodes(port)
    if not listening:
        return False
    return not (listening & _session_socket_inodes(server_pid))


def _http_ok(url: str) -> bool:
    # No proxies: the server is local, and a proxy from the environment would answer instead.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=5) as resp:
            return resp.status == 200
    except Exception:
        return False

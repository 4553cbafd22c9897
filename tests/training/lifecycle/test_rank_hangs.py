"""No rank hangs: every fault of a multi-process run ends in the run carrying on, or in every
process exiting with a line that names the cause, within a bound (docs/training.md, "Faults with
several processes").

- ``wait_together`` in two real gloo processes (no model): rank 0 waits far longer than the
  collective timeout and rank 1 is kept alive by the heartbeats; rank 0's failure reaches
  rank 1 as one line; without it, the same wait times rank 1 out (the timeout is live,
  set after the group started by ``apply_collective_timeout``).
- Launched runs (``hang_run.py``, 2 DDP processes over gloo, tiny model, fake server): a
  crash of rank 1 at step 2; a server outage of a few seconds (carries on) and one that
  never ends; an outage longer than the collective timeout (ridden out on heartbeats); a
  tool that never returns (its ``tool_timeout`` ends it; without one, the batch's
  ``async_generation_timeout``); a plain-function tool that never returns does not keep the
  main process from exiting (sync tools run on daemon threads, ``DaemonThreadPool``).

The default suite runs the in-process checks and the crash; the rest are ``slow``.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from datetime import timedelta
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("accelerate")

from tests.doubles.launch import command, run  # noqa: E402
from tests.doubles.vllm_server import free_port  # noqa: E402

COLLECTIVE_S = 2.0  # the process group's timeout in these tests
WAIT_S = 6.0  # rank 0's wait: three times the timeout


SCENARIOS = ("together", "fail", "plain")  # "plain" last: its timeout breaks the group


def _worker(rank: int, port: int, results) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    os.environ.update(LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2")
    from accelerate import PartialState

    from verifiers.errors import GenerationError
    from verifiers.training import processes

    state = PartialState(cpu=True, backend="gloo", timeout=timedelta(seconds=600))
    processes.apply_collective_timeout(COLLECTIVE_S)  # set after the group started
    processes.HEARTBEAT_S = 0.5
    for scenario in SCENARIOS:

        def work(scenario=scenario):
            time.sleep(WAIT_S)
            if scenario == "fail":
                raise GenerationError("batch 3 not ready after 6 s", hint="raise async_generation_timeout")
            return {"batch": 3}

        start = time.monotonic()
        try:
            if scenario == "plain":  # what the trainer did before: rank 0 waits, then broadcasts
                value = processes.broadcast(state, work() if rank == 0 else None)
            else:
                value = processes.wait_together(state, work, "waiting for batch 3")
            results.put((scenario, rank, "ok", repr(value), time.monotonic() - start))
        except Exception as err:
            results.put((scenario, rank, type(err).__name__, str(err), time.monotonic() - start))
    results.close()
    results.join_thread()  # flushed before the hard exit
    os._exit(0)  # the group is broken by "plain": skip its teardown


@pytest.fixture(scope="module")
def outcomes() -> dict[tuple[str, int], tuple[str, str, float]]:
    """(scenario, rank) -> (outcome, message, seconds) from one pair of gloo processes."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_worker, args=(r, port, results)) for r in range(2)]
    for p in procs:
        p.start()
    out = {}
    try:
        for _ in range(2 * len(SCENARIOS)):
            scenario, rank, kind, text, seconds = results.get(timeout=60)
            out[scenario, rank] = (kind, text, seconds)
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    return out


def test_waiting_together_outlasts_the_collective_timeout(outcomes):
    for rank in (0, 1):
        assert outcomes["together", rank][:2] == ("ok", "{'batch': 3}"), outcomes
    assert outcomes["together", 1][2] >= WAIT_S - 0.5  # rank 1 really waited three collective timeouts


def test_main_process_failure_reaches_every_process_as_one_line(outcomes):
    assert outcomes["fail", 0][0] == "GenerationError", outcomes
    kind, text, seconds = outcomes["fail", 1]
    assert kind == "RankFailedError", outcomes
    assert text == (
        "the main process failed while waiting for batch 3: GenerationError: batch 3 not ready "
        "after 6 s (raise async_generation_timeout)"
    )
    assert seconds < WAIT_S + 5


def test_without_waiting_together_the_other_process_times_out(outcomes):
    kind, text, seconds = outcomes["plain", 1]
    assert kind != "ok" and seconds < WAIT_S, outcomes  # the collective timeout (2 s) fired first


# ---------------------------------------------------------------------------
# Launched runs: 2 DDP processes over gloo (hang_run.py)

SCRIPT = Path(__file__).resolve().parents[2] / "drivers" / "hang_run.py"
START_S = 90  # launching 2 processes and loading the tiny model, on a busy 2-core machine


def launch(model: Path, out: Path, *args: str, limit: float, kind: str = "ddp") -> tuple[int, str, float]:
    """Run hang_run.py in 2 processes under ``accelerate launch`` (DDP, or DeepSpeed ZeRO-3 with
    ``kind="zero3"``); (exit status, output, seconds). ``limit`` bounds the run."""
    cmd, env = command(kind, "accelerate")
    return run([*cmd, str(SCRIPT), "--model", str(model), "--out", str(out), *args], env, limit, "the run")


def finished(text: str) -> bool:
    return all(f"hang_run rank {r}: done, 3 steps" in text for r in (0, 1))


def test_a_crashed_rank_ends_every_process(tiny_model_dir, tmp_path):
    # The launcher (torchrun) stops the other process as soon as one fails: seconds, not a timeout.
    rc, text, seconds = launch(
        tiny_model_dir, tmp_path, "--crash-rank", "1", "--crash-step", "2", limit=START_S + 60
    )
    assert rc != 0 and not finished(text), text[-3000:]
    assert "RuntimeError: injected failure on rank 1 at step 2" in text
    print(f"crash of rank 1: every process ended {seconds:.1f} s after the launch")


@pytest.mark.slow
@pytest.mark.parametrize(
    "where, kind",
    [("--outage-request=12", "ddp"), ("--outage-step=2", "ddp"), ("--outage-step=2", "zero3")],
    ids=["mid-batch", "at-sync", "at-sync-zero3"],  # zero3: lost between the sync's collective gathers
)
def test_a_short_server_outage_is_ridden_out(tiny_model_dir, tmp_path, where, kind):
    rc, text, _ = launch(tiny_model_dir, tmp_path, where, "--outage-s", "4", limit=START_S + 60, kind=kind)
    assert rc == 0 and finished(text), text[-3000:]
    assert "hang_run: server back" in text
    assert all(f"hang_run rank {r}: done, 3 steps, 1 outages" in text for r in (0, 1))


@pytest.mark.slow
@pytest.mark.parametrize("where", ["--outage-request=12", "--outage-step=2"], ids=["mid-batch", "at-sync"])
def test_a_server_that_never_returns_ends_every_process(tiny_model_dir, tmp_path, where):
    # Bound: vllm_server_timeout (5 s) after the outage, then the launcher stops the other rank.
    args = (where, "--outage-s", "-1", "--server-timeout", "5")
    rc, text, seconds = launch(tiny_model_dir, tmp_path, *args, limit=START_S + 60)
    assert rc != 0 and not finished(text), text[-3000:]
    assert "did not come back within 5 s" in text
    if (
        where == "--outage-step=2"
    ):  # lost during a weight sync: every rank waited together, every rank says why
        assert "error: rank 1: the main process failed while waiting for the vLLM server to come back" in text
    print(f"server gone for good ({where}): every process ended {seconds:.1f} s after the launch")


@pytest.mark.slow
def test_a_tool_that_never_returns_is_ended_by_its_limit(tiny_model_dir, tmp_path):
    rc, text, _ = launch(
        tiny_model_dir, tmp_path, "--tool", "async", "--tool-timeout", "2", limit=START_S + 60
    )
    assert rc == 0 and finished(text), text[-3000:]
    assert "tool 'wait_forever' ran past tool_timeout=2s" in text


@pytest.mark.slow
def test_a_tool_without_a_limit_ends_every_process_by_the_batch_timeout(tiny_model_dir, tmp_path):
    # Bound: 3 attempts x async_generation_timeout (4 s), then the launcher stops the other rank.
    args = ("--tool", "async", "--tool-timeout", "0", "--generation-timeout", "4")
    rc, text, seconds = launch(tiny_model_dir, tmp_path, *args, limit=START_S + 60)
    assert rc != 0 and not finished(text), text[-3000:]
    assert (
        "error: rank 0: generating batch 0 failed: GenerationError: batch 0 took longer than 4 s, 3 times"
        in text
    )
    print(f"tool without a limit: every process ended {seconds:.1f} s after the launch")


@pytest.mark.slow
def test_a_sync_tool_that_never_returns_does_not_block_exit(tiny_model_dir, tmp_path):
    rc, text, _ = launch(tiny_model_dir, tmp_path, "--tool", "sync", "--tool-timeout", "2", limit=START_S)
    assert rc == 0 and finished(text), text[-3000:]


@pytest.mark.slow
def test_an_outage_longer_than_the_collective_timeout_is_ridden_out(tiny_model_dir, tmp_path):
    # ddp_timeout 40 s, the server away 45 s: rank 1 survives on the heartbeats of the wait.
    args = ("--outage-request=12", "--outage-s", "45", "--server-timeout", "60", "--ddp-timeout", "40")
    rc, text, _ = launch(tiny_model_dir, tmp_path, *args, limit=START_S + 120)
    assert rc == 0 and finished(text), text[-3000:]

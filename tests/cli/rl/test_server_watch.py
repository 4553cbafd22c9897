"""The hang watch's decision (cli/rl/server_watch.py) on a fake clock, and its prober on fake probes
(the config keys of its bounds: cli/run_config/test_load_inference_watch_keys.py; the
``/vf/progress`` route it reads: inference/server/test_routes.py)."""

from __future__ import annotations

import time

import pytest

from verifiers.cli.rl.server_watch import Hang, Probe, Prober, Progress, ServerWatch

SILENT = Probe(answered=False)


def moving(steps: int, pending: int = 4, paused: bool = False, tokens: int | None = None) -> Probe:
    return Probe(
        True,
        Progress(steps=steps, tokens=steps if tokens is None else tokens, pending=pending, paused=paused),
    )


def run(watch: ServerWatch, probes: list[tuple[float, Probe]]) -> list[Hang | None]:
    return [watch.observe(p, now) for now, p in probes]


def test_a_server_that_stops_answering_is_found_once_the_bound_passed():
    watch = ServerWatch(answer_timeout_s=30, progress_timeout_s=60, now=0.0)
    assert run(watch, [(5, moving(1)), (10, SILENT), (20, SILENT), (34.9, SILENT)]) == [None] * 4
    hang = watch.observe(SILENT, 35.0)  # 30 s after the last answer (at 5 s)
    assert hang == Hang("no_answer", 30.0, 30)
    line = hang.describe(1234, "at 03:12:45")
    assert line == (
        "Inference server (pid 1234) did not answer /vf/progress for 30 s at 03:12:45 "
        "(stopped or deadlocked; inference.hang_timeout_s = 30)"
    )


def test_a_slow_answer_now_and_then_is_not_a_hang():
    watch = ServerWatch(answer_timeout_s=30, progress_timeout_s=0, now=0.0)
    probes = [(t, SILENT if (t // 5) % 4 else moving(int(t))) for t in range(5, 300, 5)]
    assert all(h is None for h in run(watch, probes))  # never 30 s without an answer


def test_an_engine_without_progress_while_requests_wait_is_found():
    watch = ServerWatch(answer_timeout_s=30, progress_timeout_s=60, now=0.0)
    assert run(watch, [(5, moving(10)), (10, moving(11)), (15, moving(11))]) == [None] * 3
    # stuck at 11 since the probe at 15 s (the first that saw it not move): found at 75 s, not before
    assert run(watch, [(t, moving(11)) for t in range(20, 75, 5)]) == [None] * 11
    hang = watch.observe(moving(11, pending=8), 75.0)
    assert hang == Hang("no_progress", 60.0, 60, pending=8)
    assert hang.describe(99, "at 01:02:03") == (
        "vLLM engine core of the inference server (pid 99) made no progress for 60 s with 8 requests "
        "pending at 01:02:03 (stopped or deadlocked; inference.progress_timeout_s = 60)"
    )


def updating(calls: int, done: int) -> Probe:
    """Generation paused for a weight update; ``calls`` of vf-vllm's engine calls wait, ``done`` answered."""
    return Probe(True, Progress(steps=11, tokens=11, pending=4, paused=True, calls=calls, calls_done=done))


def test_an_engine_stopped_during_a_weight_update_is_found():
    """chaos.py stopped the engine core while the trainer synced its weights: generation was paused,
    so the watch expected nothing, and the stop went unnoticed for as long as it lasted (100 s)."""
    watch = ServerWatch(answer_timeout_s=30, progress_timeout_s=60, now=0.0)
    watch.observe(moving(11), 5)
    # the probe at 10 s sees calls answered since the last one; stuck from the next: found at 75 s
    assert run(watch, [(t, updating(1, 40)) for t in range(10, 75, 5)]) == [None] * 13
    hang = watch.observe(updating(1, 40), 75.0)
    assert hang == Hang("no_progress", 60.0, 60, pending=4, calls=1)
    assert hang.describe(99, "at 01:02:03") == (
        "vLLM engine core of the inference server (pid 99) made no progress for 60 s with a weight "
        "update's or adapter's engine call unanswered (1 waiting) at 01:02:03 (stopped or deadlocked; "
        "inference.progress_timeout_s = 60)"
    )


def test_a_long_update_whose_engine_calls_keep_finishing_is_no_hang():
    watch = ServerWatch(answer_timeout_s=30, progress_timeout_s=60, now=0.0)
    assert all(watch.observe(updating(1, done=t), t) is None for t in range(5, 400, 5))  # one call a probe


@pytest.mark.parametrize(
    "probe",
    [
        moving(11, pending=0),  # idle: nothing to make progress on
        moving(11, paused=True),  # a weight update or sleep: no progress on purpose
        Probe(True, None),  # a server without counters: only answering is watched
    ],
    ids=["idle", "paused", "no-counters"],
)
def test_no_progress_is_no_hang_when_none_is_expected(probe):
    watch = ServerWatch(answer_timeout_s=30, progress_timeout_s=60, now=0.0)
    watch.observe(moving(11), 5)
    assert all(watch.observe(probe, t) is None for t in range(10, 400, 5))
    # and the stall clock starts afresh once work waits again
    assert all(watch.observe(moving(11), t) is None for t in (400, 405, 455))
    assert watch.observe(moving(11), 470) is not None


def test_tokens_alone_count_as_progress():
    watch = ServerWatch(answer_timeout_s=0, progress_timeout_s=20, now=0.0)
    assert all(watch.observe(moving(5, tokens=t), float(t)) is None for t in range(1, 100))


def test_silence_keeps_the_stall_clock_running_and_bounds_of_0_are_off():
    watch = ServerWatch(answer_timeout_s=100, progress_timeout_s=60, now=0.0)
    watch.observe(moving(3), 0.0)
    watch.observe(moving(3), 5.0)  # stuck from here
    assert watch.observe(SILENT, 50.0) is None
    assert watch.observe(moving(3), 65.0) == Hang("no_progress", 60.0, 60, pending=4)
    off = ServerWatch(answer_timeout_s=0, progress_timeout_s=0, now=0.0)
    assert all(off.observe(p, t) is None for t in range(1, 1000, 7) for p in (SILENT, moving(3)))


def test_reset_forgives_what_came_before_a_restart():
    watch = ServerWatch(answer_timeout_s=30, progress_timeout_s=60, now=0.0)
    watch.observe(moving(3), 0.0)
    watch.observe(moving(3), 5.0)
    watch.reset(100.0)  # a restarted server, ready at 100 s, with counters from 0
    assert watch.observe(SILENT, 129.0) is None and watch.observe(moving(0), 130.0) is None
    assert watch.observe(moving(0), 135.0) is None and watch.observe(moving(0), 194.0) is None
    assert watch.observe(moving(0), 195.0) is not None


@pytest.mark.parametrize(
    "body, expected",
    [
        ({"steps": 3, "tokens": 9, "pending": 2, "paused": False, "counted": True}, Progress(3, 9, 2, False)),
        (
            {"steps": 3, "tokens": 9, "pending": None, "paused": True, "counted": True},
            Progress(3, 9, 0, True),
        ),
        (
            {
                "steps": 3,
                "tokens": 9,
                "paused": True,
                "engine_calls": 1,
                "engine_calls_done": 7,
                "counted": True,
            },
            Progress(3, 9, 0, True, calls=1, calls_done=7),
        ),
        ({"steps": 0, "tokens": 0, "pending": 1, "paused": False, "counted": False}, None),
        ({"detail": "Not Found"}, None),
        ([1, 2], None),
    ],
)
def test_progress_from_an_answer(body, expected):
    assert Progress.from_answer(body) == expected


def test_the_prober_reports_a_hang_once_and_is_silent_while_disarmed():
    answers = iter([moving(1), moving(2)] + [SILENT] * 1000)
    calls = []

    def fake_probe(url: str) -> Probe:
        calls.append(url)
        return next(answers)

    prober = Prober(
        "http://x", answer_timeout_s=0.2, progress_timeout_s=0, interval_s=0.02, probe_fn=fake_probe
    )
    try:
        assert prober.hang() is None and not calls  # nothing runs before arm()
        prober.arm()
        deadline = time.monotonic() + 10
        while prober.hang() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        hang = prober.hang()
        assert hang is not None and hang.kind == "no_answer" and 0.2 <= hang.seconds < 2
        count = len(calls)
        time.sleep(0.2)
        assert len(calls) == count  # one report, then no more probes until armed again
        prober.arm()
        assert prober.hang() is None
    finally:
        prober.close()
    prober.thread.join(2)
    assert not prober.thread.is_alive()


def test_a_prober_with_both_bounds_off_never_starts():
    prober = Prober("http://x", 0, 0, probe_fn=lambda url: pytest.fail("probed"))
    prober.arm()
    assert prober.thread is None
    prober.close()

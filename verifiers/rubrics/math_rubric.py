"""MathRubric: checks a math answer symbolically with math-verify, under a time limit.

math-verify's own time limits (``parsing_timeout`` / ``timeout_seconds``) use
``signal.alarm``, which only works on the main thread; rubrics run inside an
event loop, often off the main thread (a trainer's background generator). So
math-verify is called with its limits disabled, in a thread of its own, and
this module enforces the limit:

- the awaiting coroutine stops waiting after ``timeout_seconds`` (the event
  loop is never held up), and the check counts as failed;
- the verification thread is then interrupted by raising an exception in it
  (``PyThreadState_SetAsyncExc``), which stops a runaway sympy computation at
  its next Python bytecode, just as math-verify's alarm would. A single
  long-running C call cannot be interrupted (nor can it by the alarm); such a
  thread is abandoned and ends when the call returns.

At most ``verify_concurrency`` checks run at once (per event loop), and a
check's clock starts when it gets its turn: with the GIL, hundreds of
simultaneous sympy threads would only slow each other past the limit.

math-verify is an optional extra (``verifiers[envs]``), imported on first use.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from verifiers.compat.refused import refusing_getattr
from verifiers.errors import MissingExtraError
from verifiers.parsers.parser import Parser
from verifiers.parsers.think_parser import ThinkParser
from verifiers.rubrics.rubric import Rubric
from verifiers.types import Messages, RewardFunc
from verifiers.utils.data import extract_boxed_answer


class VerificationTimeout(Exception):
    """Raised inside a verification thread to stop it once its time is up."""


def _set_async_exc(thread_id: int, exc_type: type[BaseException] | None) -> int:
    """Schedule ``exc_type`` in a thread (None clears a pending one); number of threads affected."""
    try:
        set_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
    except AttributeError:  # not CPython: threads cannot be interrupted
        return 0
    return set_exc(ctypes.c_ulong(thread_id), ctypes.py_object(exc_type) if exc_type else None)


class _InterruptibleCall:
    """Runs ``fn(*args)`` in a dedicated daemon thread that ``interrupt`` can stop.

    A dedicated thread (not a pool's) makes sure the interrupt lands in this
    computation and never in unrelated work that a pool thread picked up next.
    """

    def __init__(self, fn: Callable[..., Any], *args: Any):
        self._fn, self._args = fn, args
        self._lock = threading.Lock()
        self._running = True
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        # RUNNING futures cannot be cancelled, so the waiter giving up never
        # makes set_result below fail.
        self.future.set_running_or_notify_cancel()
        self._thread = threading.Thread(target=self._run, name="verifiers-math-verify", daemon=True)

    def start(self) -> _InterruptibleCall:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            try:
                result = self._fn(*self._args)
            except BaseException as e:  # includes an injected VerificationTimeout
                self._finish()
                self.future.set_exception(e)
            else:
                self._finish()
                self.future.set_result(result)
        except VerificationTimeout:
            pass  # the interrupt arrived after the work was done; nobody waits any more

    def _finish(self) -> None:
        with self._lock:
            self._running = False
        # No interrupt can be scheduled from now on; drop one that is pending.
        _set_async_exc(threading.get_ident(), None)

    def interrupt(self) -> bool:
        """Stop the computation if it is still running; whether an interrupt was sent."""
        with self._lock:
            if not self._running or self._thread.ident is None:
                return False
            return _set_async_exc(self._thread.ident, VerificationTimeout) == 1


async def run_with_time_limit(seconds: float, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in its own thread; ``asyncio.TimeoutError`` (and the thread interrupted) after ``seconds``."""
    call = _InterruptibleCall(fn, *args).start()
    try:
        return await asyncio.wait_for(asyncio.wrap_future(call.future), seconds)
    except BaseException:  # timeout or cancellation: do not leave the computation running
        call.interrupt()
        raise


def _as_boxed(text: str) -> str:
    # math-verify's LaTeX extraction looks for a boxed or $-delimited answer, so
    # both sides are boxed and read the same way. Always, as 0.1.4 did: an
    # answer that is itself boxed is read from the inner box either way.
    return f"\\boxed{{{text}}}"


def verify_answer(answer: str, response: str) -> bool:
    """Whether ``response`` equals the reference ``answer`` mathematically (no time limit)."""
    from math_verify import parse, verify

    gold = parse(_as_boxed(answer), parsing_timeout=None)
    predicted = parse(_as_boxed(response), parsing_timeout=None)
    if not gold or not predicted:
        return False
    return bool(verify(gold, predicted, timeout_seconds=None))


class MathRubric(Rubric):
    """Rewards 1.0 when the parsed answer is mathematically equal to the reference answer.

    ``correct_answer_reward_func`` (weight 1.0) is always added after any
    ``funcs`` given. The response is ``parser.parse_answer(completion)``; the
    default parser reads the ``\\boxed{...}`` answer after the think block. A
    check that runs past ``timeout_seconds`` scores 0.0 and is counted in
    ``correct_answer_reward_func_error``.
    """

    verify_concurrency: int = 4
    """Checks run at once per event loop (CPU-bound; more only add GIL contention)."""

    def __init__(
        self,
        funcs: Sequence[RewardFunc] | None = None,
        weights: Sequence[float] | None = None,
        parser: Parser | None = None,
        timeout_seconds: float = 5.0,
        **kwargs: Any,
    ):
        try:
            import math_verify  # noqa: F401 - fail at construction, not at the first rollout
            import math_verify.grader
            import math_verify.parser
        except ImportError as e:
            raise MissingExtraError("MathRubric", "envs", e) from e
        # math-verify warns once that its time limit is off; this module enforces one.
        math_verify.parser.TIMEOUT_WARNING_SHOWN = True
        math_verify.grader.TIMEOUT_WARNING_SHOWN = True
        parser = parser if parser is not None else ThinkParser(extract_fn=extract_boxed_answer)
        super().__init__(funcs=funcs, weights=weights, parser=parser, **kwargs)
        self.timeout_seconds = timeout_seconds
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        self.add_reward_func(self.correct_answer_reward_func)

    def _slot(self) -> asyncio.Semaphore:
        # One semaphore per loop: an asyncio.Semaphore is bound to the loop it first waits on.
        loop = asyncio.get_running_loop()
        slot = self._slots.get(loop)
        if slot is None:
            slot = self._slots[loop] = asyncio.Semaphore(max(1, self.verify_concurrency))
        return slot

    async def verify(self, answer: str, response: str) -> bool:
        """``verify_answer`` under the time limit; raises ``TimeoutError`` when it runs out."""
        async with self._slot():
            try:
                return await run_with_time_limit(self.timeout_seconds, verify_answer, answer, response)
            except asyncio.TimeoutError:
                raise TimeoutError(f"math-verify took longer than {self.timeout_seconds} s") from None

    async def correct_answer_reward_func(self, completion: Messages, answer: Any, **kwargs: Any) -> float:
        """1.0 if the parsed response is mathematically equal to ``answer``, else 0.0."""
        try:
            response = self.parser.parse_answer(completion) or ""
        except Exception:  # 0.1.4: a completion the parser cannot read scores 0.0
            return 0.0
        if not response or answer is None or str(answer).strip() == "":
            return 0.0
        return 1.0 if await self.verify(str(answer), str(response)) else 0.0


# Names of upstream's module that are not offered here: refused in one line (verifiers.compat.refused).
__getattr__ = refusing_getattr(__name__)

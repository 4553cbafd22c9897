"""``@vf.stop``, ``@vf.cleanup``, ``@vf.teardown``: lifecycle hooks marked on environment methods
(the 0.1.8+ environment API).

- ``@vf.stop``: ``async def name(self, state) -> bool``. A stop condition; a
  ``MultiTurnEnv`` checks every one before the first model call and after each
  model turn, and ends the rollout at the first that is true (its name goes to
  ``state["stop_condition"]``).
- ``@vf.cleanup``: ``async def name(self, state) -> None``. Runs once when a
  rollout ends, however it ends (stop condition, ``is_completed``, limit,
  failure, cancellation), to release per-rollout resources.
- ``@vf.teardown``: ``async def name(self) -> None``. Runs once per
  environment, from :meth:`Environment.teardown` or at interpreter exit, to
  release environment-wide resources.

Each takes an optional ``priority`` (``@vf.stop(priority=10)``): higher runs
first, ties in name order, as upstream documents. A hook may be sync or async.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["HOOK_KINDS", "cleanup", "find_hooks", "stop", "teardown"]

F = TypeVar("F", bound=Callable[..., Any])

HOOK_KINDS = ("stop", "cleanup", "teardown")
# Marker attributes set on the function object. Private names, so a method that
# merely happens to be called ``stop`` or ``cleanup`` is never taken for a hook.
_MARK = "_vf_hook_{}"
_PRIORITY = "_vf_hook_{}_priority"


def _marker(kind: str) -> Callable[..., Any]:
    def decorate(func: F | None = None, *, priority: int = 0, **options: Any) -> Any:
        if kind == "cleanup" and options.get("stage", "rollout") != "rollout":
            # 0.1.14's @vf.cleanup(stage="group"): one cleanup per group of rollouts; not offered.
            from verifiers.errors import ConfigError

            raise ConfigError(
                f"@vf.cleanup(stage={options['stage']!r}) is not supported: cleanups run once per rollout here",
                hint='drop stage= (or pass stage="rollout")',
            )
        if set(options) - ({"stage"} if kind == "cleanup" else set()):
            raise TypeError(f"@vf.{kind} got unexpected arguments: {', '.join(sorted(options))}")

        def mark(f: F) -> F:
            if not callable(f):
                raise TypeError(f"@vf.{kind} decorates a method, got {f!r}")
            setattr(f, _MARK.format(kind), True)
            setattr(f, _PRIORITY.format(kind), int(priority))
            return f

        return mark if func is None else mark(func)

    decorate.__name__ = kind
    decorate.__qualname__ = kind
    return decorate


stop = _marker("stop")
stop.__doc__ = (
    "Mark a method ``(self, state) -> bool`` as a stop condition (``@vf.stop`` or ``@vf.stop(priority=N)``)."
)
cleanup = _marker("cleanup")
cleanup.__doc__ = "Mark a method ``(self, state) -> None`` to run when each rollout ends (``@vf.cleanup``)."
teardown = _marker("teardown")
teardown.__doc__ = (
    "Mark a method ``(self) -> None`` to run once when the environment is torn down (``@vf.teardown``)."
)


def find_hooks(obj: Any, kind: str) -> list[Callable[..., Any]]:
    """The bound methods of ``obj`` marked ``@vf.<kind>``, highest priority first, then by name.

    Walks the class dictionaries (not ``dir(obj)``), so properties are never
    evaluated; a subclass's method of the same name replaces the base's, marked
    or not (an override without the decorator turns the hook off).
    """
    if kind not in HOOK_KINDS:
        raise ValueError(f"unknown hook kind {kind!r}; expected one of {HOOK_KINDS}")
    seen: set[str] = set()
    found: list[tuple[int, str, Callable[..., Any]]] = []
    for klass in type(obj).__mro__:
        for name, attr in vars(klass).items():
            if name in seen:
                continue
            seen.add(name)
            func = attr.__func__ if isinstance(attr, (staticmethod, classmethod)) else attr
            if callable(func) and getattr(func, _MARK.format(kind), False):
                found.append((getattr(func, _PRIORITY.format(kind), 0), name, getattr(obj, name)))
    found.sort(key=lambda item: (-item[0], item[1]))
    return [method for _, _, method in found]

"""Methods whose call changed between 0.1.x releases: one method here takes each release's form.

Upstream changed some methods' parameters in place between releases (``score_rollout(prompt,
completion, answer, state, ...)`` in 0.1.4, ``score_rollout(state, score_sem)`` from 0.1.8), so
one signature cannot serve code written for both. ``also_takes(form, when=...)`` decorates our
method (written in one form) with another: ``form`` is a function with the other release's
signature (``self`` first) that does the work for a call in that form, usually by calling the
method in ours; ``when(*args, **kwargs)`` tells from a call's arguments which form it is in (a
type that only one form passes first, say). The release walk (tests/compat/) checks a release's
signature against the method and each of its forms (``forms_of``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

_FORMS = "__vf_forms__"


def also_takes(form: Callable[..., Any], *, when: Callable[..., bool]) -> Callable[[Callable[..., Any]], Any]:
    """Decorate a method so that a call that ``when`` recognizes goes to ``form`` instead."""

    def decorate(method: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(method):

            @functools.wraps(method)
            async def either(self: Any, *args: Any, **kwargs: Any) -> Any:
                if when(*args, **kwargs):
                    return await form(self, *args, **kwargs)
                return await method(self, *args, **kwargs)

        else:

            @functools.wraps(method)
            def either(self: Any, *args: Any, **kwargs: Any) -> Any:
                if when(*args, **kwargs):
                    return form(self, *args, **kwargs)
                return method(self, *args, **kwargs)

        setattr(either, _FORMS, (*forms_of(method), form))
        return either

    return decorate


def forms_of(method: Any) -> tuple[Callable[..., Any], ...]:
    """The other forms ``method`` takes (empty for a plain method)."""
    return getattr(method, _FORMS, ())

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

from verifiers.compat.refused import inherited_entry

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


_LATER = "the later releases' form is followed here (docs/env-api-by-release.md: where releases disagree)"
_EARLIER = "0.1.4's form is kept here, the one 0.1.4-0.1.5 modules and scripts call"

OTHER_FORMS: dict[tuple[str, str], str] = {
    # (class, member) -> how a release's other call form of that member is handled, where one
    # signature cannot show both: the method tells the forms apart itself, or one form is followed.
    ("MultiTurnEnv", "rollout"): (
        "takes both forms: rollout(client, model, prompt, ...) (0.1.4, returns (completion, state)) and "
        "rollout(input, client, model, sampling_args) (0.1.8+, returns the state), told apart by the first argument"
    ),
    ("Environment", "rollout"): "abstract here; MultiTurnEnv's (every environment's) takes both forms",
    ("EnvGroup", "rollout"): "routes to the member environment's rollout, which takes both forms",
    ("Environment", "get_model_response"): f"0.1.9+'s state= argument is not taken; {_EARLIER}",
    ("Environment", "init_state"): (
        "0.1.8+'s init_state(input, client, model, sampling_args) is taken; 0.1.6-0.1.7's "
        "init_state(prompt, completion, answer, task, info, example_id) is not"
    ),
    ("Environment", "run_rollouts"): f"0.1.6-0.1.7's run_rollouts(inputs, ...) is not taken; {_EARLIER}",
    ("Environment", "make_dataset"): (
        "0.1.4's make_dataset(results, ...) is taken; pushing to the Hub (push_to_hf_hub=, hub_name=) and "
        "0.1.5's rollouts_per_example= are not (save the returned dataset yourself)"
    ),
    ("Environment", "format_dataset"): f"0.1.7+'s map_kwargs= is not taken; {_EARLIER}",
    ("Environment", "process_env_results"): f"0.1.6-0.1.7's message_type= is not taken; {_EARLIER}",
    ("Environment", "process_env_results_vllm"): f"0.1.6-0.1.7's message_type= is not taken; {_EARLIER}",
    (
        "Environment",
        "generate_sync",
    ): "model is required here (0.1.8+ read a default from the client); pass it",
    ("SandboxEnv", "bash"): f"0.1.6-0.1.8's bash without sandbox_state; {_LATER}",
    ("SandboxEnv", "destroy_sandbox"): f"0.1.6-0.1.7's destroy_sandbox(sandbox_id); {_LATER}",
    ("SandboxEnv", "post_rollout"): f"0.1.6-0.1.7's post_rollout(messages, state, ...); {_LATER}",
    ("PythonEnv", "python"): f"0.1.6-0.1.8's python(code, sandbox_id, python_state, ...) order; {_LATER}",
    ("MathRubric", "correct_answer_reward_func"): (
        "0.1.4-0.1.8 passed the parser first (a quirk of how it was bound); reward functions are called "
        "by parameter name here, so a rubric calling it that way keeps working"
    ),
    ("EnvGroupRubric", "score_rollouts"): f"0.1.6-0.1.7's example_ids= is not taken; {_EARLIER}",
}
"""Members whose releases' signatures conflict, and how each other form is handled here. The release
walk accepts a signature mismatch of a member listed here (for its class and subclasses)."""


def other_form(cls: type, name: str) -> str | None:
    """How a listed member of ``cls`` (or of a class it inherits from) handles other releases' forms."""
    return inherited_entry(OTHER_FORMS, cls, name)

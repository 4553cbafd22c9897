"""JudgeRubric: reward functions that ask another model to grade a response.

Reward functions of a JudgeRubric may take a ``judge`` argument: an async
callable ``await judge(prompt, completion, answer, state) -> str`` that fills
``judge_prompt`` with the question, the reference answer and the parsed
response, sends it to ``judge_model`` and returns the reply text. Replies are
cached in ``state["judge_response"]`` (keyed by the filled-in judge prompt),
so several functions judging the same rollout cost one call.

Example::

    rubric = vf.JudgeRubric()

    async def correct(prompt, completion, answer, state, judge) -> float:
        reply = await judge(prompt, completion, answer, state)
        return 1.0 if "yes" in reply.lower() else 0.0

    rubric.add_reward_func(correct)
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Sequence
from typing import Any

from verifiers.errors import ConfigError, TemplateIndexError, TemplateKeyError
from verifiers.parsers.parser import Parser, message_text
from verifiers.rubrics.rubric import Rubric
from verifiers.types import Info, Messages, RewardFunc, SamplingArgs, State, message_field
from verifiers.utils.async_utils import is_async_callable

# The text 0.1.4 sent, word for word: a judge's verdict depends on the prompt,
# so a different default would change the rewards of every rubric that uses it.
DEFAULT_JUDGE_PROMPT = """Given a ground truth answer \
and a response, determine if the response is correct.

Question:
```
{question}
```

Ground truth answer:
```
{answer}
```

Response:
```
{response}
```

Respond either "yes" or "no" only."""


def question_text(prompt: Messages) -> str:
    """The question of a prompt: the string itself, or the text of its last message (0.1.4)."""
    if isinstance(prompt, str):
        return prompt
    if not prompt or message_field(prompt[-1], "content") is None:
        return ""
    return message_text(prompt[-1])


def judge_request_args(sampling_args: SamplingArgs | None) -> dict[str, Any]:
    """``judge_sampling_args`` as chat-completion arguments: None values dropped, and
    ``max_tokens`` sent as ``max_completion_tokens`` (the chat API's name), as in 0.1.4."""
    args = {k: v for k, v in (sampling_args or {}).items() if v is not None}
    if "max_tokens" in args:
        args["max_completion_tokens"] = args.pop("max_tokens")
    return args


def reply_text(response: Any) -> str:
    """The text of a chat completion response (an OpenAI object or a dict)."""
    choices = message_field(response, "choices")
    if not choices:
        raise ValueError(f"judge response has no choices: {response!r:.200}")
    content = message_field(message_field(choices[0], "message"), "content")
    return content if isinstance(content, str) else ""


def fill_judge_prompt(template: str, **fields: Any) -> str:
    """``template.format(**fields)``; a bad template raises what ``str.format`` raised (KeyError,
    IndexError, ValueError), as upstream's ``judge`` did, as a typed error whose message starts
    with the same words and then says how to fix the template."""
    try:
        return template.format(**fields)
    except (KeyError, IndexError, ValueError) as e:
        cls = {KeyError: TemplateKeyError, IndexError: TemplateIndexError}.get(type(e), ConfigError)
        raise cls(
            f"{e if not isinstance(e, KeyError) else repr(e.args[0])}: judge_prompt is not a template "
            f"JudgeRubric.judge can fill",
            f"judge() fills only {', '.join('{' + k + '}' for k in fields)}; write literal braces as "
            "{{ }}, or override judge() to fill fields of your own",
        ) from e


class JudgeRubric(Rubric):
    """A rubric whose reward functions can call an LLM judge.

    Args:
        parser: extracts the response from a completion (``parse_answer``).
        parallelize_scoring: as for ``Rubric``; False by default (0.1.4), so a
            batch's judge calls go out one rollout at a time.
        judge_client: an OpenAI-compatible client, async (``AsyncOpenAI``) or
            sync (``OpenAI``; its calls run in a thread). Default: an
            ``AsyncOpenAI()`` created at the first judge call, so a rubric can
            be built without ``OPENAI_API_KEY`` set.
        judge_model: the model name sent to the client.
        judge_prompt: a ``str.format`` template with ``{question}``,
            ``{answer}`` and ``{response}`` (write literal braces as ``{{ }}``).
            As upstream, it is filled (and so checked) only by ``judge()``: a
            template with fields of its own is fine if the code that uses it
            fills them.
        judge_sampling_args: extra arguments for ``chat.completions.create``
            (e.g. ``temperature``, ``max_tokens``, sent as
            ``max_completion_tokens``; non-OpenAI ones go under ``extra_body``).
            None values are left out.

    The positional order of the arguments is 0.1.4's. Reward functions may
    also take ``judge_client``, ``judge_model``, ``judge_prompt`` and
    ``judge_sampling_args``.
    """

    reward_arg_names = Rubric.reward_arg_names + (
        "judge",
        "judge_client",
        "judge_model",
        "judge_prompt",
        "judge_sampling_args",
    )

    def __init__(
        self,
        parser: Parser | None = None,
        parallelize_scoring: bool = False,
        judge_client: Any | None = None,
        judge_model: str = "gpt-4.1-nano",
        judge_sampling_args: SamplingArgs | None = None,
        judge_prompt: str = DEFAULT_JUDGE_PROMPT,
        funcs: Sequence[RewardFunc] | None = None,
        weights: Sequence[float] | None = None,
        **kwargs: Any,
    ):
        super().__init__(
            funcs=funcs, weights=weights, parser=parser, parallelize_scoring=parallelize_scoring, **kwargs
        )
        # Like upstream, the template is not checked here: subclasses and reward functions
        # may fill fields of their own (e.g. {context}) before or instead of judge().
        self._judge_client = judge_client
        self.judge_model = judge_model
        self.judge_prompt = judge_prompt
        self.judge_sampling_args = dict(judge_sampling_args or {})

    @property
    def judge_client(self) -> Any:
        """The client used by ``judge``; the default ``AsyncOpenAI()`` is made on first access."""
        if self._judge_client is None:
            from openai import AsyncOpenAI  # deferred: it reads OPENAI_API_KEY when created

            self._judge_client = AsyncOpenAI()
        return self._judge_client

    @judge_client.setter
    def judge_client(self, client: Any) -> None:
        self._judge_client = client

    def _reward_func_args(
        self, prompt: Messages, completion: Messages, answer: Any, state: State, task: str, info: Info
    ) -> dict[str, Any]:
        args = super()._reward_func_args(prompt, completion, answer, state, task, info)
        args["judge"] = self.judge
        args["judge_client"] = self._client_for_args()
        args["judge_model"] = self.judge_model
        args["judge_prompt"] = self.judge_prompt
        args["judge_sampling_args"] = self.judge_sampling_args
        return args

    def _client_for_args(self) -> Any:
        # The default client is made lazily (it needs OPENAI_API_KEY): a reward
        # function gets None rather than scoring failing for everyone.
        try:
            return self.judge_client
        except Exception:
            return None

    async def judge(
        self, prompt: Messages, completion: Messages, answer: Any, state: State | None = None, **kwargs: Any
    ) -> str:
        """Ask the judge model about this rollout and return its reply (cached in ``state``)."""
        # As in 0.1.4, a missing answer or response is written as "None": the
        # prompt, and so the verdict, stay the same as there.
        response = self.parser.parse_answer(completion)
        text = fill_judge_prompt(
            self.judge_prompt, question=question_text(prompt), answer=answer, response=response
        )
        cache = state.get("judge_response") if state is not None else None
        if not isinstance(cache, dict):
            cache = {}
            if state is not None:
                state["judge_response"] = cache
        if text in cache:
            return cache[text]
        reply = await self._ask(text)
        cache[text] = reply
        return reply

    async def _ask(self, text: str) -> str:
        create = self.judge_client.chat.completions.create
        kwargs = judge_request_args(self.judge_sampling_args)
        kwargs["model"] = self.judge_model
        kwargs["messages"] = [{"role": "user", "content": text}]
        if is_async_callable(create):  # AsyncOpenAI (its method wraps an async def)
            result = create(**kwargs)
        else:
            # A sync client blocks for the whole HTTP call: keep it off the event loop.
            result = await asyncio.to_thread(create, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return reply_text(result)

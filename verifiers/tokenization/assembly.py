"""Token-in/token-out assembly of rollouts into training samples.

:func:`process_rollouts` turns finished rollouts (their ``state["turn_tokens"]``)
and rewards into :class:`~verifiers.types.ProcessedOutputs`, following the
contract in ``docs/architecture.md`` ("Multi-turn token assembly"):

* A rollout with turns ``t0..tk`` is one sample: ``prompt = t0.prompt_ids`` and
  ``completion = t0.completion_ids + env_1 + t1.completion_ids + ... + tk.completion_ids``
  with ``env_i = t_i.prompt_ids[len(t_{i-1}.prompt_ids + t_{i-1}.completion_ids):]``:
  the environment's messages (and the chat template's glue), tokenized once, by
  the server. Assistant text is never retokenized.
* Model tokens have loss mask 1 and their sampling log-probs. Env tokens have
  loss mask 0 and log-prob ``0.0`` when ``mask_env_responses``; otherwise mask 1
  and log-prob ``NaN`` (see below).
* If a turn's ``prompt_ids`` does not start with the previous turn's prompt +
  completion (the chat template rewrote an earlier turn, e.g. Qwen3 dropping
  ``<think>`` blocks, or the server re-encoded sampled text differently), the
  rollout becomes one sample per turn (each ``t_i.prompt_ids`` /
  ``t_i.completion_ids``, all with the rollout's reward), counted in
  ``metrics["template_rewrites"]`` and warned about once. Never an error.
* The source of a rollout's turns is ``state["trajectory"]`` (0.1.8+: one step per
  model call, each with its ``tokens``) when every step has prompt token ids, else
  ``state["turn_tokens"]``. Both hold the server's tokens; a module may have edited
  or replaced its trajectory steps (upstream's ``add_trajectory_step``), and then
  those are what is trained. A trajectory whose steps are not a linear continuation
  by design (a step's prompt *messages* do not start with the previous step's prompt
  + completion: the module built that prompt itself, e.g. a summary of the history)
  becomes one sample per step, from the step's stored tokens, never re-tokenized;
  counted in ``metrics["trajectory_splits"]``, not as a template rewrite (no warning).
* A rollout without token data (a plain OpenAI endpoint) is retokenized from
  ``state["prompt"]`` / ``state["completion"]`` with the chat template the server
  uses (:func:`render_chat_ids`, tool fallback included): the prompt
  with ``add_generation_prompt=True``, then prompt + completion; the completion is
  what follows the prompt. With ``mask_env_responses`` only the assistant
  messages' spans keep mask 1 (found by tokenizing the message prefixes). Counted
  in ``metrics["retokenized"]``, warned about once.
* A failed rollout (``state["failure"]`` set: an env hook or a model call raised)
  keeps whatever tokens it has but gets loss mask 0 everywhere: its reward of 0
  says nothing about the model's text. Counted in ``metrics["failed"]``; one
  without any turn is not counted as retokenized.

Log-probs: ``completion_logprobs`` is aligned with ``completion_ids``. It holds the
server's sampling log-prob for model tokens, ``0.0`` where the loss mask is 0, and
:data:`UNKNOWN_LOGPROB` (``NaN``) for trained tokens whose sampling log-prob is
unknown: env tokens when ``mask_env_responses=False``, every token of a
retokenized rollout, and tokens the server gave no log-prob for. NaN (rather
than 0.0, which would claim probability 1) makes a forgotten case fail loudly; a
trainer that needs old log-probs must recompute them where
``torch.isnan(logprobs)`` (``metrics["unknown_logprob_tokens"]`` counts them).

Length: with ``max_seq_len > 0`` a sample longer than ``max_seq_len`` tokens
(prompt + completion) keeps its prompt and the first ``max_seq_len - len(prompt)``
completion tokens. If the prompt alone is longer than ``max_seq_len``, the prompt
keeps its last ``max_seq_len`` tokens (the most recent context; the system prompt
is lost) and the completion is empty (counted in ``metrics["prompt_truncated"]``).
Either way the sample is ``is_truncated``, as is every sample of a rollout whose
``state["is_truncated"]`` is set or one of whose turns ended with
``finish_reason == "length"``. ``mask_truncated_completions`` sets a truncated
sample's loss mask to 0; ``zero_truncated_completions`` sets its reward to 0.

Prompt length: :func:`truncate_prompt` shortens a prompt to ``max_prompt_length``
tokens *before* it is sent to the server (the trainer applies it to every training
prompt), so the tokens trained are the tokens the server conditioned on.

Metrics (counts, as floats): ``rollouts``, ``samples``, ``template_rewrites``,
``trajectory_splits``, ``retokenized``, ``truncated`` (samples), ``prompt_truncated`` (samples),
``unknown_logprob_tokens``, ``failed`` (rollouts).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from verifiers.errors import ConfigError
from verifiers.failures import failure_of
from verifiers.types import ProcessedOutputs, State, TurnTokens
from verifiers.utils.logging import warn_once

logger = logging.getLogger("verifiers.tokenization.assembly")

UNKNOWN_LOGPROB = float("nan")
"""Log-prob stored for a trained token whose sampling log-prob is unknown."""

__all__ = ["UNKNOWN_LOGPROB", "process_rollouts", "as_turn_tokens", "render_chat_ids", "truncate_prompt"]


@dataclass
class _Sample:
    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    completion_mask: list[int] = field(default_factory=list)
    completion_logprobs: list[float] = field(default_factory=list)

    def add(self, ids: Sequence[int], mask: int, logprobs: Sequence[float] | None) -> None:
        self.completion_ids.extend(int(t) for t in ids)
        self.completion_mask.extend([mask] * len(ids))
        if mask == 0:
            self.completion_logprobs.extend([0.0] * len(ids))
        elif logprobs is None:
            self.completion_logprobs.extend([UNKNOWN_LOGPROB] * len(ids))
        else:
            self.completion_logprobs.extend(logprobs)


def as_turn_tokens(turn: Any) -> TurnTokens:
    """A ``TurnTokens`` from a ``TurnTokens`` or a dict with its fields (states read back from JSON)."""
    if isinstance(turn, TurnTokens):
        return turn
    if isinstance(turn, Mapping):
        return TurnTokens(
            prompt_ids=list(turn.get("prompt_ids") or []),
            completion_ids=list(turn.get("completion_ids") or []),
            completion_logprobs=list(turn.get("completion_logprobs") or []),
            finish_reason=turn.get("finish_reason"),
        )
    raise ConfigError(
        f"state['turn_tokens'] holds a {type(turn).__name__}, expected TurnTokens or a dict",
        hint="environments must append verifiers.types.TurnTokens to state['turn_tokens']",
    )


def _turn_logprobs(turn: TurnTokens) -> list[float]:
    """Sampling log-probs aligned with ``completion_ids``; NaN where the server gave none."""
    n = len(turn.completion_ids)
    lps = [UNKNOWN_LOGPROB if lp is None else float(lp) for lp in turn.completion_logprobs[:n]]
    if len(turn.completion_logprobs) != n:
        if turn.completion_logprobs:
            warn_once(
                logger,
                "tokens:logprob-length",
                "a turn has %d log-probs for %d completion tokens; missing ones are NaN (recomputed by the trainer)",
                len(turn.completion_logprobs),
                n,
            )
        lps.extend([UNKNOWN_LOGPROB] * (n - len(lps)))
    return lps


def _has_token_data(turns: list[TurnTokens]) -> bool:
    return bool(turns) and all(t.prompt_ids for t in turns)


def _assemble(turns: list[TurnTokens], mask_env_responses: bool) -> list[_Sample] | None:
    """One sample from consecutive turns, or None if a turn's prompt does not extend the previous turn."""
    first = turns[0]
    sample = _Sample(prompt_ids=[int(t) for t in first.prompt_ids])
    sample.add(first.completion_ids, 1, _turn_logprobs(first))
    prev_len = len(first.prompt_ids) + len(first.completion_ids)
    prev_prompt, prev_completion = first.prompt_ids, first.completion_ids
    for turn in turns[1:]:
        p = turn.prompt_ids
        n_prompt = len(prev_prompt)
        if (
            len(p) < prev_len
            or list(p[:n_prompt]) != list(prev_prompt)
            or list(p[n_prompt:prev_len]) != list(prev_completion)
        ):
            return None
        env = p[prev_len:]
        sample.add(env, 0 if mask_env_responses else 1, None)
        sample.add(turn.completion_ids, 1, _turn_logprobs(turn))
        prev_len = len(p) + len(turn.completion_ids)
        prev_prompt, prev_completion = p, turn.completion_ids
    return [sample]


def _per_turn(turns: list[TurnTokens]) -> list[_Sample]:
    samples = []
    for turn in turns:
        s = _Sample(prompt_ids=[int(t) for t in turn.prompt_ids])
        s.add(turn.completion_ids, 1, _turn_logprobs(turn))
        samples.append(s)
    return samples


def trajectory_turns(state: Mapping[str, Any]) -> list[TurnTokens] | None:
    """``state["trajectory"]``'s steps as turns (their ``tokens``: prompt/completion ids and
    log-probs; a truncated step reads as ``finish_reason == "length"``), or None when the
    state has no trajectory or a step lacks prompt token ids (then ``turn_tokens`` is used)."""
    steps = state.get("trajectory") or []
    turns = []
    for step in steps:
        tokens = step.get("tokens") if isinstance(step, Mapping) else None
        if not isinstance(tokens, Mapping) or not tokens.get("prompt_ids"):
            return None
        turn = as_turn_tokens(tokens)
        if step.get("is_truncated") or tokens.get("is_truncated"):
            turn.finish_reason = "length"
        turns.append(turn)
    return turns or None


def _message_key(message: Any) -> tuple[Any, str]:
    if isinstance(message, Mapping):
        return message.get("role"), str(message.get("content"))
    return None, str(message)


def trajectory_is_linear(steps: Sequence[Mapping[str, Any]]) -> bool:
    """Whether each step's prompt messages start with the previous step's prompt + completion
    (role and content compared), as the default turn loop builds them. A module that builds
    prompts itself (upstream's ``get_prompt_messages`` override) breaks this on purpose."""
    for prev, step in zip(steps, steps[1:], strict=False):
        before = [_message_key(m) for m in [*(prev.get("prompt") or []), *(prev.get("completion") or [])]]
        now = [_message_key(m) for m in (step.get("prompt") or [])]
        if isinstance(prev.get("prompt"), str) or now[: len(before)] != before:
            return False
    return True


# ---------------------------------------------------------------------------
# 0.1.4-style states: token ids in the vLLM responses, no turn_tokens


def response_token_ids(response: Any) -> list[int] | None:
    """The sampled token ids of a vLLM response (``token_id:N`` tokens, as vLLM returns them with
    ``return_tokens_as_token_ids``); None if it has none."""
    choices = _field(response, "choices")
    if not choices:
        return None
    logprobs = _field(choices[0], "logprobs")
    if logprobs is None:
        return None
    content = _field(logprobs, "content")
    if content is not None:  # chat completion
        tokens = [_field(t, "token") for t in content]
    else:  # text completion
        tokens = _field(logprobs, "tokens")
    if tokens is None or not all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
        return None
    return [int(t.split(":")[-1]) for t in tokens]


def response_logprobs(response: Any) -> list[float]:
    """The sampling log-probs of a vLLM response, aligned with :func:`response_token_ids`."""
    logprobs = _field(_field(response, "choices")[0], "logprobs")
    content = _field(logprobs, "content")
    if content is not None:
        return [float(_field(t, "logprob")) for t in content]
    return [float(lp) for lp in _field(logprobs, "token_logprobs")]


def _field(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)


def turns_from_responses(
    prompt: Any, completion: Any, state: State, processing_class: Any
) -> list[TurnTokens] | None:
    """``TurnTokens`` for a rollout whose state holds vLLM responses with token ids but no
    ``turn_tokens`` (how 0.1.4 environments kept them); None if a response has no token ids.

    The tokens are 0.1.4's: the prompt rendered with the generation prompt, each
    assistant turn's sampled tokens, and each run of environment messages as
    the tokens by which the chat template of the messages so far (without a
    generation prompt) grows when they are added. For the completion API
    (``state["responses_start_idx"]`` gives where each response's text starts),
    the environment text is what the tokenizer adds to the text so far. Each
    turn's ``prompt_ids`` is everything before it, so :func:`process_rollouts`
    assembles the sample 0.1.4 did. A trailing run of environment messages
    becomes a last turn without completion tokens.
    """
    responses = list(state.get("responses") or [])
    ids = [response_token_ids(r) for r in responses]
    if not responses or any(i is None for i in ids):
        return None
    tokenizer = getattr(processing_class, "tokenizer", processing_class)
    turns: list[TurnTokens] = []
    context: list[int] = []

    def model_turn(k: int) -> None:
        turns.append(TurnTokens(list(context), ids[k], response_logprobs(responses[k])))
        context.extend(ids[k])

    def env_turn(before: list[int], after: list[int]) -> None:
        if after[: len(before)] != before:
            raise ConfigError(
                "the chat template does not extend a rollout's tokens when environment messages are added",
                hint="store TurnTokens in state['turn_tokens'] (verifiers' own rollouts do)",
            )
        if not turns:  # environment text before the first model turn belongs to the completion
            turns.append(TurnTokens(list(context), [], []))
        context.extend(after[len(before) :])
        if k_turn[0] < len(responses):
            return
        turns.append(TurnTokens(list(context), [], []))  # trailing environment text

    k_turn = [0]
    if isinstance(completion, str):
        starts = list(state.get("responses_start_idx") or [])
        if len(starts) != len(responses):
            return None
        context.extend(_to_ids(tokenizer.encode(prompt)))
        consumed, idx = prompt, 0
        for k, (response, start) in enumerate(zip(responses, starts, strict=True)):
            if start > idx:
                text = completion[idx:start]
                env_turn(_to_ids(tokenizer.encode(consumed)), _to_ids(tokenizer.encode(consumed + text)))
                consumed += text
            model_turn(k)
            k_turn[0] = k + 1
            text = _field(_field(response, "choices")[0], "text") or ""
            consumed += text
            idx = start + len(text)
        if idx < len(completion):
            text = completion[idx:]
            env_turn(_to_ids(tokenizer.encode(consumed)), _to_ids(tokenizer.encode(consumed + text)))
        return turns

    def template(messages: list[dict[str, Any]], generation_prompt: bool) -> list[int]:
        return _to_ids(
            processing_class.apply_chat_template(
                messages, add_generation_prompt=generation_prompt, tokenize=True
            )
        )

    consumed = [_plain_message(m) for m in prompt]
    context.extend(template(consumed, True))
    messages = [_plain_message(m) for m in completion]
    i = 0
    while i < len(messages):
        if messages[i].get("role") == "assistant":
            if k_turn[0] >= len(responses):
                return None  # more assistant messages than responses
            model_turn(k_turn[0])
            k_turn[0] += 1
            consumed.append(messages[i])
            i += 1
            continue
        j = i
        while j < len(messages) and messages[j].get("role") != "assistant":
            j += 1
        env_turn(template(consumed, False), template(consumed + messages[i:j], False))
        consumed += messages[i:j]
        i = j
    return turns if k_turn[0] == len(responses) else None


# ---------------------------------------------------------------------------
# fallback: retokenize with the chat template


def _to_ids(out: Any) -> list[int]:
    if isinstance(out, Mapping) or hasattr(out, "input_ids"):
        out = out["input_ids"]
    if hasattr(out, "tolist"):
        out = out.tolist()
    if out and isinstance(out[0], (list, tuple)):
        out = out[0]
    return [int(t) for t in out]


def _plain_message(msg: Any) -> dict[str, Any]:
    if isinstance(msg, Mapping):
        return dict(msg)
    if hasattr(msg, "model_dump"):  # an openai message object
        return msg.model_dump(exclude_none=True)
    raise ConfigError(
        f"a chat message is a {type(msg).__name__}, expected a dict",
        hint="store OpenAI-style message dicts in state['prompt'] / state['completion']",
    )


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _retokenize(state: State, processing_class: Any, mask_env_responses: bool) -> _Sample:
    prompt = state.get("prompt")
    completion = state.get("completion")
    tokenizer = getattr(processing_class, "tokenizer", processing_class)

    if isinstance(prompt, str) or isinstance(completion, str):  # completion API
        p_text, c_text = prompt or "", completion or ""
        p_ids = _to_ids(tokenizer(p_text))
        full = _to_ids(tokenizer(p_text + c_text))
        if full[: len(p_ids)] == p_ids:
            c_ids = full[len(p_ids) :]
        else:  # the prompt's last token merged with the completion's first
            c_ids = _to_ids(tokenizer(c_text, add_special_tokens=False))
        sample = _Sample(prompt_ids=p_ids)
        sample.add(c_ids, 1, None)
        return sample

    prompt_msgs = [_plain_message(m) for m in (prompt or [])]
    completion_msgs = [_plain_message(m) for m in (completion or [])]
    info = state.get("info")
    tools = state.get("oai_tools") or (info.get("oai_tools") if isinstance(info, Mapping) else None)

    def chat_ids(messages: list[dict[str, Any]], add_generation_prompt: bool) -> list[int]:
        return render_chat_ids(processing_class, messages, add_generation_prompt, tools)

    p_ids = chat_ids(prompt_msgs, True)
    if not completion_msgs:
        return _Sample(prompt_ids=p_ids)
    full = chat_ids(prompt_msgs + completion_msgs, False)
    n_prompt = _lcp(p_ids, full)  # == len(p_ids) unless the template renders them differently
    sample = _Sample(prompt_ids=full[:n_prompt])
    c_ids = full[n_prompt:]
    if not mask_env_responses:
        sample.add(c_ids, 1, None)
        return sample
    # Keep mask 1 only on the assistant messages' spans: from the end of the prefix
    # rendered with a generation prompt to the end of the prefix including the message.
    mask = [0] * len(c_ids)
    for j, msg in enumerate(completion_msgs):
        if msg.get("role") != "assistant":
            continue
        start = n_prompt if j == 0 else _lcp(chat_ids(prompt_msgs + completion_msgs[:j], True), full)
        end = _lcp(chat_ids(prompt_msgs + completion_msgs[: j + 1], False), full)
        for k in range(max(start, n_prompt), end):
            mask[k - n_prompt] = 1
    for tok, m in zip(c_ids, mask, strict=True):
        sample.add([tok], m, None)
    return sample


# ---------------------------------------------------------------------------


def render_chat_ids(
    processing_class: Any,
    messages: list[dict[str, Any]],
    add_generation_prompt: bool,
    tools: list[dict] | None,
) -> list[int]:
    """Token ids of ``messages`` as the server renders them.

    Same template as ``vf-vllm`` (:func:`~verifiers.tokenization.chat_template.effective_chat_template`:
    the model's own, or with verifiers' tool preamble where the model's drops ``tools``),
    and the messages and tools in the shape vLLM hands to the template (tool-call
    arguments as objects, tool schemas with vLLM's fields).
    """
    from verifiers.tokenization.chat_template import (
        effective_chat_template,
        own_chat_template,
        server_messages,
        server_tools,
    )

    kw: dict[str, Any] = {}
    tools = server_tools(tools)
    if tools:
        kw["tools"] = tools
    template = effective_chat_template(processing_class)
    if template is not None and template != own_chat_template(processing_class):
        kw["chat_template"] = template
    return _to_ids(
        processing_class.apply_chat_template(
            server_messages(messages), tokenize=True, add_generation_prompt=add_generation_prompt, **kw
        )
    )


def prompt_length(prompt: Any, processing_class: Any, tools: list[dict] | None = None) -> int:
    """Tokens of ``prompt`` as the model sees it: a chat prompt rendered as the server renders it
    (:func:`render_chat_ids`: generation prompt and ``tools`` included), a text prompt tokenized."""
    if isinstance(prompt, str):
        return len(_to_ids(getattr(processing_class, "tokenizer", processing_class)(prompt)))
    return len(render_chat_ids(processing_class, [_plain_message(m) for m in prompt], True, tools))


_MAX_CUTS = 8  # attempts per text; one nearly always suffices


def _cut_text_left(text: str, tokenizer: Any, drop: int) -> str:
    """``text`` without its first ``drop`` tokens (at least one token is dropped)."""
    ids = _to_ids(tokenizer(text, add_special_tokens=False))
    return tokenizer.decode(ids[max(1, drop) :])


def truncate_prompt(
    prompt: Any, processing_class: Any, max_prompt_length: int, tools: list[dict] | None = None
) -> tuple[Any, bool]:
    """``(prompt, truncated)``: ``prompt`` cut from the left to at most ``max_prompt_length`` tokens.

    Why on messages, before the server sees them: vLLM renders and tokenizes the
    prompt itself and returns the ids it conditioned on, which are the ids trained
    (token in, token out). Cutting ids after generation would train on a context the
    model never saw; sending cut ids would need every environment to speak tokens.
    So the oldest context goes first, as whole messages: for chat, the oldest
    non-system messages (a tool reply left without its call goes too), keeping the
    system prompt and the last message; if that is still too long, text is cut from
    the start of that last message, and from the system prompt only when that is not
    enough. A text prompt loses its first tokens. The length is
    counted with the chat template the server uses (:func:`render_chat_ids`; with
    ``$VF_CHAT_TEMPLATE`` when the server was started with ``--chat-template`` or
    ``--no-tool-template``).
    """
    tokenizer = getattr(processing_class, "tokenizer", processing_class)
    n = prompt_length(prompt, processing_class, tools)
    if n <= max_prompt_length:
        return prompt, False
    if isinstance(prompt, str):
        for _ in range(_MAX_CUTS):  # re-encoding the cut text may merge tokens: check again
            if n <= max_prompt_length or not prompt:
                break
            prompt = _cut_text_left(prompt, tokenizer, n - max_prompt_length)
            n = prompt_length(prompt, processing_class)
        return prompt, True
    messages = [_plain_message(m) for m in prompt]  # copies: the dataset row stays as it is
    system = [m for m in messages if m.get("role") == "system"]
    rest = [m for m in messages if m.get("role") != "system"]

    def kept() -> list[dict[str, Any]]:  # in the prompt's own order
        ids = {id(m) for m in system + rest}
        return [m for m in messages if id(m) in ids]

    # 1. Drop whole messages, oldest first, keeping the last one.
    while n > max_prompt_length and len(rest) > 1:
        rest.pop(0)
        while len(rest) > 1 and rest[0].get("role") == "tool":
            rest.pop(0)
        n = prompt_length(kept(), processing_class, tools)
    # 2. Cut text from the left: the remaining non-system message, then the system prompt(s).
    for m in rest + system:
        for _ in range(_MAX_CUTS):
            if n <= max_prompt_length or not isinstance(m.get("content"), str) or not m["content"]:
                break
            m["content"] = _cut_text_left(m["content"], tokenizer, n - max_prompt_length)
            n = prompt_length(kept(), processing_class, tools)
    if n > max_prompt_length:
        raise ConfigError(
            f"max_prompt_length={max_prompt_length} is shorter than the chat template's own tokens "
            f"around an emptied prompt ({n})",
            hint="raise max_prompt_length",
        )
    return kept(), True


def _truncate(sample: _Sample, max_seq_len: int) -> tuple[bool, bool]:
    """Cut ``sample`` to ``max_seq_len`` tokens; return (truncated, prompt_truncated)."""
    if max_seq_len is None or max_seq_len <= 0:
        return False, False
    n_p, n_c = len(sample.prompt_ids), len(sample.completion_ids)
    if n_p + n_c <= max_seq_len:
        return False, False
    if n_p > max_seq_len:
        sample.prompt_ids = sample.prompt_ids[-max_seq_len:]
        keep, prompt_cut = 0, True
    else:
        keep, prompt_cut = max_seq_len - n_p, False
    sample.completion_ids = sample.completion_ids[:keep]
    sample.completion_mask = sample.completion_mask[:keep]
    sample.completion_logprobs = sample.completion_logprobs[:keep]
    return True, prompt_cut


def process_rollouts(
    states: Sequence[State],
    rewards: Sequence[float],
    processing_class: Any,
    max_seq_len: int = -1,
    mask_env_responses: bool = False,
    mask_truncated_completions: bool = False,
    zero_truncated_completions: bool = False,
) -> ProcessedOutputs:
    """Turn rollouts into training samples (see the module docstring for the rules).

    ``states[i]`` and ``rewards[i]`` belong to rollout ``i``; each sample's
    ``rollout_index`` names its rollout. ``processing_class`` (a tokenizer with a
    chat template) is used only for rollouts without token data.
    """
    if len(states) != len(rewards):
        raise ConfigError(
            f"process_rollouts got {len(states)} states but {len(rewards)} rewards",
            hint="pass one reward per rollout state, in the same order",
        )
    out = ProcessedOutputs([], [], [], [], [], [], rollout_index=[], is_truncated=[], metrics={})
    counts = dict.fromkeys(
        (
            "template_rewrites",
            "trajectory_splits",
            "retokenized",
            "truncated",
            "prompt_truncated",
            "unknown_logprob_tokens",
            "failed",
        ),
        0,
    )
    for i, (state, reward) in enumerate(zip(states, rewards, strict=True)):
        from_trajectory = trajectory_turns(state)
        if from_trajectory is not None:
            turns = from_trajectory
        else:
            turns = [as_turn_tokens(t) for t in (state.get("turn_tokens") or [])]
        failed = failure_of(state) is not None
        counts["failed"] += int(failed)
        if _has_token_data(turns):
            samples = _assemble(turns, mask_env_responses)
            if (
                samples is None
                and from_trajectory is not None
                and not trajectory_is_linear(state["trajectory"])
            ):
                counts["trajectory_splits"] += 1  # non-linear by the module's design: one sample per step
                samples = _per_turn(turns)
            if samples is None:
                counts["template_rewrites"] += 1
                warn_once(
                    logger,
                    "tokens:template-rewrite",
                    "a turn's prompt tokens do not extend the previous turn's (the chat template rewrote "
                    "an earlier turn); training such rollouts as one sample per turn (metric template_rewrites)",
                )
                samples = _per_turn(turns)
        else:
            if not (failed and not turns):  # a rollout that failed before any turn has nothing to read
                counts["retokenized"] += 1
                warn_once(
                    logger,
                    "tokens:retokenized",
                    "rollouts without token data (the endpoint returned no token ids) are retokenized with "
                    "the chat template; their log-probs are unknown (NaN) (metric retokenized)",
                )
            samples = [_retokenize(state, processing_class, mask_env_responses)]

        rollout_truncated = bool(state.get("is_truncated")) or any(t.finish_reason == "length" for t in turns)
        for sample in samples:
            cut, prompt_cut = _truncate(sample, max_seq_len)
            truncated = rollout_truncated or cut
            counts["prompt_truncated"] += int(prompt_cut)
            counts["truncated"] += int(truncated)
            if failed or (truncated and mask_truncated_completions):
                sample.completion_mask = [0] * len(sample.completion_ids)
                sample.completion_logprobs = [0.0] * len(sample.completion_ids)
            counts["unknown_logprob_tokens"] += sum(
                1
                for m, lp in zip(sample.completion_mask, sample.completion_logprobs, strict=True)
                if m and math.isnan(lp)
            )
            out.prompt_ids.append(sample.prompt_ids)
            out.prompt_mask.append([1] * len(sample.prompt_ids))
            out.completion_ids.append(sample.completion_ids)
            out.completion_mask.append(sample.completion_mask)
            out.completion_logprobs.append(sample.completion_logprobs)
            out.rewards.append(0.0 if truncated and zero_truncated_completions else float(reward))
            out.rollout_index.append(i)
            out.is_truncated.append(truncated)
    out.metrics = {"rollouts": float(len(states)), "samples": float(len(out.prompt_ids))}
    out.metrics.update({k: float(v) for k, v in counts.items()})
    return out

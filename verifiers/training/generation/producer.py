"""What one generation batch is, and how it is produced.

From the data outwards:

- ``PromptStream``: which dataset rows make up each generation batch. An endless
  stream of per-epoch permutations (seeded), read by a cursor; the cursor is the
  "dataloader position" saved in checkpoints.
- ``RolloutProducer``: one generation batch as a coroutine. Takes the next prompts,
  repeats each ``num_generations`` times, runs ``env.a_generate`` through the
  server, optionally drops groups that carry no signal (oversampling to keep the
  batch full), turns the rollouts into token data (``tokenize_rollouts``, with the
  tokenizer and the ``TokenSettings`` it was given), and returns a ``GeneratedBatch``. Rollouts that could not reach the server make it raise
  ``ServerUnreachableError``: they say nothing about the model, so the batch is
  generated again once the server is back (generator.py).
- ``sampling_args_from_config`` / ``group_filter_from_config`` / ``TokenSettings.from_config``:
  a ``GRPOConfig``'s fields as the producer's sampling arguments, group filter and
  tokenization settings.
- ``PromptTruncation``: the training dataset with each prompt cut to
  ``max_prompt_length`` tokens as it is read (``truncate_prompt`` in
  tokenization/assembly.py says how and why before the server), counted in the batch
  metric ``prompt_truncated_frac``.

``BatchGenerator`` (generator.py) runs the producer ahead of training in a
background thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from verifiers.envs.model_client import client_url
from verifiers.errors import ConfigError, GenerationError, ServerUnreachableError
from verifiers.failures import FailureKind, failure_of
from verifiers.training.config.choices import SAMPLING_SEEDS
from verifiers.training.types import GeneratedBatch
from verifiers.types import GenerateOutputs, ProcessedOutputs
from verifiers.utils.logging import warn_once

logger = logging.getLogger("verifiers.training.generation.producer")

# Rollout state keys kept after processing: enough for metrics and sample tables,
# small and picklable (raw responses and per-turn tokens are dropped once the token
# data is built, so pending batches can be saved with a checkpoint).
LEAN_STATE_KEYS = ("is_truncated", "error", "failure", "timing", "turn", "reward_errors", "tool_timeouts")

# process_rollouts' count of truncated samples in ProcessedOutputs.metrics (tokenization/assembly.py).
TRUNCATED_COUNT = "truncated"

# Set on a row read through PromptTruncation whose prompt was cut (never passed to the env).
PROMPT_TRUNCATED_KEY = "_vf_prompt_truncated"


class PromptStream:
    """Dataset row indices as an endless stream of epochs, read by a cursor.

    Epoch ``e`` is ``range(n)`` shuffled with ``random.Random(seed + e)`` (or kept
    in order), so the rows at any cursor are a pure function of ``(n, seed,
    cursor)``, and resuming only needs the cursor.
    """

    def __init__(self, num_rows: int, seed: int = 0, shuffle: bool = True, cursor: int = 0):
        if num_rows <= 0:
            raise GenerationError("the training dataset is empty (no prompts to generate from)")
        self.num_rows, self.seed, self.shuffle, self.cursor = num_rows, seed, shuffle, cursor
        self._epoch, self._order = -1, list(range(num_rows))

    def _order_of(self, epoch: int) -> list[int]:
        if epoch != self._epoch:
            order = list(range(self.num_rows))
            if self.shuffle:
                random.Random(self.seed + epoch).shuffle(order)
            self._epoch, self._order = epoch, order
        return self._order

    def take(self, n: int) -> list[int]:
        out = []
        for _ in range(n):
            epoch, pos = divmod(self.cursor, self.num_rows)
            out.append(self._order_of(epoch)[pos])
            self.cursor += 1
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"cursor": self.cursor}


class PromptTruncation:
    """``dataset`` read row by row, each prompt cut to ``max_prompt_length`` tokens (left).

    Length is measured as the model sees the prompt: ``processing_class``'s chat
    template with the env's tool schemas for the row (``env.tools_for(info)``). A cut
    row carries ``PROMPT_TRUNCATED_KEY`` so the producer can count it; the first cut
    is logged once.
    """

    def __init__(self, dataset: Any, env: Any, processing_class: Any, max_prompt_length: int):
        self.dataset, self.env = dataset, env
        self.processing_class, self.max_prompt_length = processing_class, max_prompt_length

    def __len__(self) -> int:
        return len(self.dataset)

    def _tools(self, row: dict[str, Any]) -> list[dict] | None:
        info = row.get("info") or {}
        if isinstance(info, str):
            info = json.loads(info) if info.strip() else {}
        tools_for = getattr(self.env, "tools_for", None)
        return tools_for(info) if callable(tools_for) else None

    def check_fits(self, rows: int = 1) -> None:
        """Refuse, before any batch, a ``max_prompt_length`` that no prompt can fit.

        Cutting a prompt can shorten its text to nothing, but not the chat template's own
        tokens nor the tool schemas rendered with it: when those alone (the first ``rows``
        rows' message layout with every text emptied) exceed ``max_prompt_length``, every
        batch would fail. Raises ``ConfigError`` naming both sizes and the fix.
        """
        from verifiers.tokenization.assembly import prompt_length

        for index in range(min(rows, len(self.dataset))):
            row = dict(self.dataset[index])
            prompt = row.get("prompt")
            if not isinstance(prompt, list) or not prompt:
                continue  # a text prompt can be cut to nothing
            # What truncate_prompt can reach at best: the system prompt(s) and the last message, emptied.
            kept = [m for m in prompt[:-1] if m.get("role") == "system"] + [prompt[-1]]
            floor = [{"role": m.get("role", "user"), "content": ""} for m in kept]
            tools = self._tools(row)
            try:
                n = prompt_length(floor, self.processing_class, tools)
                if n <= self.max_prompt_length:
                    continue
                bare = prompt_length(floor, self.processing_class) if tools else n
            except ConfigError:
                raise
            except Exception as err:  # noqa: BLE001 - no usable template here: the first batch says why
                logger.debug("prompt length check skipped: %s", err)
                return
            schema = f" of which the {len(tools)} tool schema(s) take {n - bare}" if tools else ""
            raise ConfigError(
                f"max_prompt_length={self.max_prompt_length} cannot fit any prompt: the chat template "
                f"alone takes {n} tokens{schema}",
                hint=f"raise max_prompt_length (and max_seq_len) above {n} plus the prompt text, "
                "or give the environment fewer or shorter tools",
            )

    def __getitem__(self, index: int) -> dict[str, Any]:
        from verifiers.tokenization.assembly import truncate_prompt

        row = dict(self.dataset[index])
        info = row.get("info") or {}
        if isinstance(info, str):
            info = json.loads(info) if info.strip() else {}
        tools_for = getattr(self.env, "tools_for", None)
        tools = tools_for(info) if callable(tools_for) else None
        prompt, cut = truncate_prompt(row["prompt"], self.processing_class, self.max_prompt_length, tools)
        if cut:
            row["prompt"], row[PROMPT_TRUNCATED_KEY] = prompt, True
            warn_once(
                logger,
                "prompt-truncated",
                "a training prompt is longer than max_prompt_length=%d tokens: its oldest messages "
                "(then the start of its text) are left out before it is sent to the server (logged "
                "once; counted in prompt_truncated_frac)",
                self.max_prompt_length,
            )
        return row


def rows_to_inputs(rows: Sequence[dict[str, Any]]) -> dict[str, list[Any]]:
    """Dataset rows -> the column dict ``Environment.a_generate`` takes."""
    return {
        "prompt": [r["prompt"] for r in rows],
        "answer": [r.get("answer", "") or "" for r in rows],
        "info": [r.get("info", {}) or {} for r in rows],
        "task": [r.get("task", "default") or "default" for r in rows],
    }


def merge_outputs(parts: Sequence[GenerateOutputs], order: Sequence[tuple[int, int]]) -> GenerateOutputs:
    """Concatenate ``parts`` picking rollout ``order[k] = (part, position)`` at ``k``."""
    metric_names = sorted({name for p in parts for name in p.metrics})

    def pick(column: str) -> list[Any]:
        return [getattr(parts[p], column)[i] for p, i in order]

    metrics = {
        name: [parts[p].metrics.get(name, [0.0] * len(parts[p]))[i] for p, i in order]
        for name in metric_names
    }
    return GenerateOutputs(
        prompt=pick("prompt"),
        completion=pick("completion"),
        answer=pick("answer"),
        state=pick("state"),
        info=pick("info"),
        task=pick("task"),
        reward=[float(r) for r in pick("reward")],
        metrics=metrics,
    )


def lean_outputs(outputs: GenerateOutputs) -> GenerateOutputs:
    """Drop bulky per-rollout state (raw responses, turn tokens) after processing."""
    states = [{k: s[k] for k in LEAN_STATE_KEYS if k in s} for s in outputs.state]
    return GenerateOutputs(
        prompt=outputs.prompt,
        completion=outputs.completion,
        answer=outputs.answer,
        state=states,
        info=outputs.info,
        task=outputs.task,
        reward=outputs.reward,
        metrics=outputs.metrics,
    )


def producer_seed(args: Any) -> int | None:
    """The base of the per-rollout seeds for a ``GRPOConfig`` (``sampling_seeds``), or None: send none.

    A request with a seed gets its own ``torch.Generator`` in vLLM, and its sampler then draws
    each step's noise request by request in a Python loop (``random_sample`` in
    ``vllm/v1/sample/ops/topk_topp_sampler.py``; on the GPU it also loses FlashInfer's sampler)."""
    if args.sampling_seeds not in SAMPLING_SEEDS:
        raise ConfigError(
            f"unknown sampling_seeds={args.sampling_seeds!r}", hint=f"use one of: {', '.join(SAMPLING_SEEDS)}"
        )
    return args.seed if args.sampling_seeds == "rollout" else None


def rollout_seed(base: int, index: int, round_: int, slot: int) -> int:
    """A distinct sampling seed per (batch, oversampling round, slot in group)."""
    return (base * 1_000_003 + index * 7_919 + round_ * 104_729 + slot * 31) % (2**31 - 1)


class RolloutProducer:
    """Generates one batch of groups through ``env.a_generate`` (runs in the generator's loop).

    ``keep_groups(rewards, num_generations) -> list[bool]`` (optional) marks the
    groups worth training on; dropped groups are replaced by groups of fresh
    prompts for up to ``max_filter_rounds`` extra rounds, then by dropped ones, so
    every batch has exactly ``num_prompts`` groups. With ``seed`` set, rollout
    ``j`` of every group is sampled with its own seed (vLLM's ``seed`` sampling
    argument), so a run is reproducible while the members of a group still differ.
    With a ``tokenizer`` and its ``tokens`` settings the batch carries its token data
    (``processed``, ``tokenize_rollouts``); without them ``processed`` is None.
    """

    def __init__(
        self,
        env: Any,
        client: Any,
        model: str,
        dataset: Any,
        stream: PromptStream,
        *,
        num_prompts: int,
        num_generations: int,
        chunk_prompts: int | None = None,
        sampling_args: dict[str, Any] | None = None,
        max_concurrent: int = -1,
        tokenizer: Any = None,
        tokens: TokenSettings | None = None,
        keep_groups: Callable[[list[float], int], list[bool]] | None = None,
        max_filter_rounds: int = 2,
        seed: int | None = None,
    ):
        self.env, self.client, self.model, self.dataset, self.stream = env, client, model, dataset, stream
        self.num_prompts, self.num_generations = num_prompts, num_generations
        self.chunk_prompts = chunk_prompts if chunk_prompts and chunk_prompts > 0 else None
        self.sampling_args = dict(sampling_args or {})
        self.max_concurrent = max_concurrent
        if (tokenizer is None) != (tokens is None):
            raise ConfigError(
                "RolloutProducer got only one of tokenizer and tokens",
                hint="give both (tokens=TokenSettings.from_config(args)), or neither for batches without token data",
            )
        self.tokenizer, self.tokens = tokenizer, tokens
        self.keep_groups, self.max_filter_rounds = keep_groups, max_filter_rounds
        self.seed = seed

    def state_dict(self) -> dict[str, Any]:
        return self.stream.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stream.cursor = int(state["cursor"])

    async def _generate_groups(self, rows: list[dict[str, Any]], index: int, round_: int) -> GenerateOutputs:
        """Rollouts for ``rows``, each repeated ``num_generations`` times, group-major; at most
        ``chunk_prompts`` prompts at a time (the generation batch size), one chunk after another."""
        chunk = self.chunk_prompts
        if chunk is None or len(rows) <= chunk:
            return await self._generate_chunk(rows, index, round_)
        parts = [
            await self._generate_chunk(rows[i : i + chunk], index, round_) for i in range(0, len(rows), chunk)
        ]
        return merge_outputs(parts, [(p, k) for p, part in enumerate(parts) for k in range(len(part))])

    async def _generate_chunk(self, rows: list[dict[str, Any]], index: int, round_: int) -> GenerateOutputs:
        K = self.num_generations
        if self.seed is None:
            repeated = [r for r in rows for _ in range(K)]
            return await self.env.a_generate(
                rows_to_inputs(repeated),
                client=self.client,
                model=self.model,
                sampling_args=self.sampling_args,
                score_rollouts=True,
                max_concurrent=self.max_concurrent,
            )
        # One call per slot, each with its own seed: identical prompts under one
        # seed would sample identical completions and the group would teach nothing.
        per_call = max(1, self.max_concurrent // K) if self.max_concurrent > 0 else -1
        calls = [
            self.env.a_generate(
                rows_to_inputs(rows),
                client=self.client,
                model=self.model,
                sampling_args={**self.sampling_args, "seed": rollout_seed(self.seed, index, round_, j)},
                score_rollouts=True,
                max_concurrent=per_call,
            )
            for j in range(K)
        ]
        # return_exceptions: one call failing must not leave its siblings running into a retry.
        parts = await asyncio.gather(*calls, return_exceptions=True)
        for part in parts:
            if isinstance(part, BaseException):
                raise part
        return merge_outputs(parts, [(j, p) for p in range(len(rows)) for j in range(K)])

    def _raise_if_server_lost(self, out: GenerateOutputs) -> None:
        """Rollouts that could not reach the server say nothing about the model: the whole
        batch is generated again once the server is back (see ``BatchGenerator``)."""
        kinds = [getattr(failure_of(s), "kind", None) for s in out.state]
        lost = kinds.count(FailureKind.SERVER_UNREACHABLE)
        if lost:
            raise ServerUnreachableError(
                f"{lost} of {len(out)} rollouts could not reach the model server",
                url=client_url(self.client) or None,
            )

    async def produce(self, index: int, policy_version: int) -> GeneratedBatch:
        start = time.perf_counter()
        # Letters as in loss/advantages.py: G groups per batch (one per prompt), K rollouts per group.
        K, G = self.num_generations, self.num_prompts
        kept: list[GenerateOutputs] = []  # single-group outputs
        dropped: list[GenerateOutputs] = []
        generated_groups = prompts_cut = 0
        for round_ in range(1 + (self.max_filter_rounds if self.keep_groups else 0)):
            need = G - len(kept)
            if need <= 0:
                break
            rows = [dict(self.dataset[i]) for i in self.stream.take(need)]
            prompts_cut += sum(1 for r in rows if r.pop(PROMPT_TRUNCATED_KEY, False))
            out = await self._generate_groups(rows, index, round_)
            self._raise_if_server_lost(out)
            if len(out) != need * K:
                raise GenerationError(f"a_generate returned {len(out)} rollouts for {need * K} inputs")
            generated_groups += need
            groups = [merge_outputs([out], [(0, g * K + j) for j in range(K)]) for g in range(need)]
            mask = self.keep_groups(list(out.reward), K) if self.keep_groups else [True] * need
            for group, keep in zip(groups, mask, strict=True):
                (kept if keep else dropped).append(group)
        # Still short after oversampling: fill with dropped groups so the batch
        # stays full (they carry zero advantage, which the metrics show).
        filled = kept + dropped[: G - len(kept)]
        outputs = merge_outputs(filled, [(g, j) for g in range(len(filled)) for j in range(K)])
        processed = (
            tokenize_rollouts(self.env, outputs, self.tokenizer, self.tokens)
            if self.tokens is not None
            else None
        )
        metrics = (
            {"filtered_groups_frac": 1.0 - len(kept) / max(generated_groups, 1)} if self.keep_groups else {}
        )
        if isinstance(self.dataset, PromptTruncation):
            metrics["prompt_truncated_frac"] = prompts_cut / max(generated_groups, 1)
        return GeneratedBatch(
            index=index,
            policy_version=policy_version,
            num_generations=K,
            outputs=lean_outputs(outputs),
            processed=processed,
            generation_s=time.perf_counter() - start,
            metrics=metrics,
        )


def sampling_args_from_config(args: Any) -> dict[str, Any]:
    """The config's sampling fields, as the server's sampling arguments (None = server default).

    ``max_tokens`` is the per-turn limit, lowered to ``max_completion_length`` (the cap on a
    whole rollout's completion) when that is smaller: no turn may outgrow the rollout's cap.
    ``max_completion_length`` itself is passed too: ``MultiTurnEnv`` stops a rollout whose
    completion reaches it (and never sends it to the server); :func:`cap_completions` cuts
    whatever still exceeds it (an environment reply past the cap, a custom rollout loop).
    """
    names = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty")
    names += ("frequency_penalty", "stop")
    out = {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}
    limits = [v for v in (args.max_tokens, getattr(args, "max_completion_length", None)) if v is not None]
    if limits:
        out["max_tokens"] = min(limits)
    if getattr(args, "max_completion_length", None) is not None:
        out["max_completion_length"] = args.max_completion_length
    if "stop" in out:
        out["stop"] = list(out["stop"])
    return out


def cap_completions(
    processed: ProcessedOutputs,
    max_completion_length: int | None,
    *,
    mask_truncated_completions: bool,
    zero_truncated_completions: bool,
) -> ProcessedOutputs:
    """Cut every sample's completion to ``max_completion_length`` tokens, in place; returns it.

    The cap on a whole rollout's completion (all turns and environment replies): a longer
    sample keeps its first ``max_completion_length`` completion tokens and becomes
    truncated, with the same consequences as any truncation (``mask_truncated_completions``
    zeroes its loss mask, ``zero_truncated_completions`` its reward). ``metrics["truncated"]``
    counts it.
    """
    if max_completion_length is None:
        return processed
    for i, ids in enumerate(processed.completion_ids):
        if len(ids) <= max_completion_length:
            continue
        n = max_completion_length
        processed.completion_ids[i] = ids[:n]
        processed.completion_mask[i] = processed.completion_mask[i][:n]
        processed.completion_logprobs[i] = processed.completion_logprobs[i][:n]
        if not processed.is_truncated[i]:
            processed.is_truncated[i] = True
            # process_rollouts' own sample counts (tokenization/assembly.py), not a step metric
            counts = processed.metrics
            counts[TRUNCATED_COUNT] = counts.get(TRUNCATED_COUNT, 0.0) + 1.0
        if mask_truncated_completions:
            processed.completion_mask[i] = [0] * n
            processed.completion_logprobs[i] = [0.0] * n
        if zero_truncated_completions:
            processed.rewards[i] = 0.0
    return processed


@dataclass(frozen=True)
class TokenSettings:
    """How a batch's rollouts become token data: ``env.process_env_results``, then ``cap_completions``.

    The ``GRPOConfig`` fields of the same names (``from_config``; no defaults here: the config's are the ones).
    """

    max_seq_len: int
    max_completion_length: int | None
    mask_env_responses: bool
    mask_truncated_completions: bool
    zero_truncated_completions: bool

    @classmethod
    def from_config(cls, args: Any) -> TokenSettings:
        return cls(
            max_seq_len=args.max_seq_len,
            max_completion_length=args.max_completion_length,
            mask_env_responses=args.mask_env_responses,
            mask_truncated_completions=args.mask_truncated_completions,
            zero_truncated_completions=args.zero_truncated_completions,
        )


def tokenize_rollouts(
    env: Any, outputs: GenerateOutputs, tokenizer: Any, s: TokenSettings
) -> ProcessedOutputs:
    """``outputs``' token data: the env tokenizes each rollout (its own turns, masks and
    truncation to ``max_seq_len``), then ``cap_completions`` cuts any completion longer than
    ``max_completion_length`` (the cap on a whole rollout's completion)."""
    processed = env.process_env_results(
        outputs.prompt,
        outputs.completion,
        outputs.state,
        outputs.reward,
        tokenizer,
        max_seq_len=s.max_seq_len,
        mask_env_responses=s.mask_env_responses,
        mask_truncated_completions=s.mask_truncated_completions,
        zero_truncated_completions=s.zero_truncated_completions,
    )
    return cap_completions(
        processed,
        s.max_completion_length,
        mask_truncated_completions=s.mask_truncated_completions,
        zero_truncated_completions=s.zero_truncated_completions,
    )


def group_filter_from_config(args: Any) -> Callable[[list[float], int], list[bool]] | None:
    """``keep_groups`` for ``RolloutProducer`` from the config's difficulty-filtering fields."""
    if not args.difficulty_filtering:
        return None
    import torch

    from verifiers.training.loss.advantages import filter_groups

    def keep(rewards: list[float], group_size: int) -> list[bool]:
        mask, _ = filter_groups(
            torch.tensor(rewards),
            group_size,
            args.filter_zero_std_groups,
            args.min_group_mean_reward,
            args.max_group_mean_reward,
        )
        return mask.tolist()

    return keep

"""The metric registry is the one list of logged names: the docs' table is generated from it, and
every key the training code emits is registered."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from tests.doubles.rollouts import outputs_of
from verifiers.envs.state import new_state
from verifiers.failures import FailureKind, RolloutFailure
from verifiers.training.generation.producer import PromptStream, PromptTruncation, RolloutProducer
from verifiers.training.loss.losses import LOSS_TYPES, compute_loss
from verifiers.training.metrics.names import BY_NAME, METRICS, is_registered, markdown_tables
from verifiers.training.metrics.step import BATCH_COUNTERS, FAILURE_METRICS, rollout_metrics
from verifiers.types import GenerateOutputs, ProcessedOutputs

ROOT = Path(__file__).resolve().parents[3]


def _gen_metric_docs():
    spec = importlib.util.spec_from_file_location("gen_metric_docs", ROOT / "scripts" / "gen_metric_docs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_metric_docs", module)
    spec.loader.exec_module(module)
    return module


def test_docs_table_is_generated_from_the_registry():
    gen = _gen_metric_docs()
    page = gen.PAGE.read_text()
    assert gen.render(page) == page, (
        "docs/training.md metric table is stale: run python scripts/gen_metric_docs.py"
    )
    assert markdown_tables() in page


def test_registry_names_are_unique_and_failure_kinds_derive_from_the_enum():
    names = [m.name for m in METRICS]
    assert len(names) == len(set(names))
    for kind in FailureKind:
        assert BY_NAME[f"errors/{kind.value}"].description == kind.description
    assert set(FAILURE_METRICS) <= set(BY_NAME) and set(BATCH_COUNTERS) <= set(BY_NAME)
    assert is_registered("rewards/correct_answer") and is_registered("eval_reward")
    assert not is_registered("rewards/") and not is_registered("filtered_groups_share")
    assert not is_registered("rollout_error")


def _outputs(n: int = 4) -> GenerateOutputs:
    states = [new_state([], "", "default", {}) for _ in range(n)]
    states[0]["failure"] = RolloutFailure(FailureKind.ENV_RESPONSE, "boom")
    states[1]["reward_errors"] = {"f": "raised"}
    metrics = {"f": [0.0, 0.0, 1.0, 1.0], "rollout_errors": [1.0, 0.0, 0.0, 0.0]}
    return outputs_of(states, [0.0, 0.5, 1.0, 1.0], metrics)


def test_every_batch_statistic_is_registered():
    outputs = _outputs()
    processed = ProcessedOutputs(
        prompt_ids=[[1]] * 4,
        prompt_mask=[[1]] * 4,
        completion_ids=[[2, 3]] * 4,
        completion_mask=[[1, 1]] * 4,
        completion_logprobs=[[0.0, 0.0]] * 4,
        rewards=outputs.reward,
        metrics={"template_rewrites": 0.0},
    )
    stats = rollout_metrics(outputs, processed, outputs.reward)
    assert "rewards/f" in stats and "rewards/rollout_errors" not in stats
    assert stats["rollout_errors"] == 1.0 and stats["errors/env_response"] == 1.0
    assert [k for k in stats if not is_registered(k)] == []
    # evaluate() logs the same statistics as eval_<name>, "/" written "_".
    assert all(is_registered(f"eval_{k.replace('/', '_')}") for k in stats)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_every_loss_statistic_is_registered(loss_type):
    logprobs = torch.log(torch.full((2, 3), 0.5, requires_grad=True))
    mask = torch.ones(2, 3)
    _, stats = compute_loss(
        loss_type,
        logprobs,
        logprobs.detach() - 0.1,
        logprobs.detach() - 0.2,
        torch.tensor([1.0, -1.0]),
        mask,
        ref_logprobs_BT=logprobs.detach(),
        beta=0.1,
        max_completion_length=3,
        entropy_BT=torch.ones(2, 3),
    )
    assert [k for k in stats if not is_registered(k)] == []


class _Env:
    async def a_generate(
        self, inputs, client, model, sampling_args=None, score_rollouts=True, max_concurrent=-1
    ):
        n = len(inputs["prompt"])
        return GenerateOutputs(
            prompt=list(inputs["prompt"]),
            completion=["x"] * n,
            answer=list(inputs["answer"]),
            state=[new_state("p", "", "default", {}) for _ in range(n)],
            info=list(inputs["info"]),
            task=list(inputs["task"]),
            reward=[float(i % 2) for i in range(n)],
        )


class _Rows(PromptTruncation):
    """Rows as they come out of prompt truncation (without a tokenizer: nothing is cut)."""

    def __init__(self, rows):
        self.dataset = rows

    def __getitem__(self, index):
        return dict(self.dataset[index])


async def test_every_producer_metric_is_registered():
    rows = _Rows([{"prompt": f"p{i}", "answer": ""} for i in range(6)])
    producer = RolloutProducer(
        _Env(),
        client=None,
        model="m",
        dataset=rows,
        stream=PromptStream(len(rows), shuffle=False),
        num_prompts=2,
        num_generations=2,
        keep_groups=lambda rewards, k: [True] * (len(rewards) // k),
    )
    batch = await producer.produce(0, 0)
    assert set(batch.metrics) == {"filtered_groups_frac", "prompt_truncated_frac"}
    assert all(is_registered(k) for k in batch.metrics)


def _literal_metric_keys(path: Path) -> set[str]:
    """String keys the file puts into metrics: ``*.add({...})`` / ``*.update({...})`` dicts on
    something named ``metrics`` or ``stats``, and ``*.metrics["..."] = ...`` assignments."""
    tree = ast.parse(path.read_text())
    keys: set[str] = set()

    def receiver_named(node: ast.AST) -> bool:
        text = ast.unparse(node)
        return "metrics" in text or "stats" in text

    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("add", "update")
            and receiver_named(node.func.value)
        ):
            for arg in node.args:
                if isinstance(arg, ast.Dict):
                    keys |= {
                        k.value for k in arg.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)
                    }
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if (
                    isinstance(target, ast.Subscript)
                    and receiver_named(target.value)
                    and isinstance(target.slice, ast.Constant)
                    and isinstance(target.slice.value, str)
                ):
                    keys.add(target.slice.value)
    return keys


@pytest.mark.parametrize(
    "module", ["trainer.py", "generation/generator.py", "generation/producer.py", "loss/losses.py"]
)
def test_every_literal_metric_key_in_the_training_code_is_registered(module):
    path = ROOT / "verifiers" / "training" / module
    keys = _literal_metric_keys(path)
    internal = {"step_count"}  # a buffer input, not a metric
    assert sorted(k for k in keys - internal if not is_registered(k)) == []

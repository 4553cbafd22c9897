"""``ReasoningGymEnv`` (0.1.10+): one-turn tasks generated and scored by the ``reasoning-gym`` package.

As upstream: ``gym`` names one reasoning-gym dataset, or lists several (names, or dicts of
``DatasetSpec`` fields) mixed as its ``composite`` dataset; ``num_train_examples +
num_eval_examples`` entries are generated with ``seed``; each row's ``answer`` is the entry's
index and its ``task`` the entry's source dataset. The reward is reasoning-gym's own
``score_answer`` of the parsed ``<answer>`` (``XMLParser(["answer"])`` by default), plus the
parser's format reward as a weight-0 metric. Without reasoning-gym installed, constructing it
raises ``MissingPackageError`` (``pip install reasoning-gym``).
"""

from __future__ import annotations

import importlib
from typing import Any

from verifiers.envs.singleturn import SingleTurnEnv
from verifiers.errors import ConfigError, MissingPackageError
from verifiers.parsers.xml_parser import XMLParser
from verifiers.rubrics.rubric import Rubric
from verifiers.types import Messages

__all__ = ["ReasoningGymEnv"]


def import_reasoning_gym() -> Any:
    """The ``reasoning_gym`` module, or ``MissingPackageError`` naming it."""
    try:
        return importlib.import_module("reasoning_gym")
    except ModuleNotFoundError as err:
        if err.name and err.name.split(".")[0] == "reasoning_gym":
            raise MissingPackageError("ReasoningGymEnv", "reasoning-gym") from err
        raise


class ReasoningGymEnv(SingleTurnEnv):
    """Tasks of one or several reasoning-gym datasets (see the module)."""

    def __init__(
        self,
        gym: str | list[str | dict],
        num_train_examples: int = 1000,
        num_eval_examples: int = 100,
        system_prompt: str | None = None,
        parser: Any = None,
        seed: int = 0,
        **kwargs: Any,
    ):
        rg = import_reasoning_gym()
        if system_prompt is None:
            system_prompt = importlib.import_module("reasoning_gym.utils").SYSTEM_PROMPTS["default"]
        self.gym = gym
        self.num_train_examples = int(num_train_examples)
        self.num_eval_examples = int(num_eval_examples)
        self.seed = seed
        self.rg_dataset = self.build_rg_dataset(
            rg, gym, self.num_train_examples + self.num_eval_examples, seed
        )
        dataset, eval_dataset = self.rg_to_hf(self.rg_dataset)
        parser = parser or XMLParser(fields=["answer"])
        rubric = Rubric(parser=parser)
        entries = self.rg_dataset

        def check_answer_reward_func(completion: Messages, answer: str, **_: Any) -> float:
            entry = entries[int(answer)]
            response = str(parser.parse_answer(completion)).strip()
            return float(entries.score_answer(answer=response, entry=entry))

        rubric.add_reward_func(check_answer_reward_func)
        rubric.add_reward_func(parser.get_format_reward_func(), weight=0.0)
        super().__init__(
            dataset=dataset,
            eval_dataset=eval_dataset,
            system_prompt=system_prompt,
            parser=parser,
            rubric=rubric,
            message_type="chat",
            **kwargs,
        )

    @staticmethod
    def build_rg_dataset(rg: Any, gym: str | list[str | dict], total: int, seed: int = 0) -> Any:
        if isinstance(gym, str):
            return rg.create_dataset(gym, size=total, seed=seed)
        spec_cls = importlib.import_module("reasoning_gym.composite").DatasetSpec
        specs = []
        for item in gym:
            if isinstance(item, str):
                specs.append(spec_cls(name=item, weight=1.0, config={}))
            elif isinstance(item, dict):
                specs.append(spec_cls(**item))
            else:
                raise ConfigError(
                    f"ReasoningGymEnv(gym=...) entry {item!r} is neither a dataset name nor a dict",
                    hint="e.g. gym=['leg_counting', {'name': 'basic_arithmetic', 'weight': 2.0, 'config': {}}]",
                )
        return rg.create_dataset("composite", datasets=specs, size=total, seed=seed)

    def rg_to_hf(self, rg_dataset: Any) -> tuple[Any, Any]:
        from datasets import Dataset

        rows = [
            {"question": x["question"], "answer": str(i), "task": x["metadata"]["source_dataset"]}
            for i, x in enumerate(rg_dataset)
        ]
        train, held_out = rows[: self.num_train_examples], rows[self.num_train_examples :]
        return (Dataset.from_list(train) if train else None), (
            Dataset.from_list(held_out) if held_out else None
        )

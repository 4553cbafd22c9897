"""``GymEnv`` (0.1.10+'s ``vf.GymEnv``): a Gym-style environment (``reset``/``step``) played
turn by turn by the model.

Any class with ``reset(seed=...)`` (returning ``obs`` or ``(obs, info)``) and ``step(action)``
(returning gym's 4-tuple or gymnasium's 5-tuple) works; gymnasium itself is not needed unless
the module's own class comes from it. As upstream: episode ``i``'s row is the observation after
``reset(seed=seed + i)`` (its ``answer`` is the seed); the first model reply starts a fresh
copy of the environment reset with that seed; each reply is parsed (``parser.parse_answer``,
else the reply's text), turned into an action by ``action_parser`` and stepped; the step's
reward goes to that trajectory step's ``reward`` (its ``info`` to ``extras["gym_info"]``), and the
reward of the rollout is their sum (``EpisodicSumRubric``). The episode ends (stop condition
``is_done``) once the environment says terminated or truncated, or an action cannot be parsed,
or after ``max_episode_steps`` model turns. The environment's ``close()`` runs when the rollout ends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeAlias

from verifiers.envs.decorators import cleanup, stop
from verifiers.envs.multiturn import MultiTurnEnv
from verifiers.errors import ConfigError
from verifiers.rubrics.rubric import Rubric
from verifiers.types import Messages, State, UserMessage

__all__ = [
    "EpisodicSumRubric",
    "GymEnv",
    "ResetOut",
    "StepOut",
    "StepResetEnv",
    "normalize_reset",
    "normalize_step",
    "sum_step_rewards",
]


class StepResetEnv(Protocol):
    """What ``GymEnv`` drives (0.1.9+'s name): ``reset(seed=)`` returning ``obs`` or ``(obs, info)``, and
    ``step(action)`` returning gym's ``(obs, reward, done, info)`` or gymnasium's 5-tuple."""

    reset: Callable[..., Any]
    step: Callable[..., Any]


ResetOut: TypeAlias = Any | tuple[Any, dict[str, Any]]
"""What ``reset`` may return."""
StepOut: TypeAlias = tuple[Any, float, bool, bool, dict[str, Any]] | tuple[Any, float, bool, dict[str, Any]]
"""What ``step`` may return."""


def normalize_reset(out: Any) -> tuple[Any, dict[str, Any]]:
    """``(obs, info)`` from what ``reset`` returned (``obs`` alone or the pair)."""
    if isinstance(out, tuple) and len(out) == 2:
        return out[0], dict(out[1] or {})
    return out, {}


def normalize_step(out: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
    """``(obs, reward, terminated, truncated, info)`` from gym's 4-tuple or gymnasium's 5-tuple."""
    if not isinstance(out, (tuple, list)) or len(out) not in (4, 5):
        size = len(out) if isinstance(out, (tuple, list)) else type(out).__name__
        raise ConfigError(
            f"env.step() returned {size!r}, expected (obs, reward, done, info) or (obs, reward, terminated, truncated, info)"
        )
    if len(out) == 5:
        obs, reward, terminated, truncated, info = out
    else:
        (obs, reward, terminated, info), truncated = out, False
    return obs, float(reward), bool(terminated), bool(truncated), dict(info or {})


def sum_step_rewards(state: State) -> float:
    """The rollout's reward: the sum of its trajectory steps' rewards (a step without one counts 0)."""
    return float(sum(float(step.get("reward") or 0.0) for step in state.get("trajectory") or []))


class EpisodicSumRubric(Rubric):
    """Rewards a rollout with the sum of its steps' rewards."""

    def __init__(self, weight: float = 1.0, **kwargs: Any):
        super().__init__(funcs=[sum_step_rewards], weights=[weight], **kwargs)


class GymEnv(MultiTurnEnv):
    """Runs a Gym-style environment class (see the module)."""

    def __init__(
        self,
        env_cls: Callable[..., Any],
        env_kwargs: dict[str, Any] | None = None,
        action_parser: Callable[[str], Any] | None = None,
        obs_to_text: Callable[[Any], str] | None = None,
        num_train_episodes: int = 1000,
        num_eval_episodes: int = 20,
        max_episode_steps: int | None = None,
        seed: int = 0,
        system_prompt: str | None = None,
        few_shot: list[dict[str, Any]] | None = None,
        parser: Any = None,
        rubric: Any = None,
        message_type: str = "chat",
        **kwargs: Any,
    ):
        if not callable(env_cls):
            raise ConfigError(
                f"GymEnv(env_cls={env_cls!r}) needs a class (or factory) of gym-style environments"
            )
        for name, value in (
            ("num_train_episodes", num_train_episodes),
            ("num_eval_episodes", num_eval_episodes),
        ):
            if int(value) < 0:
                raise ConfigError(f"GymEnv({name}={value}) must be >= 0")
        if int(num_train_episodes) + int(num_eval_episodes) == 0:
            raise ConfigError(
                "GymEnv needs episodes", hint="set num_train_episodes and/or num_eval_episodes above 0"
            )
        self.env_cls = env_cls
        self.env_kwargs = dict(env_kwargs or {})
        self.action_parser = action_parser or (lambda text: text)
        self.obs_to_text_fn = obs_to_text
        self.num_train_episodes = int(num_train_episodes)
        self.num_eval_episodes = int(num_eval_episodes)
        self.seed = int(seed)
        dataset, eval_dataset = self.gym_to_hf()
        super().__init__(
            dataset=dataset,
            eval_dataset=eval_dataset,
            rubric=rubric or EpisodicSumRubric(),
            message_type=message_type,
            max_turns=max_episode_steps or 1000,
            system_prompt=system_prompt,
            few_shot=few_shot,
            parser=parser,
            **kwargs,
        )

    def gym_to_hf(self) -> tuple[Any, Any]:
        """The train and eval rows: each episode's first observation (``answer``: its seed)."""
        from datasets import Dataset

        rows = []
        env = self.env_cls(**self.env_kwargs)
        try:
            for i in range(self.num_train_episodes + self.num_eval_episodes):
                obs, _ = normalize_reset(env.reset(seed=self.seed + i))
                rows.append({"question": self.obs_to_text(obs), "answer": str(self.seed + i)})
        finally:
            close = getattr(env, "close", None)
            if callable(close):
                close()
        train, held_out = rows[: self.num_train_episodes], rows[self.num_train_episodes :]
        return (Dataset.from_list(train) if train else None), (
            Dataset.from_list(held_out) if held_out else None
        )

    def obs_to_text(self, obs: Any) -> str:
        """An observation as the text the model reads (override, or pass ``obs_to_text=``)."""
        return self.obs_to_text_fn(obs) if self.obs_to_text_fn else str(obs)

    def wrap_response(self, text: str) -> Messages:
        return [UserMessage(content=text)]

    async def env_response(self, messages: Messages, state: State, **kwargs: Any) -> Messages:
        env = state.get("gym_env")
        if env is None:
            env = self.env_cls(**self.env_kwargs)
            env.reset(seed=int(state["answer"]))
            state["gym_env"], state["gym_done"] = env, False
        text = self.parser.parse_answer(messages)
        if text is None:
            last = messages[-1] if messages else {}
            text = str(last.get("content") or "") if isinstance(last, dict) else str(last)
        step = state["trajectory"][-1]
        try:
            action = self.action_parser(text)
        except Exception as err:  # the model's reply is no action: the episode ends, unrewarded
            state["gym_done"] = True
            step["reward"] = 0.0
            return self.wrap_response(f"Action Parsing Error: {err}")
        obs, reward, terminated, truncated, info = normalize_step(env.step(action))
        step["reward"] = reward
        step.setdefault("extras", {})["gym_info"] = info
        state["gym_done"] = terminated or truncated
        text = self.obs_to_text(obs)
        return self.wrap_response(f"{text}\nEpisode already ended." if state["gym_done"] else text)

    @stop
    async def is_done(self, state: State) -> bool:
        return bool(state.get("gym_done", False))

    @cleanup
    async def cleanup_env(self, state: State) -> None:
        env = state.pop("gym_env", None)
        close = getattr(env, "close", None)
        if callable(close):
            close()

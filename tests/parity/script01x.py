"""What both sides of the 0.1.8-0.1.12 differential tier share: the scripted model and judge
replies, and the reward functions of the pure scoring cases.

Loaded by path in the oracle (``tests/drivers/oracle_01x_driver.py``, under verifiers
0.1.8 / 0.1.10 / 0.1.12) and imported here, so both sides run the same code. Standard
library only. Replies are a function of the conversation and of how often that exact
conversation was seen before, so two rollouts of one example differ (group rewards then
have something to rank) while a sequential run is deterministic on both sides.
"""

from __future__ import annotations

import hashlib
import json
import threading

_seen: dict[str, int] = {}
_lock = threading.Lock()


def reset() -> None:
    with _lock:
        _seen.clear()


def _text(message: dict) -> str:
    content = message.get("content")
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def reply(request: dict) -> str | dict:
    """The scripted model: chat requests only (the modules here are chat environments)."""
    messages = request.get("messages") or []
    key = json.dumps([[m.get("role"), _text(m)] for m in messages], sort_keys=True)
    with _lock:
        k = _seen.get(key, 0)
        _seen[key] = k + 1
    last = _text(messages[-1]) if messages else ""
    digest = int(hashlib.sha256(key.encode()).hexdigest(), 16)
    if last.startswith("Expected:"):  # a JudgeRubric prompt: a score from 0 to 10
        return f"Score: {(digest + k) % 11}"
    if last.startswith("Call ["):  # tools_v0112: call the tools named in the prompt
        names = json.loads(last[len("Call ") :].replace("'", '"'))
        return {
            "content": "",
            "tool_calls": [
                {"name": n, "arguments": {"x": 1} if n == "add_one" else {"text": "hi"}, "id": f"call_{i}"}
                for i, n in enumerate(names)
            ],
        }
    if last.startswith("Sort:") or last.startswith("Add "):
        # alphabet-sort style: reply with the sorted names seen so far (right on even k)
        names = sorted(w for m in messages if m.get("role") == "user" for w in _text(m).split()[1:])
        return " ".join(names if k % 2 == 0 else reversed(names))
    choices = ["alpha", "beta", "gamma", "x marks it", "no", "<think>hm</think>\\boxed{4}"]
    return choices[(digest + k) % len(choices)] + (" x" * k)


# -- reward functions of the pure scoring cases (names are the metric names) -------------------


def exact(completion, answer, **kwargs) -> float:
    return 1.0 if completion[-1]["content"].strip() == answer else 0.0


def length_rank(completions, **kwargs) -> list[float]:
    """Group function: 1 for the shortest reply of the group, 0 otherwise."""
    lengths = [len(c[-1]["content"]) for c in completions]
    return [1.0 if n == min(lengths) else 0.0 for n in lengths]


def agree_with_group(completions, answers, states, **kwargs) -> list[float]:
    """Group function over several plural parameters: share of the group giving the same reply."""
    texts = [c[-1]["content"] for c in completions]
    assert len(answers) == len(states) == len(texts)
    return [texts.count(t) / len(texts) for t in texts]


def info_weight(completion, info, **kwargs) -> float:
    return float(info.get("w", 0)) * len(completion)


LIBRARY = {f.__name__: f for f in (exact, length_rank, agree_with_group, info_weight)}


# -- what both sides compare ------------------------------------------------------------------


def plain(x):
    """Messages and states as JSON: pydantic models (0.1.12) and dict subclasses become dicts."""
    if hasattr(x, "model_dump"):
        x = x.model_dump(exclude_none=True)
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    return x if isinstance(x, (str, int, float, bool)) or x is None else repr(x)


def message(m) -> dict:
    """The parts of a message that both releases must agree on."""
    m = plain(m)
    out = {"role": m.get("role"), "content": _text(m)}
    calls = []
    for c in m.get("tool_calls") or []:
        fn = c.get("function") or c  # OpenAI shape, or 0.1.12's flat ToolCall
        args = fn.get("arguments")
        calls.append([fn.get("name"), json.loads(args) if isinstance(args, str) else args])
    if calls:
        out["tool_calls"] = calls
    return out


def messages(ms) -> list[dict] | str:
    return ms if isinstance(ms, str) else [message(m) for m in ms or []]


TOKEN_KEYS = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "completion_logprobs")


def summarize(state) -> dict:
    steps = []
    for step in state.get("trajectory") or []:
        tokens = plain(step.get("tokens")) or {}
        steps.append(
            {
                "prompt": messages(step.get("prompt")),
                "completion": messages(step.get("completion")),
                "tokens": {k: tokens[k] for k in TOKEN_KEYS if k in tokens} or None,
                # 0.1.8's trainer (and prime-rl) trains each step with the step's advantage
                "reward": step.get("reward"),
                "advantage": step.get("advantage"),
            }
        )
    metrics = plain(state.get("metrics")) or {}
    return {
        "prompt": messages(state.get("prompt")),
        "completion": messages(state.get("completion")),
        "stop_condition": state.get("stop_condition"),
        "is_truncated": bool(state.get("is_truncated")),
        "trajectory": steps,
        "reward": state.get("reward"),
        "advantage": state.get("advantage"),
        "metrics": {k: float(v) for k, v in metrics.items()},
    }


def rollout_input(row: dict, i: int) -> dict:
    rin = {k: row[k] for k in ("prompt", "answer", "task", "info") if k in row and row[k] is not None}
    if isinstance(rin.get("info"), str):
        rin["info"] = json.loads(rin["info"])
    rin["example_id"] = row.get("example_id", i)
    return rin


def make_state(vf, rollout: dict):
    """A scored-but-not-yet-rewarded state from a case's prompt / completion / answer / info."""
    base = {
        "prompt": rollout["prompt"],
        "completion": rollout["completion"],
        "answer": rollout.get("answer", ""),
        "task": rollout.get("task", "default"),
        "info": rollout.get("info", {}),
        "example_id": rollout.get("example_id", 0),
    }
    State = getattr(vf, "State", None)
    try:
        state = State(input=dict(base)) if State is not None else dict(base)
    except TypeError:
        state = dict(base)
    for k, v in base.items():
        state[k] = v
    state.setdefault("trajectory", [])
    state.setdefault("timing", {"generation_ms": 0.0, "scoring_ms": 0.0, "total_ms": 0.0, "start_time": 0.0})
    return state

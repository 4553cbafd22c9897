"""Runs cases through verifiers 0.1.8 / 0.1.10 / 0.1.12 (an oracle) and prints the results as JSON.

Executed by an oracle virtual environment's Python (``python -I``: this folder and the
checkout are not on ``sys.path``, so ``import verifiers`` is the release under test).
Reads ``{"expect": "0.1.12", "groups": {op: [case, ...]}}`` on stdin and writes
``{"version": ..., "results": {op: [result, ...]}}``; a case that raises gives
``{"error": "Type: message"}``. The scripted model, reward library and state summary are
``tests/parity/script01x.py``, loaded by path, so both sides run the same code.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import inspect
import json
import logging
import os
import sys
from pathlib import Path

logging.disable(logging.CRITICAL)

import verifiers as vf  # noqa: E402  (the release under test)

TESTS = Path(__file__).resolve().parents[1]


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


script = _load(TESTS / "parity" / "script01x.py", "parity_script01x")
fakeserver = _load(TESTS / "doubles" / "openai_server.py", "parity_fakeserver")


def attempt(fn):
    try:
        return fn()
    except BaseException as e:  # noqa: BLE001 - any failure of the oracle is a result here
        return {"error": f"{type(e).__name__}: {str(e)[:300]}"}


def model_client(url: str):
    from openai import AsyncOpenAI

    raw = AsyncOpenAI(base_url=url, api_key="EMPTY", max_retries=0)
    # 0.1.12 takes its own Client wrapper; 0.1.8 / 0.1.10 take the AsyncOpenAI client.
    wrapper = getattr(vf, "OpenAIChatCompletionsClient", None) if hasattr(vf, "Client") else None
    return wrapper(raw) if wrapper is not None else raw


async def score_group(rubric, states):
    """0.1.8's ``score_group`` also takes the scoring semaphore; 0.1.10+ only the states."""
    if "score_sem" in inspect.signature(rubric.score_group).parameters:
        return await rubric.score_group(states, contextlib.nullcontext())
    return await rubric.score_group(states)


def op_module(case):
    """Load a module, roll out every eval example ``n`` times one after another, score by group."""

    async def go():
        with fakeserver.FakeServer(reply=script.reply) as server:
            script.reset()
            args = dict(case.get("args", {}))
            if case.get("judge_url_arg"):
                args[case["judge_url_arg"]] = server.url
            module = _load(Path(case["path"]), f"parity_env_{Path(case['path']).stem}")
            env = module.load_environment(**args)
            rows = env.get_eval_dataset().to_list()[: case["num_examples"]]
            client = model_client(server.url)
            out = []
            for i, row in enumerate(rows):
                rin = script.rollout_input(row, i)
                states = []
                for _ in range(case["n"]):
                    states.append(await env.rollout(rin, client, "fake-model", case.get("sampling_args")))
                await score_group(env.rubric, states)
                out.append([script.summarize(s) for s in states])
            return {"rows": out, "requests": len(server.requests)}

    return attempt(lambda: asyncio.run(go()))


def op_score_group(case):
    """A Rubric of library functions scoring one group of given rollouts."""

    async def go():
        rubric = vf.Rubric(
            funcs=[script.LIBRARY[n] for n in case["funcs"]], weights=case["weights"], parser=vf.Parser()
        )
        for name in case.get("metrics", []):
            if hasattr(rubric, "add_metric"):
                rubric.add_metric(script.LIBRARY[name])
            else:  # 0.1.8: a metric is a weight-0 reward function
                rubric.add_reward_func(script.LIBRARY[name], weight=0.0)
        states = [script.make_state(vf, r) for r in case["rollouts"]]
        await score_group(rubric, states)
        return [script.summarize(s) for s in states]

    return attempt(lambda: asyncio.run(go()))


OPS = {name[3:]: fn for name, fn in globals().items() if name.startswith("op_")}


def main() -> None:
    request = json.load(sys.stdin)
    expect = request.get("expect")
    if expect and vf.__version__ != expect:
        raise SystemExit(f"oracle driver expects verifiers {expect}, got {vf.__version__} from {vf.__file__}")
    os.environ.setdefault("JUDGE_API_KEY", "EMPTY")
    results = {op: [OPS[op](c) for c in cases] for op, cases in request["groups"].items()}
    json.dump({"version": vf.__version__, "results": results}, sys.stdout, default=repr)


if __name__ == "__main__":
    main()

"""A 0.1.6+-style evaluation script: ``await env.evaluate(...)`` in an async main, and ``evaluate_sync``."""

import asyncio

from openai import AsyncOpenAI


async def main(env, base_url: str):
    client = AsyncOpenAI(base_url=base_url, api_key="EMPTY")
    results = await env.evaluate(client, "fake-model", num_examples=2, rollouts_per_example=1)
    return results


def run(env, base_url: str):
    awaited = asyncio.run(main(env, base_url))
    blocking = env.evaluate_sync(
        AsyncOpenAI(base_url=base_url, api_key="EMPTY"), "fake-model", num_examples=2
    )
    return awaited, blocking

"""A 0.1.4-style evaluation: ``env.evaluate`` is a blocking call returning the results."""

from openai import AsyncOpenAI


def run(env, base_url: str):
    client = AsyncOpenAI(base_url=base_url, api_key="EMPTY")
    return env.evaluate(client, "fake-model", num_examples=2, rollouts_per_example=1)

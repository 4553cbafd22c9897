"""Shared by the launched-run tests (test_distributed.py, lifecycle/test_exit_status.py)."""

from __future__ import annotations

import math

import pytest


@pytest.fixture(scope="module")
def fake_url():
    """The fake OpenAI server's URL, replying as ``tests/drivers/dist_train.py`` expects.

    Deterministic rollouts: replies depend only on (prompt, seed), and the generator seeds each
    rollout from (seed, batch, slot), so every run with the same seed trains the same batches."""
    from tests import fakeserver
    from tests.drivers.dist_train import fake_reply

    with pytest.MonkeyPatch.context() as mp:
        # Sampling log-probs of a uniform policy over the 49152-token vocabulary, close to the random
        # tiny model's own (entropy 10.79), so importance weights stay near 1 and the loss is not tiny.
        mp.setattr(fakeserver, "logprob_of", lambda token_id: -math.log(49152))
        with fakeserver.fake_server(reply=fake_reply) as server:
            yield server.url

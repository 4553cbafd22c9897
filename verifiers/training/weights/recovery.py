"""What the generator hands the trainer when a lost server came back: :class:`Resync`.

Waiting out the outage itself is the client's (verifiers/inference/client/recovery.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Resync:
    """What ``BatchGenerator.get(index, resync=True)`` returns instead of batch ``index`` when the
    server came back from an outage: push the weights (the generator's ``resynced()`` is then
    called) and ask for the batch again."""

    index: int

"""Stage 3 of a step, the loss: log-probs of the sampled tokens and the policy-gradient loss.

- ``advantages.py``: group-relative advantages and the difficulty filter (pure group math on rewards).
- ``losses.py``: one pure function per ``loss_type`` (shapes in its docstring).
- ``logprobs.py``: per-token log-probs and entropy, a group's rows scored as one packed sequence.
- ``reference.py``: ``Reference``, the KL term's reference model: its log-probs and its sync toward the policy.
- ``packed_attention.py``: attention for a packed group, only the blocks its rows may see.
"""

__all__ = ["advantages", "logprobs", "losses", "packed_attention", "reference"]

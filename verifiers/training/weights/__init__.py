"""Stage 4 of a step, the weights: pushing the trainer's weights to the vf-vllm server, and riding out its outages.

- ``sync.py``: ``WeightSyncer``: after an optimizer step, send the weights (full, merged LoRA, or adapter).
- ``server_link.py``: ``ServerLink``: the trainer's side of the server (client, health, syncs).
- ``recovery.py``: wait for a lost server, re-sync, go on.
- ``precision.py``: the trained weights' dtypes, set once (fp32 master weights, a frozen base in bf16).
- ``names.py``: the parameter names (and shapes) the served checkpoint knows; ``verifiers.inference`` uses it too.
"""

__all__ = ["names", "precision", "recovery", "server_link", "sync"]

"""Stage 4 of a step, the weights: pushing the trainer's weights to the vf-vllm server, and riding out its outages.

- ``sync.py``: ``WeightSyncer``: after an optimizer step, send the weights (full, merged LoRA, or adapter).
- ``server_link.py``: ``ServerLink``: the trainer's side of the server (client, health, syncs).
- ``precision.py``: the trained weights' dtypes, set once (fp32 master weights, a frozen base in bf16).

Waiting out a lost server is ``verifiers.inference.client.recovery``'s; the served checkpoint's
parameter names are ``verifiers.inference.names`` (the server checks them too); ``Resync`` is in
``verifiers.training.types``.
"""

__all__ = ["precision", "server_link", "sync"]

"""Stage 4 of a step, the weights: pushing the trainer's weights to the vf-vllm server, and riding out its outages.

- ``sync.py``: ``WeightSyncer``: after an optimizer step, send the weights (full, merged LoRA, or adapter).
- ``server_link.py``: ``ServerLink``: the trainer's side of the server (client, health, syncs).
- ``recovery.py``: ``Resync``; waiting out a lost server is ``verifiers.inference.client.recovery``'s.

The served checkpoint's parameter names are ``verifiers.inference.names`` (the server checks them too).
"""

__all__ = ["recovery", "server_link", "sync"]

"""Tokenization of rollouts: the server's token ids assembled into training samples, and the chat template.

- ``assembly.py``: token-in/token-out assembly (``process_rollouts``), masks, prompt truncation.
- ``chat_template.py``: a tool-aware chat template for models whose own ignores ``tools``
  (``python -m verifiers.tokenization.chat_template MODEL -o FILE`` writes it).
"""

__all__ = ["assembly", "chat_template"]

"""Around the steps, the lifecycle: checkpoints (save and resume) and shutdown on a signal.

- ``checkpoint.py``: what a GRPO checkpoint adds to ``transformers.Trainer``'s, and reading it back.
- ``checkpoint_save.py``: writing ``checkpoint-<step>``: Trainer's files, then ours, then the completeness mark.
- ``heartbeat.py``: under vf-rl, each rank's liveness and progress beats (vf-rl finds a stopped rank).
- ``shutdown.py``: SIGINT/SIGTERM: finish the step, save it, exit 130 or 143.
"""

__all__ = ["checkpoint", "checkpoint_save", "heartbeat", "shutdown"]

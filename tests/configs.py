"""Config text shared by several test modules."""

# The trainer side of a small vf-rl run on CPU: 16 rollouts a step (4 per example), 3 steps.
TRAINER_TABLES = """\
[trainer]
gpus = 0

[trainer.args]
rollouts_per_example = 4
micro_batch_size = 4
batch_size = 16
max_steps = 3
"""

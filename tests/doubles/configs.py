"""vf-rl config texts shared by several test modules: what a user's TOML file would hold.

Stands in for a user's config file. Used by the default tier's cli tests (tests/cli/:
the dry runs, the launcher and its supervision, the TOML schema and command line), tests/envs/,
and by the slow tier's real vf-rl runs (``REAL_RUN_CONFIG``).
"""

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

# A vf-rl run on CPU as the dry runs and the launcher tests read it (tests/cli/rl/).
RL_CONFIG = """
model = "smollm2"

[env]
id = "reverse-text"

[inference]
gpus = 0

[inference.args]
enforce_eager = true

[trainer]
gpus = 0

[trainer.args]
run_name = "rt"
rollouts_per_example = 4
micro_batch_size = 4
batch_size = 16
max_steps = 3
"""

# The TOML schema tests' minimal config (tests/cli/run_config/).
RUN_CONFIG_BASE = (
    """
model = "smollm2"

[env]
id = "reverse-text"
args = { num_train_examples = 8 }

[inference]
gpus = 0

[inference.args]
enforce_eager = true

"""
    + TRAINER_TABLES
)

# A real run's config (checkpoints every step): fill in {model} and {port}.
REAL_RUN_CONFIG = """model = "{model}"

[env]
id = "primeintellect/reverse-text"

[env.args]
num_train_examples = 16
num_eval_examples = 4

[inference]
gpus = 0
port = {port}

[trainer]
gpus = 0

[trainer.args]
run_name = "resume-e2e"
rollouts_per_example = 4
micro_batch_size = 4
batch_size = 8
max_steps = 2
max_tokens = 8
max_seq_len = 256
max_prompt_len = 128
learning_rate = 1e-3
save_steps = 1
log_samples_every = 0
mask_truncated_completions = false
"""

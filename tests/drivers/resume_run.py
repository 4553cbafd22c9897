"""A small GRPO run against a running vf-vllm server, for ``test_resume_kill.py``.

    python -m tests.drivers.resume_run --port P --model DIR --out OUT --metrics M.jsonl --steps N [--resume]
        [--pause-before-step K --pause-s S]

Trains the tiny model on ``Count to <i>.`` prompts, one batch ahead (async),
saving a full checkpoint (model, optimizer, scheduler, RNG, generator state)
after every step. Each logged step appends one JSON line to ``--metrics`` and
flushes it to disk before training goes on, so a run killed at any moment leaves
every line it logged: ``{"step", "loss", "reward", "grad_norm", "rollouts"}`` where
``rollouts`` are ``GRPOTrainer.trained_rollouts`` (which rollouts the step
trained). ``--resume`` resumes from the last complete checkpoint in ``--out``.
``--pause-before-step K`` sleeps ``--pause-s`` seconds before step ``K`` trains (a long
step, for the signal tests). A SIGINT / SIGTERM ends it with status 130 / 143
(``TrainingStopped``, after the checkpoint).
"""

from __future__ import annotations

import argparse
import json
import os
import time

from transformers import TrainerCallback


def char_length_reward(completion, **_) -> float:
    """Random tokens differ in length, so the reward varies within a group from the first step."""
    text = completion[-1]["content"] if isinstance(completion, list) else completion
    return min(len(text), 200) / 100.0


class PauseBefore(TrainerCallback):
    """Sleeps ``seconds`` before step ``step`` (1-based) trains: a step long enough to signal into."""

    def __init__(self, step: int, seconds: float):
        self.step, self.seconds = step, seconds

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step + 1 == self.step:
            time.sleep(self.seconds)


class StepLog(TrainerCallback):
    """One JSON line per logged training step, flushed to disk before training goes on."""

    def __init__(self, trainer, path: str):
        self.trainer, self.path, self.rollouts = trainer, path, {}

    def on_step_end(self, args, state, control, **kwargs):
        self.rollouts[state.global_step] = self.trainer.trained_rollouts

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "loss" not in logs:
            return
        step = state.global_step
        line = {k: logs[k] for k in ("loss", "reward", "grad_norm")}
        line.update(step=step, rollouts=self.rollouts[step])
        with open(self.path, "a") as fh:
            fh.write(json.dumps(line) + "\n")
            fh.flush()
            os.fsync(fh.fileno())


def config(out: str, port: int, steps: int):
    import verifiers as vf

    return vf.GRPOConfig(
        output_dir=out,
        use_cpu=True,
        report_to="none",
        seed=0,
        max_steps=steps,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        num_generations=4,  # 8 rollouts = 2 prompts per step; 8 prompts: the 5th step starts epoch 2
        learning_rate=3e-3,
        beta=0.01,  # a reference model too
        max_tokens=16,
        max_seq_len=256,
        max_prompt_length=128,
        mask_truncated_completions=False,  # the random model never stops before max_tokens
        importance_sampling_mask_low=0.5,
        importance_sampling_mask_high=5.0,
        num_batches_ahead=1,  # the hard case: a generated, untrained batch is in every checkpoint
        cpu_phases="overlap",  # generate ahead even though the server shares this CPU
        logging_steps=1,
        save_strategy="steps",
        save_steps=1,
        save_only_model=False,  # exact resume needs the optimizer's state
        async_generation_timeout=120,
        vllm_server_port=port,
        vllm_server_timeout=60,
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--metrics", required=True)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--pause-before-step", type=int, default=0)
    p.add_argument("--pause-s", type=float, default=0.0)
    a = p.parse_args(argv)

    import datasets

    import verifiers as vf

    rows = {"question": [f"Count to {i}." for i in range(8)], "answer": [""] * 8}
    env = vf.SingleTurnEnv(
        dataset=datasets.Dataset.from_dict(rows), rubric=vf.Rubric(funcs=[char_length_reward])
    )
    model, tokenizer = vf.get_model_and_tokenizer(a.model)
    trainer = vf.GRPOTrainer(
        model=model, processing_class=tokenizer, env=env, args=config(a.out, a.port, a.steps)
    )
    trainer.add_callback(StepLog(trainer, a.metrics))
    if a.pause_before_step:
        trainer.add_callback(PauseBefore(a.pause_before_step, a.pause_s))
    trainer.train(resume_from_checkpoint=True if a.resume else None)


if __name__ == "__main__":
    main()

"""GRPO on number-guess: SmolLM2-135M-Instruct + LoRA learns a multi-turn guessing game, on a CPU.

The environment thinks of a number from 1 to 10 and answers each guess with what
is left of the range ("Higher: it is from 6 to 10."); the reward is 1 for a right
first guess and 0.2 less for each further guess (0 if five guesses miss). Shown one
worked game, SmolLM2 replies with a valid number about half the time and wins one
game in five; GRPO teaches it to reply with numbers from the range it is given:
the settings of the learning benchmark (benchmarks/learning.py --suite multiturn).

1. Install the environment and start the inference server in its own terminal:

    vf-install number-guess
    MODEL=$(vf-models smollm2 | tail -n1)      # SmolLM2 as a local folder, built once
    vf-vllm --model "$MODEL" --port 8000 --max-model-len 1024 --enable-lora --max-lora-rank 8 \\
        --enforce-eager --gpu-memory-utilization 0.25 --no-enable-chunked-prefill

   The last line is for a CPU (its dtype is the CPU's, as the trainer's is; --gpu-memory-utilization is
   the share of RAM to reserve; --no-enable-chunked-prefill avoids a crash of vLLM's
   CPU backend when a seeded request's prompt is split). Leave it out on a GPU.
   Serve the model you train.

2. Train (the script waits up to 5 minutes for the server):

    python examples/grpo/train_number_guess.py --max-steps 40

Server and training in one command (vf-rl, with vf.RLTrainer and these sizes):

    vf-rl @ configs/vf-rl/number-guess.toml

The LoRA adapter, checkpoints and curves.png are written to outputs/number-guess/.
"""

import argparse

import verifiers as vf


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2", help="hub id, local folder or 'smollm2' (default)")
    p.add_argument("--port", type=int, default=8000, help="port of the vf-vllm server (default 8000)")
    p.add_argument("--max-steps", type=int, default=40, help="optimizer steps (default 40)")
    cli = p.parse_args()
    vf.setup_logging("INFO")

    env = vf.load_environment("number-guess", num_train_examples=1000, num_eval_examples=20)
    model, tokenizer = vf.get_model_and_tokenizer(cli.model)
    args = vf.grpo_defaults(
        run_name="number-guess",
        preset="small",  # LoRA on a small model, one machine: no warm-up, no KL, no reporting
        max_steps=cli.max_steps,
        # One optimizer step = 4 prompts x 8 completions; the server on loopback. Below, what this task needs.
        # Per model turn (a guess is one or two tokens): a turn that rambles past 12 tokens
        # ends the game unwon. Such games are trained (with their reward of 0) rather than
        # left out, so GRPO pushes rambling down; left out, it was never discouraged.
        max_tokens=12,
        mask_truncated_completions=False,
        max_prompt_length=256,
        max_seq_len=512,
        learning_rate=5e-4,  # LoRA on a 135M model, 40 steps: high on purpose
        vllm_server_port=cli.port,
    )
    trainer = vf.GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        env=env,
        args=args,
        peft_config=vf.lora_defaults(r=8, alpha=16),
    )
    trainer.train()
    trainer.save_model(args.output_dir)


if __name__ == "__main__":
    main()

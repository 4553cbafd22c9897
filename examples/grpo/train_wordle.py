"""GRPO on wordle: the word game, up to six guesses per rollout (multi-turn), LoRA.

Each turn the model answers <guess>word</guess> and the environment replies with
one mark per letter (G right place, Y elsewhere in the word, X absent). Partial
credit: 1 for solving, up to 0.5 more for solving in fewer guesses, 0.2 for the
letters of the last guess, 0.2 for the format.

Every term needs a <guess> tag, and SmolLM2-135M almost never writes one on its
own (none in 16 samples we drew), so with the default model nearly every rollout
scores 0 and there is little to learn from. Warm it up first with examples/sft.py
on good games (saved with vf-eval -s from a stronger model), or use a larger
instruct model (e.g. --model Qwen/Qwen2.5-1.5B-Instruct on a GPU, and serve it).

1. Install the environment and start the inference server in its own terminal:

    vf-install wordle
    MODEL=$(vf-models smollm2 | tail -n1)      # SmolLM2 as a local folder, built once
    vf-vllm --model "$MODEL" --port 8000 --max-model-len 2048 --enable-lora --max-lora-rank 8 \\
        --enforce-eager --gpu-memory-utilization 0.25 --no-enable-chunked-prefill

   The last line is for a CPU (its dtype is the CPU's, as the trainer's is; --gpu-memory-utilization is
   the share of RAM to reserve; --no-enable-chunked-prefill avoids a crash of vLLM's
   CPU backend when a seeded request's prompt is split). Leave it out on a GPU.
   Serve the model you train.

2. Train (the script waits up to 5 minutes for the server):

    python examples/grpo/train_wordle.py --max-steps 20

Server and training in one command (vf-rl, with vf.RLTrainer), sized for
Qwen2.5-1.5B-Instruct with one GPU serving and one training:

    vf-rl @ configs/vf-rl/wordle.toml

and on a CPU with SmolLM2 and this script's batch sizes:

    vf-rl @ configs/vf-rl/wordle.toml --model smollm2 \\
        --inference.gpus 0 --inference.args.enforce_eager true \\
        --inference.args.gpu_memory_utilization 0.25 \\
        --inference.args.no_enable_chunked_prefill true --trainer.gpus 0 \\
        --trainer.args.rollouts_per_example 8 --trainer.args.micro_batch_size 8 --trainer.args.batch_size 32

The LoRA adapter, checkpoints and curves.png are written to outputs/wordle/.
"""

import argparse

import verifiers as vf


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2", help="hub id, local folder or 'smollm2' (default)")
    p.add_argument("--port", type=int, default=8000, help="port of the vf-vllm server (default 8000)")
    p.add_argument("--max-steps", type=int, default=20, help="optimizer steps (default 20)")
    cli = p.parse_args()
    vf.setup_logging("INFO")

    env = vf.load_environment("wordle", num_eval_examples=20, max_guesses=6)
    model, tokenizer = vf.get_model_and_tokenizer(cli.model)
    args = vf.grpo_defaults(
        run_name="wordle",
        preset="small",  # LoRA on a small model, one machine: no warm-up, no KL, no reporting
        max_steps=cli.max_steps,
        # grpo_defaults: one optimizer step = 4 games x 8 rollouts, no KL penalty, no reporting,
        # the server on loopback; below, what this task needs.
        max_tokens=96,  # per guess: a short thought and the <guess> tag
        max_prompt_length=512,
        max_seq_len=2048,  # the whole game: six guesses and their feedback
        learning_rate=5e-5,  # a LoRA rate; grpo_defaults' 1e-6 suits full fine-tuning
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

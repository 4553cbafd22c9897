"""GRPO on arithmetic: SmolLM2-135M-Instruct + LoRA learns one-digit sums on a CPU.

The model answers "What is 8 + 7?" with a number; the reward is 1 when the last
integer of its reply is the answer. SmolLM2 knows these sums but at temperature 1
mostly talks around them and runs out of tokens (about one reply in five is
right), so groups differ in reward from the first step and the reward rises
within 30 steps: the settings of the learning benchmark (benchmarks/learning.py).

1. Install the environment and start the inference server in its own terminal:

    vf-install arithmetic
    MODEL=$(vf-models smollm2 | tail -n1)      # SmolLM2 as a local folder, built once
    vf-vllm --model "$MODEL" --port 8000 --max-model-len 1024 --enable-lora --max-lora-rank 8 \\
        --enforce-eager --gpu-memory-utilization 0.25 --no-enable-chunked-prefill

   The last line is for a CPU (its dtype is the CPU's, as the trainer's is; --gpu-memory-utilization is
   the share of RAM to reserve; --no-enable-chunked-prefill avoids a crash of vLLM's
   CPU backend when a seeded request's prompt is split). Leave it out on a GPU.
   Serve the model you train.

2. Train (the script waits up to 5 minutes for the server):

    python examples/grpo/train_arithmetic.py --max-steps 30

Server and training in one command (vf-rl, with vf.RLTrainer and these sizes):

    vf-rl @ configs/vf-rl/arithmetic.toml

The LoRA adapter, checkpoints and curves.png are written to outputs/arithmetic/.
"""

import argparse

import verifiers as vf


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2", help="hub id, local folder or 'smollm2' (default)")
    p.add_argument("--port", type=int, default=8000, help="port of the vf-vllm server (default 8000)")
    p.add_argument("--max-steps", type=int, default=30, help="optimizer steps (default 30)")
    cli = p.parse_args()
    vf.setup_logging("INFO")

    env = vf.load_environment("arithmetic", num_train_examples=1000, num_eval_examples=20)
    model, tokenizer = vf.get_model_and_tokenizer(cli.model)
    args = vf.grpo_defaults(
        run_name="arithmetic",
        preset="small",  # LoRA on a small model, one machine: no warm-up, no KL, no reporting
        max_steps=cli.max_steps,
        # One optimizer step = 4 prompts x 8 completions; the server on loopback. Below, what this task needs.
        # Short on purpose: a reply that rambles past 40 tokens is cut off, usually before the
        # answer, and left out of the loss (mask_truncated_completions), so what GRPO reinforces
        # is stating the answer early.
        max_tokens=40,
        max_prompt_length=256,
        max_seq_len=512,
        learning_rate=5e-4,  # LoRA on a 135M model, 30 steps: high on purpose
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

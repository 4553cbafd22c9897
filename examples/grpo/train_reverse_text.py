"""GRPO on reverse-text: SmolLM2-135M-Instruct + LoRA, sized to train on a CPU.

The model reverses a sentence character by character; the reward is the LCS
similarity of its reversal to the true one (the text in <reversed_text> tags, or
the whole reply when the tags are missing, so a small model's first attempts
already differ in reward), plus 0.2 for the tag format.

1. Install the environment and start the inference server in its own terminal:

    vf-install reverse-text
    MODEL=$(vf-models smollm2 | tail -n1)      # SmolLM2 as a local folder, built once
    vf-vllm --model "$MODEL" --port 8000 --max-model-len 1024 --enable-lora --max-lora-rank 8 \\
        --enforce-eager --gpu-memory-utilization 0.25 --no-enable-chunked-prefill

   The last line is for a CPU (its dtype is the CPU's, as the trainer's is; --gpu-memory-utilization is
   the share of RAM to reserve; --no-enable-chunked-prefill avoids a crash of vLLM's
   CPU backend when a seeded request's prompt is split). Leave it out on a GPU.
   Serve the model you train.

2. Train (the script waits up to 5 minutes for the server):

    python examples/grpo/train_reverse_text.py --max-steps 20

Server and training in one command (vf-rl, with vf.RLTrainer and these sizes):

    vf-rl @ configs/vf-rl/reverse-text-cpu.toml

The LoRA adapter, checkpoints and curves.png are written to outputs/reverse-text/.
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

    env = vf.load_environment("reverse-text", num_train_examples=400, num_eval_examples=20)
    model, tokenizer = vf.get_model_and_tokenizer(cli.model)
    args = vf.grpo_defaults(
        run_name="reverse-text",
        preset="small",  # LoRA on a small model, one machine: no warm-up, no KL, no reporting
        max_steps=cli.max_steps,
        # One optimizer step = 4 prompts x 8 completions; the server on loopback. Below, what this task needs.
        max_tokens=96,  # per completion; reversals are short
        max_prompt_length=256,
        max_seq_len=512,
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

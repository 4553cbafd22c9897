"""GRPO on calculator: SmolLM2-135M-Instruct + LoRA learns to use a calculator tool, on a CPU.

The model answers "What is 8599 * 782?"; the reward is 1 when the last integer of
its final reply is the product. It cannot multiply such numbers in its head, so the
reward rises only as it learns to call the `calculator` tool (a Hermes-style
<tool_call> block, turned into an OpenAI tool call by vf-vllm) and to copy the
result into its answer. Two worked exchanges in the prompt get it to call the tool
in about one reply in five at first; within 30 steps it calls it almost always: the
settings of the learning benchmark (benchmarks/learning.py --suite multiturn).

1. Install the environment and start the inference server in its own terminal:

    vf-install calculator
    MODEL=$(vf-models smollm2 | tail -n1)      # SmolLM2 as a local folder, built once
    vf-vllm --model "$MODEL" --port 8000 --max-model-len 1024 --enable-lora --max-lora-rank 8 \\
        --enable-auto-tool-choice --tool-call-parser hermes \\
        --enforce-eager --gpu-memory-utilization 0.25 --no-enable-chunked-prefill

   The last line is for a CPU (its dtype is the CPU's, as the trainer's is; --gpu-memory-utilization is
   the share of RAM to reserve; --no-enable-chunked-prefill avoids a crash of vLLM's
   CPU backend when a seeded request's prompt is split). Leave it out on a GPU.
   Serve the model you train. SmolLM2's own chat template ignores tools, so vf-vllm
   serves it with verifiers' tool template; the two tool flags turn on vLLM's hermes parser.

2. Train (the script waits up to 5 minutes for the server):

    python examples/grpo/train_calculator.py --max-steps 30

Server and training in one command (vf-rl, with vf.RLTrainer and these sizes):

    vf-rl @ configs/vf-rl/calculator.toml

The LoRA adapter, checkpoints and curves.png are written to outputs/calculator/.
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

    env = vf.load_environment("calculator", num_train_examples=1000, num_eval_examples=20)
    model, tokenizer = vf.get_model_and_tokenizer(cli.model)
    args = vf.grpo_defaults(
        run_name="calculator",
        preset="small",  # LoRA on a small model, one machine: no warm-up, no KL, no reporting
        max_steps=cli.max_steps,
        # One optimizer step = 4 prompts x 8 completions; the server on loopback. Below, what this task needs.
        # Per model turn: a tool call takes about 30 tokens and the answer fewer than 10.
        max_tokens=48,
        # The prompt holds the tool schema and two worked exchanges (about 440 tokens).
        max_prompt_length=512,
        max_seq_len=768,
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

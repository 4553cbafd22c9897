"""GRPO on gsm8k: grade-school math with an exact-answer reward, LoRA, CPU-sized.

The model reasons, then ends with \\boxed{answer}; the reward is 1 when math-verify
finds the boxed answer equal to the reference, plus 0.2 for a complete \\boxed{}.
Data: the hub dataset openai/gsm8k, or (offline, when HF_HUB_OFFLINE=1 is set)
the 60-problem sample shipped with the environment.

Expect no learning with the default model: SmolLM2-135M-Instruct scores close
to 0 here, and a group whose rewards are all equal gives no gradient. The script
runs end to end on a CPU; to see the reward rise use e.g.
--model Qwen/Qwen2.5-0.5B-Instruct on a GPU (and serve that model).

1. Install the environment and start the inference server in its own terminal:

    vf-install gsm8k
    MODEL=$(vf-models smollm2 | tail -n1)      # SmolLM2 as a local folder, built once
    vf-vllm --model "$MODEL" --port 8000 --max-model-len 1024 --enable-lora --max-lora-rank 8 \\
        --enforce-eager --gpu-memory-utilization 0.25 --no-enable-chunked-prefill

   The last line is for a CPU (its dtype is the CPU's, as the trainer's is; --gpu-memory-utilization is
   the share of RAM to reserve; --no-enable-chunked-prefill avoids a crash of vLLM's
   CPU backend when a seeded request's prompt is split). Leave it out on a GPU.
   Serve the model you train.

2. Train (the script waits up to 5 minutes for the server):

    python examples/grpo/train_gsm8k.py --max-steps 20

Server and training in one command (vf-rl, with vf.RLTrainer), sized for
Qwen2.5-0.5B-Instruct with one GPU serving and one training:

    vf-rl @ configs/vf-rl/gsm8k.toml

and on a CPU with SmolLM2, the offline sample and this script's batch sizes:

    vf-rl @ configs/vf-rl/gsm8k.toml --model smollm2 --env.args.use_local_sample true \\
        --inference.gpus 0 --inference.args.enforce_eager true \\
        --inference.args.gpu_memory_utilization 0.25 \\
        --inference.args.no_enable_chunked_prefill true --trainer.gpus 0 \\
        --trainer.args.rollouts_per_example 8 --trainer.args.micro_batch_size 8 --trainer.args.batch_size 32

The LoRA adapter, checkpoints and curves.png are written to outputs/gsm8k/.
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

    # use_local_sample=None: the offline sample when HF_HUB_OFFLINE=1, else openai/gsm8k from the hub.
    env = vf.load_environment("gsm8k", use_local_sample=None, num_eval_examples=20)
    model, tokenizer = vf.get_model_and_tokenizer(cli.model)
    args = vf.grpo_defaults(
        run_name="gsm8k",
        preset="small",  # LoRA on a small model, one machine: no warm-up, no KL, no reporting
        max_steps=cli.max_steps,
        # One optimizer step = 4 prompts x 8 completions; the server on loopback. Below, what this task needs.
        max_tokens=256,  # room for a short worked solution
        max_prompt_length=512,
        max_seq_len=1024,
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

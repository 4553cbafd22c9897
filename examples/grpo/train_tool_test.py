"""GRPO on tool-test: call exactly the tools a task names (multi-turn tool calling), LoRA.

Eight small deterministic tools (add, multiply, reverse_text, get_weather, ...);
each task names 1-2 of them with arguments. The reward is 1 when the set of tools
called equals the set asked for. A smoke task for tool-calling plumbing.

Tool calls need a chat template that shows the model its tools, and a server that
parses the calls: here the Hermes format (<tool_call>{...}</tool_call>). SmolLM2's
chat template ignores the tools (the model never sees the schemas or the format)
and renders an earlier tool-call turn as an empty message, so with the default
model tool calls are rare and the reward stays near 0: the run exercises the
plumbing, not learning. To learn, use a model whose template renders tools in the
Hermes format, e.g. --model Qwen/Qwen2.5-0.5B-Instruct, and serve it.

1. Install the environment and start the inference server in its own terminal:

    vf-install tool-test
    MODEL=$(vf-models smollm2 | tail -n1)      # SmolLM2 as a local folder, built once
    vf-vllm --model "$MODEL" --port 8000 --max-model-len 2048 --enable-lora --max-lora-rank 8 \\
        --enable-auto-tool-choice --tool-call-parser hermes \\
        --enforce-eager --gpu-memory-utilization 0.25 --no-enable-chunked-prefill

   The last line is for a CPU (its dtype is the CPU's, as the trainer's is; --gpu-memory-utilization is
   the share of RAM to reserve; --no-enable-chunked-prefill avoids a crash of vLLM's
   CPU backend when a seeded request's prompt is split). Leave it out on a GPU.
   Serve the model you train.

2. Train (the script waits up to 5 minutes for the server):

    python examples/grpo/train_tool_test.py --max-steps 20

Server and training in one command (vf-rl, with vf.RLTrainer and CPU sizes):

    vf-rl @ configs/vf-rl/tool-test.toml

The LoRA adapter, checkpoints and curves.png are written to outputs/tool-test/.
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

    # 1-2 tools per task; at most 4 model turns per rollout.
    env = vf.load_environment(
        "tool-test", num_train_examples=500, num_eval_examples=20, max_tools=2, max_turns=4
    )
    model, tokenizer = vf.get_model_and_tokenizer(cli.model)
    args = vf.grpo_defaults(
        run_name="tool-test",
        preset="small",  # LoRA on a small model, one machine: no warm-up, no KL, no reporting
        max_steps=cli.max_steps,
        # grpo_defaults: one optimizer step = 4 tasks x 8 rollouts, no KL penalty, no reporting,
        # the server on loopback; below, what this task needs.
        max_tokens=128,  # per model turn: tool calls or DONE
        max_prompt_length=1024,  # a tool-aware template adds ~700 tokens of schemas for 8 tools
        max_seq_len=2048,  # the whole rollout: every turn and tool result
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

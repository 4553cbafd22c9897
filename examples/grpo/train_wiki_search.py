"""GRPO on wiki-search: answer questions by searching a local corpus with tools (multi-turn), LoRA.

Three tools over a BM25 index of a small fictional encyclopedia (search_pages,
view_sections, read_section), so answers can only come from searching. The reward
is 1 for an exact-match <answer> (after normalisation), plus 0.2 for the format.

Tool calls need a chat template that shows the model its tools, and a server that
parses the calls: here the Hermes format (<tool_call>{...}</tool_call>). SmolLM2's
chat template ignores the tools (the model never sees the schemas or the format)
and renders an earlier tool-call turn as an empty message, so with the default
model tool calls are rare and the reward stays near 0: the run exercises the
plumbing, not learning. To learn, use a model whose template renders tools in the
Hermes format, e.g. --model Qwen/Qwen2.5-1.5B-Instruct on a GPU, and serve it.

1. Install the environment and start the inference server in its own terminal:

    vf-install wiki-search
    MODEL=$(vf-models smollm2 | tail -n1)      # SmolLM2 as a local folder, built once
    vf-vllm --model "$MODEL" --port 8000 --max-model-len 3072 --enable-lora --max-lora-rank 8 \\
        --enable-auto-tool-choice --tool-call-parser hermes \\
        --enforce-eager --gpu-memory-utilization 0.25 --no-enable-chunked-prefill

   The last line is for a CPU (its dtype is the CPU's, as the trainer's is; --gpu-memory-utilization is
   the share of RAM to reserve; --no-enable-chunked-prefill avoids a crash of vLLM's
   CPU backend when a seeded request's prompt is split). Leave it out on a GPU.
   Serve the model you train.

2. Train (the script waits up to 5 minutes for the server):

    python examples/grpo/train_wiki_search.py --max-steps 20

Server and training in one command (vf-rl, with vf.RLTrainer), sized for
Qwen2.5-1.5B-Instruct with one GPU serving and one training:

    vf-rl @ configs/vf-rl/wiki-search.toml

and on a CPU with SmolLM2 and this script's batch sizes:

    vf-rl @ configs/vf-rl/wiki-search.toml --model smollm2 \\
        --inference.gpus 0 --inference.args.enforce_eager true \\
        --inference.args.gpu_memory_utilization 0.25 \\
        --inference.args.no_enable_chunked_prefill true --trainer.gpus 0 \\
        --trainer.args.rollouts_per_example 8 --trainer.args.micro_batch_size 8 --trainer.args.batch_size 32

The LoRA adapter, checkpoints and curves.png are written to outputs/wiki-search/.
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

    # 3 hits per search keeps the context short; at most 6 model turns per rollout.
    env = vf.load_environment("wiki-search", max_turns=6, max_results=3)
    model, tokenizer = vf.get_model_and_tokenizer(cli.model)
    args = vf.grpo_defaults(
        run_name="wiki-search",
        preset="small",  # LoRA on a small model, one machine: no warm-up, no KL, no reporting
        max_steps=cli.max_steps,
        # grpo_defaults: one optimizer step = 4 questions x 8 rollouts, no KL penalty, no reporting,
        # the server on loopback; below, what this task needs.
        max_tokens=192,  # per model turn: a tool call or the answer
        max_prompt_length=1536,  # system prompt, tool schemas, four worked questions and the question
        max_seq_len=3072,  # the whole rollout: every turn and tool result
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

"""SFT warm-up with TRL's SFTTrainer, on saved rollouts or on a dataset; LoRA optional.

A few hundred supervised steps on good rollouts teach a small model an
environment's format before GRPO, so its first groups already earn some reward.

From rollouts saved by `vf-eval -s` (for example of a stronger model), keeping
the good ones:

    vf-eval reverse-text -m gpt-4.1-mini -n 200 -r 2 -s     # -> outputs/evals/<env>--<model>/<id>/
    python examples/sft.py outputs/evals/reverse-text--gpt-4.1-mini/<id> --min-reward 0.9

Each rollout becomes one example per assistant turn (the conversation before the
turn is the prompt), so the loss covers only what the model said, never the
environment's or the tools' messages. Rollouts that ended in an error are dropped.
For a tool environment add --tools-from <env-id>, so the chat template shows the
tools as it did during the rollouts; tool calls are kept in the OpenAI format
(arguments as JSON text), which a model's chat template should render as it emits them.

DATA may also be a dataset: a local .jsonl/.json/.parquet/.csv file or folder, a
folder written by Dataset.save_to_disk, or a hub id (with --split). Columns read:
`prompt` + `completion` (text or chat messages), `messages`, `text`, or
`question` + `answer` (asked as a user message, answered by the assistant).

Offline on a CPU: --model smollm2 (the default; a local SmolLM2-135M-Instruct) or a
tiny model from `vf-models tiny --out DIR`. The output folder holds a full model
(a LoRA adapter is merged in) and its tokenizer: pass it as --model to an
examples/grpo/ script and to vf-vllm.
"""

import argparse
import json
from pathlib import Path


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", help="results.jsonl, a vf-eval run folder, a dataset file or folder, or a hub id")
    p.add_argument("--model", default="smollm2", help="hub id, local folder or 'smollm2' (default)")
    p.add_argument("--split", default="train", help="split of a hub or folder dataset (default train)")
    p.add_argument("--min-reward", type=float, default=None, help="keep rollouts with reward >= this")
    p.add_argument("--tools-from", metavar="ENV_ID", help="show each example this environment's tools")
    p.add_argument("--lora", action="store_true", help="train a LoRA adapter (r=16), merged in at the end")
    p.add_argument("--epochs", type=float, default=1.0, help="passes over the data (default 1)")
    p.add_argument("--max-steps", type=int, default=-1, help="stop after this many steps (default: --epochs)")
    p.add_argument("--batch-size", type=int, default=8, help="examples per step (default 8)")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default 2e-4 LoRA, 2e-5 full)")
    p.add_argument("--max-length", type=int, default=1024, help="longest example in tokens (default 1024)")
    p.add_argument("--output-dir", default=None, help="default: outputs/sft-<data name>")
    return p.parse_args()


def clean(messages: list[dict]) -> list[dict]:
    """Keep what chat templates read: role, content (never None), tool calls and their ids."""
    out = []
    for m in messages:
        msg = {"role": m["role"], "content": m.get("content") or ""}
        if m.get("tool_calls"):
            msg["tool_calls"] = m["tool_calls"]
        if m.get("tool_call_id"):
            msg["tool_call_id"] = m["tool_call_id"]
        out.append(msg)
    return out


def to_examples(row: dict, min_reward: float | None) -> list[dict]:
    """One row of data -> SFTTrainer examples (none if it is a failed or low-reward rollout)."""
    if row.get("error") or (
        min_reward is not None and "reward" in row and (row["reward"] or 0.0) < min_reward
    ):
        return []
    if "prompt" in row and "completion" in row:
        prompt, completion = row["prompt"], row["completion"]
        if isinstance(prompt, str):
            return [{"prompt": prompt, "completion": completion}]
        prompt, completion = clean(prompt), clean(completion)
        turns = [i for i, m in enumerate(completion) if m["role"] == "assistant"]
        return [{"prompt": prompt + completion[:i], "completion": [completion[i]]} for i in turns]
    if "messages" in row:
        return [{"messages": clean(row["messages"])}]
    if "text" in row:
        return [{"text": row["text"]}]
    if "question" in row and "answer" in row:
        prompt = [{"role": "user", "content": row["question"]}]
        return [{"prompt": prompt, "completion": [{"role": "assistant", "content": str(row["answer"])}]}]
    need = "prompt + completion, messages, text, or question + answer"
    raise SystemExit(f"cannot read rows with columns {sorted(row)}: need {need}")


def load_rows(data: str, split: str) -> list[dict]:
    from datasets import load_dataset, load_from_disk

    path = Path(data)
    if path.is_dir() and (path / "results.jsonl").is_file():
        path = path / "results.jsonl"  # a vf-eval -s run folder
    if path.suffix == ".jsonl":  # read line by line: rollouts' `info` fields need not share a schema
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if path.is_file():
        kind = {".json": "json", ".parquet": "parquet", ".csv": "csv"}.get(path.suffix)
        if kind is None:
            raise SystemExit(f"{path}: expected a .jsonl, .json, .parquet or .csv file")
        return load_dataset(kind, data_files=str(path), split="train").to_list()
    if path.is_dir() and (path / "dataset_info.json").is_file():
        return load_from_disk(str(path)).to_list()
    return load_dataset(data, split=split).to_list()  # a folder of data files, or a hub id


def data_name(data: str) -> str:
    """A short name for the output folder: <env>--<model>-<run id> for a vf-eval run, else the file's."""
    path = Path(data.rstrip("/"))
    if path.name == "results.jsonl":
        path = path.parent
    if (path / "results.jsonl").is_file():
        return f"{path.parent.name}-{path.name}"
    return path.stem


def main() -> None:
    cli = parse_args()
    import torch
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    import verifiers as vf

    vf.setup_logging("INFO")
    rows = load_rows(cli.data, cli.split)
    examples = [ex for row in rows for ex in to_examples(row, cli.min_reward)]
    print(f"{len(rows)} rows -> {len(examples)} training examples")
    if not examples:
        raise SystemExit("nothing to train on: lower --min-reward or check the data")
    if cli.tools_from:
        # SFTTrainer hands a "tools" column (JSON text) to the chat template
        tools = json.dumps(vf.load_environment(cli.tools_from).oai_tools or [])
        examples = [{**ex, "tools": tools} for ex in examples]

    model, tokenizer = vf.get_model_and_tokenizer(cli.model)
    output_dir = cli.output_dir or f"outputs/sft-{data_name(cli.data)}"
    args = SFTConfig(
        output_dir=output_dir,
        num_train_epochs=cli.epochs,
        max_steps=cli.max_steps,
        per_device_train_batch_size=cli.batch_size,
        learning_rate=cli.lr or (2e-4 if cli.lora else 2e-5),
        lr_scheduler_type="cosine",
        warmup_steps=0.05,  # a fraction: the first 5% of the steps
        max_length=cli.max_length,  # longer examples are cut
        bf16=torch.cuda.is_available() and torch.cuda.is_bf16_supported(),  # fp32 on a CPU
        gradient_checkpointing=False,  # a 135M model fits; turn it on for larger models
        logging_steps=1,
        save_strategy="no",  # the model is saved once, below
        report_to="none",  # or "wandb"
    )
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(examples),
        processing_class=tokenizer,
        peft_config=vf.lora_defaults(r=16, alpha=32) if cli.lora else None,
    )
    trainer.train()

    model = trainer.model.merge_and_unload() if cli.lora else trainer.model  # a plain model folder
    model.config.use_cache = True
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    print(f"model saved in {output_dir}")


if __name__ == "__main__":
    main()

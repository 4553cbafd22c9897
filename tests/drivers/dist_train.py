"""A short GRPO run that ``tests/training/test_distributed.py`` launches, one or several processes.

    ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2 tests/drivers/dist_train.py ...
    accelerate launch --config_file configs/zero3-cpu.yaml tests/drivers/dist_train.py ...
    python tests/drivers/dist_train.py ...            # one process
    ACCELERATE_USE_CPU=1 python -m torch.distributed.run --nproc_per_node 2 tests/drivers/dist_train.py ...

``tests/training/lifecycle/test_exit_status.py`` launches it under both launchers and checks exit
statuses; ``--crash-rank R`` raises ``RuntimeError`` on rank R as step ``--crash-step`` begins.

Rollouts come from a real vf-vllm server (``--server URL``) or from the test's fake
OpenAI server (``--fake URL``: deterministic replies per (prompt, seed), so two runs
generate identical batches). Each rank writes ``rank<r>.json`` into ``--out`` with what
the test checks:

- ``server_connections``: TCP connections this process opened to the server's port
  (counted by wrapping ``socket.socket.connect``): only rank 0 may talk to the server.
- ``global_batches`` / ``trained``: a short hash of every sample (prompt + completion
  token ids) of each generation batch as this rank received it, and of the rows of each
  micro-batch it trained: every rank must get the same batch and train its own slice;
  ``trained_with_loss_tokens``: rows of each micro-batch that have loss tokens.
- ``gathers``: under ZeRO-3, the parameters gathered at once for weight sync (count and
  elements) next to the model's size; ``local_numel`` is this rank's shard.
- ``logprob_gaps`` (``--check-logprobs``): after each sync, max |server log-prob -
  trainer log-prob| over a sampled completion.
- ``log_history``: Trainer's logs (rank 0); the last synced weights go to ``weights.pt``
  in fake mode (rank 0), gathered by the same code that feeds the server.
- With ``--beta`` (no LoRA): ``ref_logprobs``, the reference log-probs of each trained row's
  loss tokens (``"<batch>:<row hash>"``); ``ref_forwards``, this rank's reference forward
  passes; ``ref_local_numel``, its shard of the reference; ``loaded_sharded``, whether the model
  was loaded under ``zero.Init``. ``--ref-sync-alpha`` mixes the
  reference into the policy after every step; ``ref_mixes`` holds, per mix, the largest
  deviation from ``alpha * policy + (1 - alpha) * ref`` and the largest change of the reference
  (whole tensors, gathered on every rank).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import socket
import sys
from pathlib import Path
from urllib.parse import urlparse

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # `tests.doubles` from the checkout

RECORD: dict = {
    "server_connections": 0,
    "global_batches": [],
    "trained": [],
    "trained_with_loss_tokens": [],
    "gathers": [],
    "logprob_gaps": [],
    "ref_logprobs": {},
    "ref_forwards": 0,
    "ref_mixes": [],
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--server", help="vf-vllm base URL (http://127.0.0.1:PORT)")
    src.add_argument("--fake", help="fake OpenAI server URL (http://127.0.0.1:PORT/v1)")
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--per-device", type=int, default=4)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--num-generations", type=int, default=4)
    p.add_argument("--loss-type", default="dr_grpo")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--beta", type=float, default=0.0)
    p.add_argument("--lora", action="store_true")
    p.add_argument(
        "--bf16", action="store_true", help="bf16=True (a GPU launch: FSDP / ZeRO-3 configs ask for bf16)"
    )
    p.add_argument("--lora-sync", default="auto", help="GRPOConfig.lora_sync (auto: merged to a CPU server)")
    p.add_argument("--mask-truncated", action="store_true", help="mask_truncated_completions=True")
    p.add_argument("--check-logprobs", action="store_true")
    p.add_argument("--ref-sync-alpha", type=float, help="sync_ref_model after every step with this alpha")
    p.add_argument("--crash-rank", type=int, help="raise RuntimeError on this rank when --crash-step begins")
    p.add_argument("--crash-step", type=int, default=2)
    p.add_argument(
        "--model-first", action="store_true",
        help="load the model before GRPOConfig, as the guides' Quick Start does (not under zero.Init)",
    )  # fmt: skip
    return p.parse_args(argv)


def count_connections(port: int) -> None:
    """Count this process's connections to ``port`` (requests and asyncio both call ``socket.connect``)."""
    original = socket.socket.connect

    def connect(self, address):
        if isinstance(address, tuple) and len(address) >= 2 and address[1] == port:
            RECORD["server_connections"] += 1
        return original(self, address)

    socket.socket.connect = connect


def row_key(ids) -> str:
    return hashlib.sha1(json.dumps([int(i) for i in ids]).encode()).hexdigest()[:12]


def char_length_reward(completion, **_) -> float:
    text = completion[-1]["content"] if isinstance(completion, list) else completion
    return min(len(text), 200) / 100.0


def fake_reply(request: dict) -> str:
    """Deterministic per (prompt, seed): 1-12 characters, so rewards differ within a group."""
    key = f"{request.get('messages')}|{request.get('seed')}".encode()
    return "abcdefghijkl"[: 1 + hashlib.sha256(key).digest()[0] % 12]


class FakeClient:
    """The trainer's client for the fake server: OpenAI calls pass through, weight syncs are kept."""

    def __init__(self, url: str):
        from tests.doubles.openai_server import make_client

        self._oai = make_client(url)
        self.last_weights: dict = {}
        self.syncs: list[str] = []

    def __getattr__(self, name):
        return getattr(self._oai, name)

    def health(self):
        return {"model": "fake-model", "status": "ready"}

    def update_weights(self, named_tensors, **_):
        self.last_weights.update({n: t.detach().clone() for n, t in named_tensors})
        self.syncs.append("full")

    def update_lora(self, tensors, name="vf-lora", config=None):
        self.syncs.append("lora")

    def reset_prefix_cache(self):
        return True


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    url = a.server or a.fake
    count_connections(urlparse(url).port)

    import datasets
    import torch
    from transformers import TrainerCallback

    import verifiers as vf
    import verifiers.training.trainer as trainer_module
    from verifiers.training.loss.logprobs import sequence_logprobs
    from verifiers.training.processes import broadcast

    real_gather = trainer_module.zero3_gather

    mixing = []  # non-empty while the reference is synced: its gathers are not the weight sync's

    def recording_gather(params, **kw):
        if not mixing:
            numel = sum(int(getattr(p, "ds_numel", p.numel())) for p in params)
            RECORD["gathers"].append([len(params), numel])
        return real_gather(params, **kw)

    trainer_module.zero3_gather = recording_gather  # looked up when the syncer is built

    class RecordingTrainer(vf.GRPOTrainer):
        def _prepare_batch(self, batch):
            p = batch.processed
            RECORD["global_batches"].append(
                [row_key(list(x) + list(y)) for x, y in zip(p.prompt_ids, p.completion_ids, strict=True)]
            )
            return super()._prepare_batch(batch)

        def _prepare_inputs(self, inputs):
            out = super()._prepare_inputs(inputs)
            ids, attn = out["input_ids_BT"], out["attention_mask_BT"]
            widths = [int(row.nonzero().max()) + 1 for row in attn]
            RECORD["trained"].append([row_key(ids[b, :w].tolist()) for b, w in enumerate(widths)])
            RECORD["trained_with_loss_tokens"].append(int(out["loss_mask_BT"].any(-1).sum()))
            if "ref_logprobs_BT" in out:
                mask = out["loss_mask_BT"].bool()
                for b, w in enumerate(widths):
                    key = f"{len(RECORD['global_batches'])}:{row_key(ids[b, :w].tolist())}"
                    RECORD["ref_logprobs"][key] = out["ref_logprobs_BT"][b][mask[b]].tolist()
            return out

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            reference, logprobs, after_step = (
                self.reference,
                self.reference.logprobs,
                self.reference.after_step,
            )

            def counted_logprobs(ids, attn, start):
                RECORD["ref_forwards"] += 1
                return logprobs(ids, attn, start)

            def recorded_after_step(step):
                if reference.model is None:
                    return after_step(step)
                ref, policy = (self.accelerator.unwrap_model(m) for m in (reference.model, self.model))
                before, current = full_params(ref), full_params(policy)
                mixing.append(True)
                try:
                    after_step(step)
                finally:
                    mixing.pop()
                after, alpha = full_params(ref), self.args.ref_model_mixup_alpha
                if any(not torch.equal(after[n], before[n]) for n in after):
                    expected = {n: alpha * current[n] + (1 - alpha) * before[n] for n in after}
                    RECORD["ref_mixes"].append(
                        [max(float((after[n] - expected[n]).abs().max()) for n in after),
                         max(float((after[n] - before[n]).abs().max()) for n in after)]
                    )  # fmt: skip

            reference.logprobs, reference.after_step = counted_logprobs, recorded_after_step

    def full_params(model) -> dict:
        """Every parameter, whole (gathered on every rank under ZeRO-3), as float32 copies."""
        params = dict(model.named_parameters())
        zero3 = any(hasattr(p, "ds_id") for p in params.values())
        with real_gather(list(params.values())) if zero3 else contextlib.nullcontext():
            return {n: p.detach().float().clone() for n, p in params.items()}

    class LogprobCheck(TrainerCallback):
        """After each sync: rank 0 samples from the server; every rank scores the same tokens (under
        ZeRO-3 a forward pass is collective); rank 0 records the largest log-prob gap."""

        def __init__(self, trainer):
            self.trainer = trainer

        def on_step_end(self, args, state, control, **kwargs):
            t = self.trainer
            sample = None
            if t.accelerator.is_main_process:
                out = t.client.sync_openai.completions.create(
                    model=t.server.served_model_name, prompt="Count to three.", max_tokens=12, logprobs=1,
                    temperature=1.0, extra_body={"return_token_ids": True, "return_tokens_as_token_ids": True},
                )  # fmt: skip
                c = out.choices[0]
                sample = (list(c.prompt_token_ids), list(c.token_ids), list(c.logprobs.token_logprobs))
            prompt, completion, server_lp = broadcast(t.accelerator, sample)
            ids = torch.tensor([prompt + completion])
            with torch.no_grad():
                lp, _ = sequence_logprobs(t.model, ids, torch.ones_like(ids), len(prompt))
            gap = max(abs(x - y) for x, y in zip(lp[0].tolist(), server_lp, strict=True))
            RECORD["logprob_gaps"].append(gap)

    class Crash(TrainerCallback):
        """An injected failure: ``RuntimeError`` on one rank as a step begins."""

        def __init__(self, rank: int, crash_rank: int, crash_step: int):
            self.rank, self.crash_rank, self.crash_step = rank, crash_rank, crash_step

        def on_step_begin(self, args, state, control, **kwargs):
            if self.rank == self.crash_rank and state.global_step + 1 == self.crash_step:
                raise RuntimeError(f"injected failure on rank {self.rank} at step {self.crash_step}")

    port = urlparse(url).port
    if a.model_first:
        model, tokenizer = vf.get_model_and_tokenizer(a.model)
    sync_ref = {}
    if a.ref_sync_alpha is not None:
        sync_ref = dict(sync_ref_model=True, ref_model_mixup_alpha=a.ref_sync_alpha, ref_model_sync_steps=1)
    args = vf.GRPOConfig(
        **sync_ref,
        output_dir=str(Path(a.out) / "trainer"),
        # No use_cpu / ddp_backend: under a multi-process launch on CPU GRPOConfig picks gloo
        # (use_cpu=True would make accelerate ignore DeepSpeed); DDP's launch sets ACCELERATE_USE_CPU=1.
        report_to="none",
        max_steps=a.steps,
        per_device_train_batch_size=a.per_device,
        gradient_accumulation_steps=a.grad_accum,
        num_generations=a.num_generations,
        learning_rate=a.lr,
        loss_type=a.loss_type,
        lora_sync=a.lora_sync,
        beta=a.beta,
        max_tokens=16 if a.server else 12,
        max_seq_len=256,
        max_prompt_length=128,
        logging_steps=1,
        save_strategy="no",
        num_batches_ahead=0,
        mask_truncated_completions=a.mask_truncated,  # the random model never stops early: off by default
        # The fake server's log-probs are not the model's: no IS band then.
        importance_sampling_mask_low=0.5 if a.server else None,
        importance_sampling_mask_high=5.0 if a.server else None,
        vllm_server_host="127.0.0.1",
        vllm_server_port=port,
        vllm_server_timeout=60,
        async_generation_timeout=120,
        seed=0,
        bf16=a.bf16,
    )
    rank = args.process_index
    if not a.model_first:  # under ZeRO-3 it is then loaded under zero.Init, already sharded
        model, tokenizer = vf.get_model_and_tokenizer(a.model)
    rows = {"question": [f"Count to {i}." for i in range(8)], "answer": [""] * 8}
    env = vf.SingleTurnEnv(
        dataset=datasets.Dataset.from_dict(rows), rubric=vf.Rubric(funcs=[char_length_reward])
    )
    peft_config = None
    if a.lora:
        peft_config = vf.lora_defaults(r=8, alpha=16)
        peft_config.init_lora_weights = True
    client = FakeClient(a.fake) if a.fake and rank == 0 else None
    RECORD["loaded_sharded"] = any(hasattr(p, "ds_id") for p in model.parameters())  # under zero.Init
    trainer = RecordingTrainer(
        model=model, processing_class=tokenizer, env=env, args=args, peft_config=peft_config, client=client
    )
    if a.check_logprobs:
        trainer.add_callback(LogprobCheck(trainer))
    if a.crash_rank is not None:
        trainer.add_callback(Crash(rank, a.crash_rank, a.crash_step))
    trainer.train()

    params = list(trainer.model.parameters())
    RECORD.update(
        rank=rank,
        world_size=args.world_size,
        zero3=trainer._zero3(),
        device=str(trainer.accelerator.device),
        distributed_type=str(trainer.accelerator.distributed_type.value),
        sync_mode=trainer.syncer.mode,
        num_params=len(params),
        model_numel=sum(int(getattr(p, "ds_numel", p.numel())) for p in params),
        local_numel=sum(int(p.ds_tensor.numel()) if hasattr(p, "ds_tensor") else p.numel() for p in params),
        global_step=trainer.state.global_step,
        ref_local_numel=sum(
            int(p.ds_tensor.numel()) if hasattr(p, "ds_tensor") else p.numel()
            for p in (trainer.reference.model.parameters() if trainer.reference.model is not None else [])
        ),
        log_history=trainer.state.log_history if rank == 0 else [],
    )
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{rank}.json").write_text(json.dumps(RECORD))
    if client is not None:
        torch.save(client.last_weights, out / "weights.pt")
    print(f"dist_train rank {rank}/{args.world_size}: done, {trainer.state.global_step} steps", flush=True)


if __name__ == "__main__":
    main()

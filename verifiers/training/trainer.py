"""``GRPOTrainer``: a ``transformers.Trainer`` that learns from environment rollouts.

Wiring only; each stage lives in its own module (paths under ``verifiers/training/``), and
data flows forward through them:

    generation/producer.py   prompts -> env.a_generate through vf-vllm -> tokenized GeneratedBatch
    generation/generator.py  the producer, run ahead of training in a background thread (queue.py)
    loss/advantages.py       rewards -> group-relative advantages (and the difficulty filter)
    batch/tensors.py         ProcessedOutputs -> TrainBatch -> this process's micro-batches
    batch/prepared.py        GeneratedBatch -> TrainBatch -> PreparedBatch (the micro-batches trained);
                             the trainer adds old / reference log-probs to it (its models)
    loss/logprobs.py         model -> per-token log-probs and entropy
    loss/losses.py           log-probs, advantages, masks -> loss
    loss/reference.py        the KL term's reference model (Reference): its log-probs, its sync toward the policy
    weights/sync.py          weights -> server, after every optimizer step (server_link.py: client, syncer)
    inference/client/recovery.py  a lost server: wait for it, re-sync the weights, go on
    weights/precision.py     the trained weights' dtypes, set once (fp32 masters, a frozen base in bf16)
    metrics/                 per-step metrics (step.py), their names, curves
    types.py                 what crosses the stages: GeneratedBatch, PreparedBatch, Resync
    processes.py             several processes (accelerate): one object to all, waiting together
    lifecycle/checkpoint.py  pending rollouts and the batch in training, saved (as data) with each checkpoint
    lifecycle/checkpoint_save.py  the order of a save (CheckpointSave), disk failures as one CheckpointError
    lifecycle/shutdown.py    SIGINT / SIGTERM: finish the step, save it, exit 130 / 143

How ``Trainer``'s loop drives it: the train dataloader yields *step tickets*
(``{"micro_step": m}``, ``max_steps × gradient_accumulation_steps`` of them), not
prompts, because the generator must read prompts ahead of the trainer. Ticket
``m`` belongs to trained batch ``m // (micro_steps × num_iterations)`` (``generation_plan``
in config/batch_layout.py: one generation batch, or one optimizer step generated in
several rounds when a generation batch is smaller than a step); ``_prepare_inputs``
swaps the ticket for that batch's micro-batch, fetching the tokenized batch from the
generator, preparing it (batch/prepared.py) and scoring it with the trainer's models
on its first ticket. On resume ``Trainer`` skips the tickets
already trained, and the generator resumes from the saved prompt cursor with the
saved pending batches. Weights are synced in ``on_step_end`` (after the optimizer
step, before logging and saving), which also advances the generator's policy
version.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import time
from typing import Any

import torch
from torch.utils.data import DataLoader
from transformers import Trainer, TrainerCallback

from verifiers.errors import ConfigError, StopRequested
from verifiers.training.batch.prepared import (
    batches_trained,
    prepare_batch,
    scores_needed,
    train_batch,
)
from verifiers.training.config.assigned import resolved_config, with_epoch_steps
from verifiers.training.config.fields import GRPOConfig
from verifiers.training.generation.generator import BatchGenerator, build_generator
from verifiers.training.generation.producer import PromptTruncation, sampling_args_from_config
from verifiers.training.lifecycle import checkpoint as ckpt
from verifiers.training.lifecycle.checkpoint_save import CheckpointSave, save_checkpoint
from verifiers.training.lifecycle.shutdown import StopAtStepEnd, StopSignals, conclude
from verifiers.training.loss.logprobs import eval_logprobs, sequence_logprobs
from verifiers.training.loss.losses import compute_loss, loss_options, step_loss_scale
from verifiers.training.loss.reference import Reference
from verifiers.training.metrics import step as M
from verifiers.training.processes import (
    combine_metrics,
    max_over_processes,
    start_training_processes,
    wait_together,
)
from verifiers.training.shards import no_gather, zero3_gather
from verifiers.training.types import GeneratedBatch, PreparedBatch, Resync
from verifiers.training.weights.precision import frozen_linears_in_autocast_dtype, keep_fp32_master_weights
from verifiers.training.weights.server_link import ServerLink
from verifiers.training.weights.sync import WeightSyncer, check_tied_head, is_peft_model
from verifiers.utils.cpu_load import torch_threads_beside_neighbours
from verifiers.utils.logging import warn_once

logger = logging.getLogger("verifiers.training.trainer")


class _StepEnd(TrainerCallback):
    def __init__(self, trainer: GRPOTrainer):
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):
        self.trainer._after_optimizer_step()


def _ticket(items: list[int]) -> dict[str, int]:
    return {"micro_step": items[0]}


class GRPOTrainer(Trainer):
    """GRPO on ``env``'s rollouts, generated by a vf-vllm server and synced back after each step.

    ``GRPOTrainer(model, processing_class, env, args: GRPOConfig, peft_config=None,
    callbacks=None, optimizers=(None, None), client=None)``: ``model`` may be a name
    (loaded with ``vf.get_model``); ``peft_config`` wraps it in a PEFT adapter;
    ``client`` defaults to a ``VLLMClient`` at ``args.vllm_server_host:port``.
    """

    def __init__(
        self,
        model: Any,
        processing_class: Any,
        env: Any,
        args: GRPOConfig,
        peft_config: Any = None,
        callbacks: list | None = None,
        optimizers: tuple = (None, None),
        client: Any = None,
    ):
        if not isinstance(args, GRPOConfig):
            raise ConfigError(
                f"args must be a GRPOConfig, got {type(args).__name__}", hint="use vf.grpo_defaults(...)"
            )
        # 0.1.x scripts assign fields after grpo_defaults(): train with a new config checked and
        # derived from what is there now (the caller's object is left as it is).
        args = resolved_config(args)
        start_training_processes(args)  # the process group's timeout and clean exit, not the config's
        if isinstance(model, str):
            from verifiers.models import get_model

            model = get_model(model)
        if peft_config is not None:
            from peft import get_peft_model
            from transformers import set_seed

            # The adapter's random init follows the run's seed (Trainer seeds only later, in its
            # __init__; torch's own initial seed differs per process): two runs with one seed
            # start from the same adapter, as they sample the same rollouts.
            set_seed(args.seed)
            model = get_peft_model(model, peft_config)
        if is_peft_model(model):
            # A tied head trained apart (modules_to_save) never reaches vLLM: refused now, not at
            # the first sync (a merged-only LoRA on one side of the tie is caught there).
            check_tied_head(model.get_base_model(), model, merged=args.lora_sync == "merged")
        self.env = env
        dataset = env.get_dataset()
        self.plan = args.plan
        # One ticket list for the whole run: a run counted in epochs gets its step count here.
        args = with_epoch_steps(args, len(dataset))
        eval_dataset = env.get_eval_dataset() if args.eval_strategy != "no" else None
        data = {"train_dataset": dataset, "eval_dataset": eval_dataset, "processing_class": processing_class}
        # A max_prompt_length that no prompt fits (the template and tool schemas alone are longer)
        # is refused now, not at the first batch.
        PromptTruncation(dataset, env, processing_class, args.max_prompt_length).check_fits()
        super().__init__(model=model, args=args, callbacks=callbacks, optimizers=optimizers, **data)
        engine = "deepspeed" if self.is_deepspeed_enabled else ("fsdp" if self.is_fsdp_enabled else None)
        keep_fp32_master_weights(
            self.model, args, self.accelerator, engine=engine, log=self.is_world_process_zero()
        )
        if engine is None:  # (the engines own their parameters: nothing to unwrap)
            frozen_linears_in_autocast_dtype(
                self._unwrap(self.model), args, engine=None, log=self.is_world_process_zero()
            )
        if self.accelerator.device.type == "cpu":  # a neighbour's busy core holds back every thread
            line = torch_threads_beside_neighbours()
            if line and self.accelerator.is_main_process:
                warn_once(logger, "cpu-neighbours", line)
        self.server = ServerLink(args, self.accelerator, client)
        self.reference = Reference(
            lambda: self.model, self.accelerator, args,
            peft=is_peft_model(self.model), zero3=self._zero3(), unwrap=self._unwrap, gather=self._gather(),
        )  # fmt: skip
        self.metrics = M.MetricsAccumulator()
        self.generator: BatchGenerator | None = None
        self._prepared: PreparedBatch | None = None  # the batch in training
        self._resume_dir: str | None = None
        self._started = False
        self._last_step_end = time.perf_counter()
        self._wait_s = 0.0
        self.micro_per_batch = args.tickets_per_batch
        self._loss_options = loss_options(args)
        self.add_callback(_StepEnd(self))
        wake = lambda: self.generator.interrupt() if self.generator else None  # noqa: E731
        self.stop_signals = StopSignals(announce=self.accelerator.is_main_process, on_first=wake)
        # After _StepEnd: a stop saves the synced step.
        self.add_callback(StopAtStepEnd(self.accelerator, self.stop_signals))

    # ---- Trainer hooks: data -------------------------------------------------------------------
    def get_train_dataloader(self) -> DataLoader:
        # Not prepared by accelerate: every process walks the same tickets and takes its own
        # slice of each generation batch (split_batch), so no sharding of the loader.
        n = self.args.max_steps * self.args.gradient_accumulation_steps
        return DataLoader(range(n), batch_size=1, collate_fn=_ticket, shuffle=False, num_workers=0)

    def _prepare_inputs(self, inputs: dict[str, Any]) -> dict[str, Any]:
        g, j = divmod(int(inputs["micro_step"]), self.micro_per_batch)
        if self._prepared is None or self._prepared.index != g:
            self._prepared = self._load_batch(g)
        micro = self._prepared.micro[j % self.plan.micro_steps]
        step_in_batch = (j % self.plan.micro_steps) // self.args.gradient_accumulation_steps
        out = {k: v.to(self.args.device) if torch.is_tensor(v) else v for k, v in micro.items()}
        if self._prepared.step_counts:
            out["step_count"] = self._prepared.step_counts[step_in_batch]
        return out

    @property
    def trained_rollouts(self) -> list[str]:
        """Ids (``"<batch>.<k>:<digest of prompt and completion>"``) of the rollouts the latest step
        trained on (a slice of the batch when it spans several steps), e.g. for ``on_step_end``."""
        return list(self._prepared.rollout_ids) if self._prepared is not None else []

    def floating_point_ops(self, inputs: dict[str, Any]) -> int:
        return 0  # tickets carry no tokens; FLOPs are not tracked

    # ---- Trainer hooks: loss --------------------------------------------------------------------
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        args = self.args
        logprobs_BT, entropy_BT = sequence_logprobs(
            model,
            inputs["input_ids_BT"],
            inputs["attention_mask_BT"],
            inputs["start"],
            args.temperature,
            True,
        )
        old_BT = inputs.get("old_logprobs_BT")
        sampling_BT = inputs["sampling_logprobs_BT"]
        # Unknown sampling log-probs (NaN: retokenized or env tokens) get no correction.
        sampling_BT = torch.where(
            torch.isnan(sampling_BT), (old_BT if old_BT is not None else logprobs_BT).detach(), sampling_BT
        )
        loss, stats = compute_loss(
            args.loss_type,
            logprobs_BT,
            old_BT,
            sampling_BT,
            inputs["advantages_B"],
            inputs["loss_mask_BT"],
            ref_logprobs_BT=inputs.get("ref_logprobs_BT"),
            step_count=inputs.get("step_count"),
            entropy_BT=entropy_BT,
            **self._loss_options,
        )
        if inputs.get("step_count") is not None:
            # This micro-batch's share of the step's mean: undo Trainer's division by the
            # accumulation steps and the gradient averaging across processes (losses.py).
            P = self.accelerator.num_processes
            loss = loss * step_loss_scale(args.loss_type, self.current_gradient_accumulation_steps, P)
            # The logged loss is the mean over micro-batches and processes: of the scaled shares,
            # that is the step's loss.
            stats["loss"] = loss.detach()
        self.metrics.add(stats)
        return (loss, None) if return_outputs else loss

    # ---- generation batches ---------------------------------------------------------------------
    def _load_batch(self, g: int) -> PreparedBatch:
        self._ensure_started()
        restored = self._restored_batch(g)
        if restored is not None:
            return restored
        t0 = time.perf_counter()
        while True:  # Resync: the server came back from an outage and needs our weights first
            get = lambda: self.generator.get(g, resync=True)  # noqa: E731 (others: heartbeats, no timeout)
            batch = wait_together(self.accelerator, get, f"waiting for generation batch {g}")
            if isinstance(batch, StopRequested):  # a signal: every process leaves the step, none trains
                raise batch
            if not isinstance(batch, Resync):
                break
            self._sync_weights()
        self._wait_s += time.perf_counter() - t0
        self.server.sleep()  # server_sleep_during_step: nothing generates until this step's sync
        return self._prepare_batch(batch)

    def _prepare_batch(self, batch: GeneratedBatch) -> PreparedBatch:
        args = self.args
        pad_id = self.processing_class.pad_token_id
        pad_id = pad_id if pad_id is not None else self.processing_class.eos_token_id
        rewards, advantages_B, adv_stats, train = train_batch(batch, args, pad_id)
        if not train.loss_mask_BT.any():
            warn_once(
                logger,
                "no-loss-tokens",
                "generation batch %d has no trainable tokens (e.g. every completion hit max_tokens and "
                "mask_truncated_completions=True); raise max_tokens or set mask_truncated_completions=False",
                batch.index,
            )
        main, step = self.is_world_process_zero(), self.state.global_step
        samples = args.log_completions and main and step % args.logging_steps == 0
        M.record_batch(
            self.metrics, batch, rewards, advantages_B, adv_stats["zero_std_groups_frac"],
            main_process=main,
            samples_at=step if samples else None,
            num_samples=args.num_completions_to_print,
            to_wandb="wandb" in (args.report_to or []),
            tensorboard=M.tensorboard_writer(self.callback_handler.callbacks) if samples else None,
        )  # fmt: skip
        prepared = prepare_batch(
            batch,
            train,
            micro_steps=self.plan.micro_steps,
            gradient_accumulation_steps=args.gradient_accumulation_steps,
            loss_type=args.loss_type,
            num_processes=self.accelerator.num_processes,
            process_index=self.accelerator.process_index,
        )
        self._score(prepared)
        return prepared

    def _score(self, prepared: PreparedBatch) -> None:
        """Add the old-policy and reference log-probs each micro-batch needs (``scores_needed``), in
        place, before any of it is trained: they must not move while the batch is trained."""
        old, reference = scores_needed(
            num_iterations=self.args.num_iterations,
            micro_steps=self.plan.micro_steps,
            gradient_accumulation_steps=self.args.gradient_accumulation_steps,
            beta=self.args.beta,
        )
        for micro in prepared.micro:  # every rank, in order: under ZeRO-3 each forward is collective
            ids, attn, start = micro["input_ids_BT"], micro["attention_mask_BT"], micro["start"]
            if old:
                micro["old_logprobs_BT"] = self._logprobs(self.model, ids, attn, start)
            if reference:
                micro["ref_logprobs_BT"] = self.reference.logprobs(ids, attn, start)

    def _logprobs(self, model, ids, attn, start) -> torch.Tensor:
        return eval_logprobs(model, ids, attn, start, self.args.temperature, self.args.device)

    def _restored_batch(self, g: int) -> PreparedBatch | None:
        if self._resume_dir is None:
            return None
        rank = self.accelerator.process_index
        prepared, self._resume_dir = ckpt.load_prepared_batch(self._resume_dir, rank), None
        return prepared if prepared is not None and prepared.index == g else None

    # ---- server: generation, sync, eval (server_link.py) ---------------------------------------
    @property
    def client(self) -> Any:
        return self.server.client

    @property
    def syncer(self) -> WeightSyncer | None:
        return self.server.syncer

    def _zero3(self) -> bool:
        return self.is_deepspeed_enabled and self.accelerator.state.deepspeed_plugin.zero_stage == 3

    def _gather(self) -> Any:
        # Looked up here, in this module, when used (tests/drivers/dist_train.py records gathers).
        return zero3_gather if self._zero3() else no_gather

    def _unwrap(self, model: Any) -> Any:
        """``accelerator.unwrap_model(model)``, computed once per wrapper object: accelerate reads
        package metadata on every call (``is_deepspeed_available``), which leaves ~10 objects in
        reference cycles each time (issue 26: per step, freed only by a full collection)."""
        cache = self.__dict__.setdefault("_unwrapped", {})
        hit = cache.get(id(model))
        if hit is None or hit[0] is not model:
            hit = cache[id(model)] = (model, self.accelerator.unwrap_model(model))
        return hit[1]

    def _sync_weights(self) -> None:
        """Push the weights (waiting out a lost server), then tell the generator the model to request."""
        model = self._unwrap(self.model_wrapped)
        on_outage = lambda: self.metrics.add({"errors/server_restarts": 1.0})  # noqa: E731
        with self.stop_signals.interruptible(self.accelerator.num_processes == 1):  # a lost server's wait
            result = self.server.sync(model, gather=self._gather(), on_outage=on_outage)
        self.metrics.add({"time/sync_s": result.seconds})
        if self.generator is not None:
            self.generator.set_model(self.server.served_model_name)
            self.generator.resynced()

    def _ensure_started(self) -> None:
        """Once per ``train``: connect, push the current weights (the server may hold another run's;
        this also loads the adapter), and start the generator on the main process."""
        if self._started:
            return
        self._started = True
        with self.stop_signals.interruptible(self.accelerator.num_processes == 1):  # waiting for the server
            self.server.connect()
        self._sync_weights()
        if self.accelerator.is_main_process:
            self._start_generator()

    def _start_generator(self) -> None:
        state = ckpt.load_generator_state(self._resume_dir) if self._resume_dir else None
        trained, _ = self._batches_trained()
        self.generator = build_generator(
            self.env, self.client, self.server.served_model_name,
            PromptTruncation(self.train_dataset, self.env, self.processing_class, self.args.max_prompt_length),
            self.args, self.processing_class,
            trained=trained, state=state, total=self._total_batches(),
        )  # fmt: skip
        if self.stop_signals.requested:  # signalled while connecting: get() must not wait
            self.generator.interrupt()

    def _total_batches(self) -> int:
        """Trained batches in the whole run: the generator starts none past them."""
        return math.ceil(self.args.max_steps * self.args.gradient_accumulation_steps / self.micro_per_batch)

    def _batches_trained(self) -> tuple[int, bool]:
        """Trained batches completed by the optimizer steps so far, and whether the last step ended inside one."""
        args = self.args
        return batches_trained(self.state.global_step, args.gradient_accumulation_steps, self.micro_per_batch)

    def _after_optimizer_step(self) -> None:
        """on_step_end: sync weights, advance the policy version, refresh the reference, time the step."""
        wait_start = time.perf_counter()
        # Never push weights into a batch being generated: its rollouts would mix two policies,
        # and where the switch falls depends on timing, so a seeded run (or a resume) could not
        # reproduce it. With num_batches_ahead=1 it costs little: the next step waits for that batch anyway.
        in_flight = lambda: self.generator is None or self.generator.wait_idle()  # noqa: E731
        idle = wait_together(self.accelerator, in_flight, "waiting for the batch in flight")
        if self.generator is not None and not idle:
            warn_once(
                logger,
                "sync-during-generation",
                "weights pushed while a batch was still generating (after async_generation_timeout): "
                "that batch mixes two policy versions",
            )
        sync_start = time.perf_counter()
        self._wait_s += sync_start - wait_start  # waiting for generation, not training
        self.server.wake()  # server_sleep_during_step: the weights must be on the GPU to take the sync
        self._sync_weights()
        if self._batches_trained()[1]:  # the next step trains the same generation batch: sleep again
            self.server.sleep()
        if self.generator is not None:
            self.generator.mark_trained(self._batches_trained()[0])
        self.reference.after_step(self.state.global_step)
        now = time.perf_counter()
        train_s = (sync_start - self._last_step_end) - self._wait_s
        self.metrics.add(
            {
                "time/train_s": max(train_s, 0.0),
                "time/wait_generation_s": self._wait_s,
                "time/step_s": now - self._last_step_end,
            }
        )
        self._last_step_end, self._wait_s = now, 0.0

    def evaluate(
        self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval"
    ) -> dict[str, float]:
        """Roll out the env's eval split through the server and log its mean reward."""
        self._ensure_started()
        self.server.wake()  # server_sleep_during_step: evaluation generates
        metrics = wait_together(self.accelerator, lambda: self._eval_metrics(metric_key_prefix), "evaluating")
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        if not self.is_in_train:
            self.stop_generation()
        return metrics

    def _eval_metrics(self, prefix: str) -> dict[str, float]:
        """The eval split's rollout metrics (main process: the one that talks to the server)."""
        sampling = sampling_args_from_config(self.args)
        coro = self.env.a_evaluate(
            self.client, self.server.served_model_name, sampling, max_concurrent=self._eval_concurrency()
        )
        outputs = self.generator.run(coro)
        stats = M.rollout_metrics(outputs, None, list(outputs.reward))
        return {f"{prefix}_{k.replace('/', '_')}": v for k, v in stats.items()}

    def _eval_concurrency(self) -> int:
        """Eval rollouts in flight: ``per_device_eval_batch_size`` × processes, else ``max_concurrent``."""
        per_device = self.args.per_device_eval_batch_size
        return self.args.max_concurrent if per_device is None else per_device * self.accelerator.num_processes

    # ---- lifecycle, logging, checkpoints --------------------------------------------------------
    def train(self, resume_from_checkpoint: str | bool | None = None, trial=None, **kwargs):
        # True: the last *complete* checkpoint whose files still match its manifest (one a kill
        # interrupted while saving, or one truncated or changed since, is skipped). The main process
        # alone reads and moves the folders and the others take its choice: every process must
        # resume the same checkpoint, even where a half-synced file system shows them different files.
        requested = resume_from_checkpoint
        if requested:  # (no collective when there is nothing to resume)
            resume_from_checkpoint = wait_together(
                self.accelerator,
                lambda: ckpt.resolve_resume(self.args.output_dir, requested, is_main_process=True),
                "choosing the checkpoint to resume from",
            )
        self._resume_dir = resume_from_checkpoint or None
        self._prepared = None
        self.stop_signals.install()  # SIGINT / SIGTERM: save the step, raise TrainingStopped (shutdown.py)
        try:
            try:
                out = super().train(resume_from_checkpoint=self._resume_dir, trial=trial, **kwargs)
            except StopRequested:
                out = None
            if signum := max_over_processes(self.accelerator, self.stop_signals.signum, self.args.device):
                conclude(  # saves before the generator stops: its state goes in
                    self.accelerator, signum,
                    output_dir=self.args.output_dir, step=self.state.global_step, max_steps=self.state.max_steps,
                    save=lambda: self._save_checkpoint(self.model, trial=None),
                )  # fmt: skip
            self._plot(self.args.output_dir)
            return out
        finally:
            self.stop_signals.restore()
            self.stop_generation()
            self.server.leave_awake()  # server_sleep_during_step

    def stop_generation(self) -> None:
        if self.generator is not None:
            self.generator.stop()
            self.generator = None
        self._started = False

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if not any(k.startswith("eval_") for k in logs):
            step_metrics = self.metrics.pop()
            if self.accelerator.num_processes > 1:
                step_metrics = combine_metrics(self.accelerator, step_metrics, self.args.device)
            logs = {**logs, **step_metrics}
        super().log(logs, start_time)

    def _save_checkpoint(self, model, trial) -> None:
        # Our files, the completeness mark, rotation after it, disk failures: checkpoint_save.py.
        _, mid_batch = self._batches_trained()
        generator = self.generator
        save_checkpoint(
            CheckpointSave(
                accelerator=self.accelerator,
                device=self.args.device,
                run_dir=self._get_output_dir(trial),
                step=self.state.global_step,
                should_save=self.args.should_save,
                save_total_limit=self.args.save_total_limit,
                keep=lambda: self.state.best_model_checkpoint,
                trainer_files=lambda: self._trainer_files(trial),
                prepared=self._prepared if mid_batch else None,
                # Stopping on a signal: do not wait for the batch being generated (generator.py).
                generator_state=(lambda: generator.state_dict(wait=not self.stop_signals.requested))
                if generator is not None
                else None,
                plot=self._plot,
            )
        )

    def _trainer_files(self, trial) -> None:
        """``Trainer``'s own checkpoint files, without its rotation (ours runs after the completeness
        mark). transformers 4.x rotates through ``self._rotate_checkpoints``, 5.x through the module
        function ``rotate_checkpoints``; both read ``args.save_total_limit``, the one switch common to
        the supported range, so it is off for the length of this call only."""
        limit, self.args.save_total_limit = self.args.save_total_limit, None
        try:
            super()._save_checkpoint(self.model, trial)
        finally:
            self.args.save_total_limit = limit

    def _plot(self, *folders: str) -> None:
        """The curves into each folder: drawn once (a figure costs ~0.3 s and ~15,000 objects), copied."""
        if not self.accelerator.is_main_process:
            return
        first, *rest = (os.path.join(folder, M.CURVES_FILE) for folder in folders)
        if M.plot_curves(self.state.log_history, first) is not None:
            for path in rest:
                shutil.copyfile(first, path)

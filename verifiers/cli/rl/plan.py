"""``vf-rl @ cfg.toml [overrides]``: inference server and trainer from one TOML, side by side.

    vf-setup                                            # example configs in ./configs/vf-rl/
    vf-rl @ configs/vf-rl/reverse-text.toml --trainer.args.max_steps 5
    vf-rl @ configs/vf-rl/reverse-text.toml --dry-run   # print the commands, start nothing

In order: validate the whole config (schema, types, batch rule, every GRPOConfig
rule, ``[inference.args] flag = false`` against vLLM's parser, the checkpoint to
resume from), install each environment that is not importable (``vf-install``), start
``vf-vllm`` and wait until it serves the model, then start ``vf-train`` (under
``accelerate launch`` when ``trainer.gpus > 1``). Both logs go to
``outputs/<run_name>/logs/{inference,trainer}.log`` and to the terminal: a tmux
session with one pane each when tmux exists and stdout is a terminal, else
interleaved lines prefixed ``[inference]`` / ``[trainer]``. A server that dies
during training is restarted with the same command (``inference.max_restarts``
times, default 3, with a backoff); the trainer waits for it and re-syncs its
weights. The first Ctrl-C (also in a tmux pane) or SIGTERM lets the trainer finish
its step and save a checkpoint, then stops the server (exit 130/143); a second one
stops both process groups at once (SIGTERM, then SIGKILL). Training ending or
failing, or a server that cannot be restarted (the trainer saves a checkpoint
first), stops both too. The exit status is non-zero if training failed.

Tools: vf-vllm serves a model whose chat template ignores ``tools`` with verifiers'
tool template and the ``hermes`` tool-call parser by itself; when ``[inference.args]``
sets ``chat_template`` or ``no_tool_template``, the trainer gets ``$VF_CHAT_TEMPLATE``
so that it renders prompts with the server's template too.

GPUs: the first ``inference.gpus`` visible ones serve, the next ``trainer.gpus`` train; a config
asking for one each runs both on one GPU when only one is visible or ``[inference] shared_gpu =
true`` (shared_gpu.py: the memory plan, printed first, and the refusal when it cannot fit).

On CPU (``inference.gpus = 0``) without a KV-cache size in ``[inference.args]``,
the server gets ``--kv-cache-tokens`` = min(batch_size, max_concurrent) ×
max_seq_len, which vf-vllm turns into bytes for the model (see kv_cache.py).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verifiers.cli.common import run_cli
from verifiers.cli.install import find_environment_folder, install_environment
from verifiers.cli.rl.launcher import Launcher, Side
from verifiers.cli.rl.shared_gpu import (
    Layout,
    MemoryPlan,
    RunShape,
    choose_layout,
    gpu_memory,
    model_shape,
    plan_memory,
    seqs_in_flight,
    visible_ids,
)
from verifiers.cli.run_config.load import (
    CommandLine,
    RunConfig,
    inference_flags,
    load_config,
    parse_command_line,
)
from verifiers.envs.loader import check_env_args, check_env_version, module_name_for
from verifiers.errors import ConfigError, EnvironmentArgsError
from verifiers.utils.compute_dtype import ENV as COMPUTE_DTYPE_ENV
from verifiers.utils.compute_dtype import cpu_compute_dtype

# Seconds torchrun gives its workers to checkpoint after a signal (build_plan: the trainer's env).
ELASTIC_SHUTDOWN_TIMEOUT_S = 600

DESCRIPTION = "Start vf-vllm and vf-train from one TOML config; stop both when either ends."
FLAGS = {
    "--dry-run": "validate the config and print the commands; start nothing",
    "--no-tmux": "interleave both logs in this terminal even when tmux is available",
}
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the values vLLM's --max-lora-rank accepts
# [inference.args] keys that size the KV cache: with any of them vf-rl leaves the size to the user.
KV_SIZE_KEYS = {
    "kv_cache_memory_bytes",
    "gpu_memory_utilization",
    "device_memory_utilization",
    "kv_cache_tokens",
}


@dataclass
class Plan:
    """Everything vf-rl will run, computed before anything starts (``--dry-run`` prints it)."""

    config: RunConfig
    installs: list[tuple[str, Path]]
    server: Side
    trainer: Side
    timeout: float
    memory: MemoryPlan | None = None  # the shared-GPU layout's split of the one GPU

    def describe(self) -> str:
        c = self.config
        files = ", ".join(str(p) for p in c.sources) or str(c.source)
        lines = [f"config {files}: run '{c.run_name}', logs in {c.output_dir / 'logs'}/"]
        lines += [
            f"install {env_id}: {sys.executable} -m pip install -e {folder}"
            for env_id, folder in self.installs
        ]
        resume = c.trainer.resume_from_checkpoint
        if resume:
            where = f"the last complete checkpoint in {c.output_dir}" if resume is True else resume
            lines.append(f"resume: from {where}")
        if self.memory is not None:
            lines += self.memory.lines()
        lines.append(f"inference: {self.server.shown()}")
        lines.append(f"wait: {c.inference.url}/health, then /v1/models (up to {self.timeout:.0f} s)")
        lines.append(f"trainer: {self.trainer.shown()}")
        lines += supervise_lines(c)
        return "\n".join(lines)


def supervise_lines(c: RunConfig) -> list[str]:
    """What vf-rl watches for on each side and what it then does (launcher, server_watch, trainer_watch)."""
    from verifiers.cli.rl.trainer_watch import LIVE_BOUND_S, hang_bound

    inf, tr = c.inference, c.trainer
    hangs = [
        f"answers nothing for {inf.hang_timeout_s:g} s" if inf.hang_timeout_s else "",
        f"makes no engine progress for {inf.progress_timeout_s:g} s with requests waiting"
        if inf.progress_timeout_s
        else "",
    ]
    parts = ["dies", *filter(None, hangs)]
    server_when = (
        ", ".join(parts[:-1]) + (", or " if len(parts) > 2 else " or ") + parts[-1]
        if len(parts) > 1
        else "dies"
    )
    server = (
        f"supervise: restart the server up to {inf.max_restarts} time(s) if it {server_when} during training"
        if inf.max_restarts
        else f"supervise: stop the run if the server {server_when} during training (inference.max_restarts = 0)"
    )
    bound = hang_bound(c)
    stops = f"a rank stops beating for {LIVE_BOUND_S:g} s"
    trainer_when = (
        f"dies, {stops}, or makes no training progress for {bound:g} s" if bound else f"dies or {stops}"
    )
    trainer = (
        f"supervise: restart the trainer up to {tr.max_restarts} time(s) from its newest good checkpoint "
        f"if it {trainer_when}"
        if tr.max_restarts
        else f"supervise: stop the run if the trainer {trainer_when} (trainer.max_restarts = 0)"
    )
    return [server, trainer]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``vf-rl``; returns the exit status."""
    return run_cli(_run, argv)


def _run(argv: Sequence[str] | None) -> int:
    cli = parse_command_line(argv, "vf-rl", FLAGS, DESCRIPTION)
    config = load_config(cli.configs, cli.overrides)
    # Every GRPOConfig rule too, before anything starts.
    config.rl_config().to_grpo_config(world_size=config.trainer.num_processes)
    dry = "--dry-run" in cli.flags
    count = cuda_device_count()
    layout = layout_for(config, visible_ids(count), dry)
    memory = shared_memory_plan(config, layout, dry) if layout.kind == "shared" else None
    plan = build_plan(config, cli, layout=layout, memory=memory)
    for line in (None if dry else cpu_on_gpu_line(config, count), layout.line):
        if line:
            print(line, flush=True)
    if memory is not None and not dry:
        print("\n".join(memory.lines()), flush=True)
    check_envs(config)  # the installed ones; the others once installed
    if dry:
        print(plan.describe())
        return 0
    for env_id, folder in plan.installs:
        print(f"environment {env_id} is not installed: installing it from {folder}", flush=True)
        install_environment(folder)
    if plan.installs:
        check_envs(config)
    from verifiers.models import resolve_model_name

    # vLLM needs a folder or hub id: "smollm2" becomes its converted local folder (built once).
    plan.server.cmd[plan.server.cmd.index("--model") + 1] = resolve_model_name(config.model)
    tmux = (
        "--no-tmux" not in cli.flags
        and shutil.which("tmux")
        and sys.stdout.isatty()
        and not os.environ.get("TMUX")
    )
    return Launcher(plan, use_tmux=bool(tmux)).run()


# -- the plan ---------------------------------------------------------------------------------


def build_plan(
    config: RunConfig,
    cli: CommandLine,
    gpu_ids: list[str] | None = None,
    layout: Layout | None = None,
    memory: MemoryPlan | None = None,
) -> Plan:
    """The install steps and both commands.

    ``layout``: where each side runs (``choose_layout``); without one, each side gets GPUs of its
    own from ``gpu_ids`` (None: 0, 1, ...). ``memory``: the shared layout's plan, which sizes
    the server's share of the GPU when it was sized for one.
    """
    rl = config.rl_config()
    inf, tr = config.inference, config.trainer
    if layout is None:
        ids = gpu_ids if gpu_ids is not None else [str(i) for i in range(inf.gpus + tr.gpus)]
        layout = Layout("split" if ids else "cpu", ids)
    server_args = dict(inf.args)
    shared = layout.kind == "shared"
    if shared:
        server_args.update(shared_server_args(rl, server_args, memory))
    if rl.grpo_args.get("server_sleep_during_step"):
        if inf.gpus == 0:
            raise ConfigError(
                "trainer.args.server_sleep_during_step = true needs a CUDA server (vLLM-CPU has no sleep mode)",
                hint="drop it for a CPU server (inference.gpus = 0)",
            )
        server_args.setdefault("enable_sleep_mode", True)
    if rl.use_lora and inf.gpus > 0 and "enable_lora" not in server_args:
        # The trainer syncs only the adapter when the server serves LoRA. Not on a
        # CPU server: vLLM-CPU's LoRA kernels are slow, so the trainer sends merged
        # weights there (lora_sync="auto").
        server_args["enable_lora"] = True
        server_args.setdefault("max_lora_rank", min(r for r in VLLM_LORA_RANKS if r >= rl.lora_rank))
    if inf.gpus > 1 and not {"data_parallel_size", "tensor_parallel_size"} & server_args.keys():
        server_args["data_parallel_size"] = inf.gpus
    if inf.gpus == 0 and not (KV_SIZE_KEYS & server_args.keys() or os.environ.get("VLLM_CPU_KVCACHE_SPACE")):
        # vLLM-CPU would reserve 92% of a memory node and refuse to start beside anything
        # else: size the cache for the run instead (vf-vllm logs the bytes it makes of this).
        server_args["kv_cache_tokens"] = run_kv_tokens(rl, server_args.get("max_num_seqs"))
    server_cmd = [sys.executable, "-m", "verifiers.cli.vllm", "--model", config.model]
    server_cmd += ["--host", inf.host, "--port", str(inf.port), *inference_flags(server_args)]
    train_args = ["-m", "verifiers.cli.train", *cli.config_args(), *cli.override_args()]
    if tr.num_processes > 1:
        launch = [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--num_processes",
            str(tr.num_processes),
            # torch's elastic agent makes an empty /tmp/torchelastic_* folder at every launch and
            # never removes it (its per-rank log and error files, which this run does not use:
            # both logs go to output_dir/logs). accelerate ignores torchrun's PET_LOG_DIR.
            "--log_dir",
            os.devnull,
        ]
        launch += ["--config_file", tr.accelerate_config] if tr.accelerate_config else ["--multi_gpu"]
        trainer_cmd = launch + train_args
    else:
        trainer_cmd = [sys.executable, *train_args]
    logs = config.output_dir / "logs"
    base = {"PYTHONUNBUFFERED": "1"}
    if layout.kind == "cpu" and not os.environ.get(COMPUTE_DTYPE_ENV):
        # Measured once here (RLConfig's check above already did): the server's dtype and the
        # trainer's bf16 AUTO then follow one choice, even on a CPU where the ratio is borderline.
        base[COMPUTE_DTYPE_ENV] = cpu_compute_dtype().dtype
    trainer_env = {**base, **trainer_template_env(server_args)}
    if tr.num_processes > 1 and "TORCH_ELASTIC_SHUTDOWN_TIMEOUT" not in os.environ:
        # torchrun SIGKILLs its workers this many seconds after passing on a Ctrl-C/SIGTERM (30 by
        # default): they must have time to finish the step and save the checkpoint (shutdown.py).
        trainer_env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = str(ELASTIC_SHUTDOWN_TIMEOUT_S)
    if shared:  # one GPU: the same device on both sides
        server_gpus = trainer_gpus = layout.gpu_ids[0]
    else:
        ids = layout.gpu_ids or [str(i) for i in range(inf.gpus + tr.gpus)]
        server_gpus = ",".join(ids[: inf.gpus])
        trainer_gpus = ",".join(ids[inf.gpus : inf.gpus + tr.gpus])
    installs = []
    for env in config.envs:
        if importlib.util.find_spec(module_name_for(env.id)) is None:
            installs.append((env.id, find_environment_folder(env.id)))
    return Plan(
        config=config,
        installs=installs,
        server=Side(
            "inference",
            server_cmd,
            {**base, "CUDA_VISIBLE_DEVICES": server_gpus},
            logs / "inference.log",
        ),
        trainer=Side(
            "trainer",
            trainer_cmd,
            {**trainer_env, "CUDA_VISIBLE_DEVICES": trainer_gpus},
            logs / "trainer.log",
        ),
        timeout=rl.vllm_server_timeout,
        memory=memory,
    )


def trainer_template_env(server_args: dict[str, Any]) -> dict[str, str]:
    """``$VF_CHAT_TEMPLATE`` for the trainer when the server renders with another template than
    vf-vllm's default (the model's own, or verifiers' tool template where the model's ignores tools).

    The trainer counts prompt tokens (and retokenizes rollouts without token data) with
    the server's template; see verifiers/tokenization/chat_template.py.
    """
    from verifiers.tokenization.chat_template import ENV_VAR, MODEL_OWN

    template = server_args.get("chat_template")
    if isinstance(template, str) and template:
        return {ENV_VAR: template}
    if server_args.get("no_tool_template") is True:
        return {ENV_VAR: MODEL_OWN}
    return {}


def run_kv_tokens(rl: Any, max_num_seqs: Any = None) -> int:
    """KV-cache tokens a run needs: the sequences in flight at once × ``max_seq_len``.

    One batch of rollouts is generated at a time, at most ``max_concurrent`` (and
    the server's ``max_num_seqs``) requests at once; a smaller cache than that
    would only queue requests.
    """
    seqs = seqs_in_flight(rl)
    if isinstance(max_num_seqs, int) and max_num_seqs > 0:
        seqs = min(seqs, max_num_seqs)
    return seqs * rl.max_seq_len


def layout_for(config: RunConfig, visible: list[str], dry: bool) -> Layout:
    """``choose_layout`` for the config; a dry run shows the plan even where the GPUs are missing."""
    inf, tr = config.inference, config.trainer
    try:
        return choose_layout(inf.gpus, tr.gpus, inf.shared_gpu, visible)
    except ConfigError:
        if not dry:
            raise
    if inf.shared_gpu and inf.gpus == 1 and tr.gpus == 1:
        return Layout("shared", ["0"])
    return Layout("split", [str(i) for i in range(inf.gpus + tr.gpus)])


def shared_memory_plan(config: RunConfig, layout: Layout, dry: bool) -> MemoryPlan | None:
    """The shared layout's memory plan, sized for the GPU when it can be asked; ``ConfigError`` when
    the worst case does not fit and the user left the server's share to vf-rl. A dry run on a
    machine that cannot read the model's config says so and shows the commands without it (None)."""
    rl = config.rl_config()
    user_sized = bool(KV_SIZE_KEYS & config.inference.args.keys())
    try:
        shape = model_shape(config.model)
    except Exception as e:  # noqa: BLE001 - any failure to read the config: one line, with the way out
        if dry:
            print(f"memory plan: not here ({config.model}'s config cannot be read: {str(e)[:120]}); "
                  "vf-rl sizes it at start", flush=True)  # fmt: skip
            return None
        if user_sized:
            raise ConfigError(f"cannot read {config.model}'s config to plan the shared GPU: {e}") from None
        raise ConfigError(
            f"cannot read {config.model}'s config to size the server's share of the one GPU: {e}",
            hint="make the model readable (a folder, or a hub id with network), or set "
            "[inference.args] gpu_memory_utilization yourself",
        ) from None
    memory = plan_memory(shape, RunShape.of(rl, config.inference.args))
    found = gpu_memory(layout.gpu_ids[0])
    if found is None:
        if dry:
            return memory
        raise ConfigError(
            f"cannot read the free memory of GPU {layout.gpu_ids[0]} (nvidia-smi) to size the shared layout",
            hint="set [inference.args] gpu_memory_utilization yourself",
        )
    memory = memory.sized(*found)
    if not memory.fits:
        if not user_sized:
            raise memory.refusal()
        print(
            f"vf-rl: warning: {memory.refusal().message}; kept: [inference.args] sets the server's share",
            flush=True,
        )
    return memory


def shared_server_args(rl: Any, server_args: dict[str, Any], memory: MemoryPlan | None) -> dict[str, Any]:
    """vf-vllm flags of the shared layout: CUDA IPC, the server's share and KV cache, its batch."""
    extra: dict[str, Any] = {}
    if "weight_transfer" not in server_args:
        extra["weight_transfer"] = "ipc"  # vf-vllm's auto would pick it too on a one-GPU machine
    if "max_num_seqs" not in server_args:
        # No more sequences run at once than the trainer sends; vLLM's default (up to 1024 on
        # a large GPU) sizes the sampler's memory for that many rows of logits.
        extra["max_num_seqs"] = seqs_in_flight(rl)
    if memory is not None and memory.fits and not KV_SIZE_KEYS & server_args.keys():
        extra["gpu_memory_utilization"] = memory.utilization
        extra["kv_cache_memory_bytes"] = memory.kv_bytes
    return extra


def cuda_device_count() -> int:
    """CUDA devices torch sees (``CUDA_VISIBLE_DEVICES`` applied); 0 where there is no NVIDIA driver.

    Without a driver (no ``/proc/driver/nvidia``, no ``nvidia-smi``) torch is not even imported.
    """
    if not (os.path.exists("/proc/driver/nvidia/version") or shutil.which("nvidia-smi")):
        return 0
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def cpu_on_gpu_line(config: RunConfig, count: int) -> str | None:
    """The line a CPU config prints on a machine with GPUs (it still runs on CPU); None otherwise."""
    if config.inference.gpus or config.trainer.gpus or not count:
        return None
    return (
        f"vf-rl: this config trains on CPU (inference.gpus = 0, trainer.gpus = 0) although {count} CUDA "
        "device(s) are visible; set gpus under [inference] and [trainer] to use them "
        "(e.g. configs/vf-rl/reverse-text.toml)"
    )


def check_envs(config: RunConfig) -> None:
    """Check each environment's args against its ``load_environment`` before starting anything."""
    importlib.invalidate_caches()
    for env in config.envs:
        try:
            module = importlib.import_module(module_name_for(env.id))
        except ImportError:  # just installed, or broken: the trainer reports it with its own message
            continue
        check_env_version(env.id)  # owner/name@version: the installed package must be that version
        loader = getattr(module, "load_environment", None)
        if callable(loader):
            try:
                check_env_args(env.id, loader, env.args)
            except EnvironmentArgsError as err:  # same problem, the fix in this tool's terms
                raise EnvironmentArgsError(
                    err.message, hint="fix the env's args table in the config"
                ) from None


if __name__ == "__main__":
    sys.exit(main())

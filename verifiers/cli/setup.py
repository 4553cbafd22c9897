"""``vf-setup``: write the training workspace the guides describe, from the package (no downloads).

    vf-setup                           # the workspace (below), in the current folder
    vf-setup --dir my-configs --force  # only the vf-rl configs, elsewhere, overwriting files that differ
    vf-setup --prime-rl                # ./configs/prime-rl/wiki-search.toml for prime-rl
    vf-setup --prime-rl reverse-text   # the same for another bundled environment

The workspace::

    configs/
        endpoints.py       # model endpoints for vf-eval (-m ALIAS)
        vf-rl/<env>.toml   # an example training config per bundled environment
    environments/
        AGENTS.md          # how environments are laid out here (for people and coding agents)

Existing files are kept unless ``--force``. ``--vf-rl`` is accepted (the workspace is
what it sets up). ``--prime-rl [ENV]`` translates the bundled vf-rl example of ENV
(default wiki-search) into a prime-rl TOML with the sections of the guide's
prime-rl config: GPU ids, model, LoRA, batch and truncation settings, sampling,
the difficulty buffer, the environment, and the inference server's tool-call flags.
prime-rl itself is not installed (that needs a download: see the printed line); it
runs trainer, orchestrator and inference as separate processes on GPUs and suits
multi-GPU, long or multi-node runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from verifiers.cli.common import CLIParser, run_parsed
from verifiers.errors import ConfigError

# prime-rl loads models from the hub; our local alias stands for this hub id.
HUB_IDS = {
    "smollm2": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "smollm2-135m-instruct": "HuggingFaceTB/SmolLM2-135M-Instruct",
}
DEFAULT_PRIME_RL_ENV = "wiki-search"  # the guides' prime-rl example
PRIME_RL_REPO = "https://github.com/PrimeIntellect-ai/prime-rl"
# The guide's prime-rl buffer: online difficulty filtering, sampling twice the prompts it keeps.
PRIME_RL_BUFFER = {"type": "online-difficulty", "oversampling_factor": 2.0}
# vf-vllm / vLLM flags that prime-rl's [inference.model] takes under the same names.
PRIME_RL_INFERENCE_KEYS = ("enable_auto_tool_choice", "tool_call_parser", "max_model_len", "enforce_eager")


def build_parser() -> CLIParser:
    p = CLIParser(
        prog="vf-setup",
        description="Write the training workspace (configs/endpoints.py, configs/vf-rl/*.toml, "
        "environments/AGENTS.md), or a prime-rl config, from the package.",
    )
    p.add_argument("--dir", help="write only the vf-rl configs, into this folder (or the prime-rl one there)")
    p.add_argument("--force", action="store_true", help="overwrite existing files that differ")
    p.add_argument("--vf-rl", action="store_true", help="set up for vf-rl (the default: the workspace)")
    p.add_argument(
        "--prime-rl",
        metavar="ENV",
        nargs="?",
        const=DEFAULT_PRIME_RL_ENV,
        help=f"write a prime-rl TOML for this bundled environment (default {DEFAULT_PRIME_RL_ENV})",
    )
    p.add_argument("--model", help="with --prime-rl: the model (default: the example's, as a hub id)")
    p.add_argument("--list", action="store_true", help="list the bundled example configs and exit")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``vf-setup``; returns the exit status."""
    return run_parsed(build_parser, _run, argv)


def _run(args: argparse.Namespace) -> int:
    examples = example_configs()
    if args.list:
        print("\n".join(examples))
        return 0
    if args.prime_rl:
        env = args.prime_rl
        if env not in examples:
            raise ConfigError(
                f"no bundled example for environment '{env}'", hint=f"use one of: {', '.join(examples)}"
            )
        text = prime_rl_toml(examples[env], model=args.model)
        path = Path(args.dir or "configs/prime-rl") / f"{env}.toml"
        write(path, text, args.force)
        print(
            f"prime-rl itself is not installed by vf-setup (it needs a download): git clone {PRIME_RL_REPO}, "
            f"follow its README, then run: uv run rl @ {path.resolve()}"
        )
        return 0
    if args.dir:  # only the configs, where asked
        out = Path(args.dir)
        for name, text in examples.items():
            write(out / f"{name}.toml", text, args.force)
    else:
        out = write_workspace(Path("."), args.force)
    print(closing_line(out))
    return 0


def closing_line(out: Path, gpus: int | None = None) -> str:
    """What to run first, for this machine: the reverse-text recipe its visible CUDA devices fit."""
    if gpus is None:
        from verifiers.cli.rl.plan import cuda_device_count

        gpus = cuda_device_count()
    if gpus == 0:
        name, why = "reverse-text-cpu.toml", "no CUDA device is visible: the CPU recipe"
    elif gpus == 1:
        name, why = "reverse-text-1gpu.toml", "one CUDA device: the server and the trainer share it"
    else:
        name, why = "reverse-text.toml", f"{gpus} CUDA devices: one for the server, one for the trainer"
    return f"run one with: vf-rl @ {out / name}  ({why})"


def workspace_files() -> dict[str, str]:
    """``{relative path: text}`` of the workspace ``vf-setup`` writes (see the module docstring)."""
    templates = resources.files("verifiers") / "cli" / "templates"
    files = {
        "configs/endpoints.py": (templates / "endpoints.py.tmpl").read_text(encoding="utf-8"),
        "environments/AGENTS.md": (templates / "AGENTS.md.tmpl").read_text(encoding="utf-8"),
    }
    files.update({f"configs/vf-rl/{name}.toml": text for name, text in example_configs().items()})
    return files


def write_workspace(root: Path, force: bool) -> Path:
    """Write :func:`workspace_files` under ``root``; returns the vf-rl config folder."""
    for relative, text in workspace_files().items():
        write(root / relative, text, force)
    return root / "configs" / "vf-rl"


def example_configs() -> dict[str, str]:
    """``{env name: TOML text}`` of the bundled vf-rl examples, by name."""
    # package data, the one copy: configs/vf-rl in a clone is a link to this folder
    folder = resources.files("verifiers") / "configs" / "vf-rl"
    found = {
        entry.name.removesuffix(".toml"): entry.read_text(encoding="utf-8")
        for entry in folder.iterdir()
        if entry.name.endswith(".toml")
    }
    if not found:
        raise ConfigError(
            "this verifiers installation has no bundled example configs", hint="reinstall verifiers"
        )
    return dict(sorted(found.items()))


def write(path: Path, text: str, force: bool) -> bool:
    """Write ``text`` to ``path`` unless a different file is there (then only with ``force``)."""
    if path.exists() and not force:
        same = path.read_text(encoding="utf-8") == text
        print(
            f"{'unchanged' if same else 'kept'} {path}" + ("" if same else " (exists; --force overwrites it)")
        )
        return False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise ConfigError(
            f"cannot write {path}: {e.strerror or e}",
            hint="point --dir at a writable folder (not a file)",
        ) from e
    print(f"wrote {path}")
    return True


# -- prime-rl ---------------------------------------------------------------------------------


def prime_rl_toml(example: str, model: str | None = None) -> str:
    """A prime-rl config (``uv run rl @ file.toml``) with the settings of a vf-rl example config.

    Layout (prime-rl's combined ``rl`` entry point, as in the guide): top-level
    ``inference_gpu_ids`` / ``trainer_gpu_ids`` and ``max_steps``; ``[model] name``;
    ``[wandb]``; ``[trainer.optim]``; ``[trainer.model.experimental.lora]``;
    ``[orchestrator]`` batch_size, rollouts_per_example, seq_len and the truncation
    settings; ``[orchestrator.sampling]``; ``[orchestrator.buffer]``;
    ``[[orchestrator.env]]``; ``[inference.model]`` with the tool-call flags of the
    example's ``[inference.args]``. prime-rl renames keys between releases: check them
    against the version you install.
    """
    from verifiers.cli.run_config.load import parse_config, tomllib

    config = parse_config(tomllib.loads(example))
    rl = config.rl_config()
    from verifiers.training.config.fields import preset_default

    def grpo(name: str) -> Any:  # a GRPOConfig field the vf-rl config passes through, else vf-rl's default
        return rl.grpo_args.get(name, preset_default("rl", name))

    name = model or HUB_IDS.get(config.model.lower(), config.model)
    envs = ", ".join(e.id for e in config.envs)
    # prime-rl runs on GPUs only: at least one for inference and one for training, inference first.
    n_inf, n_train = max(config.inference.gpus, 1), max(config.trainer.gpus, 1)
    lines = [
        f"# prime-rl config for {envs}, written by vf-setup --prime-rl from the vf-rl example.",
        "# Run it from a prime-rl checkout (GPUs required):  uv run rl @ path/to/this.toml",
        "#",
        "# Move to prime-rl when one machine's vf-rl run is not enough: many GPUs or nodes, long",
        "# runs that need fully asynchronous, resumable training, or models too large for one",
        "# trainer process. It loads the same environment packages (install them there too).",
        "# Key names follow prime-rl's combined `rl` config; they change between prime-rl",
        "# releases, so check them against the version you install.",
        "",
        f"inference_gpu_ids = {_value(list(range(n_inf)))}",
        f"trainer_gpu_ids = {_value(list(range(n_inf, n_inf + n_train)))}",
        "",
        f"max_steps = {_value(rl.max_steps)}",
        "",
        "[model]",
        f"name = {_value(name)}",
        "",
        "[ckpt]  # checkpoint at the end of training",
    ]
    if rl.wandb_project or rl.wandb_name:
        lines += ["", "[wandb]"]
        lines += [
            f"{k} = {_value(v)}" for k, v in (("project", rl.wandb_project), ("name", rl.wandb_name)) if v
        ]
    lines += [
        "",
        "[trainer.optim]",
        f"lr = {_value(rl.learning_rate)}",
        f"weight_decay = {_value(rl.weight_decay)}",
        f"max_norm = {_value(rl.max_grad_norm)}",
    ]
    if rl.use_lora:
        lines += [
            "",
            "[trainer.model.experimental.lora]",
            f"rank = {_value(rl.lora_rank)}",
            f"alpha = {_value(rl.lora_alpha)}",
            f"dropout = {_value(rl.lora_dropout)}",
            f"target_modules = {_value(rl.target_modules)}",
        ]
    lines += [
        "",
        "[orchestrator]",
        f"batch_size = {_value(rl.batch_size)}  # rollouts per step",
        f"rollouts_per_example = {_value(rl.rollouts_per_example)}",
        f"seq_len = {_value(rl.max_seq_len)}",
    ]
    if rl.use_lora:
        lines.append(f"lora_name = {_value(f'{rl.run_name}-r{rl.lora_rank}')}")
    lines += [
        f"mask_truncated_completions = {_value(grpo('mask_truncated_completions'))}",
        f"zero_truncated_completions = {_value(grpo('zero_truncated_completions'))}",
    ]
    sampling = {"max_tokens": rl.max_tokens, "temperature": rl.temperature, "stop": rl.stop}
    lines += ["", "[orchestrator.sampling]"]
    lines += [f"{k} = {_value(v)}" for k, v in sampling.items() if v is not None]
    lines += ["", "[orchestrator.buffer]"] + [f"{k} = {_value(v)}" for k, v in PRIME_RL_BUFFER.items()]
    for env in config.envs:
        lines += ["", "[[orchestrator.env]]", f"id = {_value(env.id)}", f"name = {_value(env.name)}"]
        if env.args:
            lines.append(f"args = {_value(env.args)}")
    if len(config.envs) > 1 and all(e.weight is not None for e in config.envs):
        lines.append("# the vf-rl config weighted these environments; set prime-rl's mixing to match")
    if rl.use_lora:
        lines += ["", "[inference]", "enable_lora = true", f"max_lora_rank = {_value(rl.lora_rank)}"]
    inference = {k: v for k, v in config.inference.args.items() if k in PRIME_RL_INFERENCE_KEYS}
    lines += ["", "[inference.model]"] + [f"{k} = {_value(v)}" for k, v in inference.items()]
    return "\n".join(lines) + "\n"


def _value(value: Any) -> str:
    """A TOML literal for a scalar, list or (inline) table."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }"
    raise ConfigError(f"cannot write {value!r} ({type(value).__name__}) as TOML")


def _key(key: str) -> str:
    bare = key.replace("_", "").replace("-", "").isalnum() and key.isascii()
    return key if bare else json.dumps(key)


if __name__ == "__main__":
    sys.exit(main())

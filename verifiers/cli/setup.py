"""``vf-setup``: write the example training configs that ship with verifiers (no downloads).

    vf-setup                           # ./configs/vf-rl/<env>.toml for every bundled environment
    vf-setup --dir my-configs --force  # elsewhere, overwriting files that differ
    vf-setup --prime-rl reverse-text   # ./configs/prime-rl/reverse-text.toml for prime-rl

Existing files are kept unless ``--force``. ``--prime-rl ENV`` translates the
bundled vf-rl example of ENV (model, environment, batch, sampling and LoRA
settings) into a prime-rl TOML: the road from this trainer to prime-rl, which
splits trainer, orchestrator and inference into separate processes (GPUs
required) and suits multi-GPU, long or multi-node runs.
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


def build_parser() -> CLIParser:
    p = CLIParser(
        prog="vf-setup", description="Write example vf-rl configs (or a prime-rl config) from the package."
    )
    p.add_argument("--dir", help="output folder (default configs/vf-rl, or configs/prime-rl with --prime-rl)")
    p.add_argument("--force", action="store_true", help="overwrite existing files that differ")
    p.add_argument("--prime-rl", metavar="ENV", help="write a prime-rl TOML for this bundled environment")
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
        write(Path(args.dir or "configs/prime-rl") / f"{env}.toml", text, args.force)
        return 0
    out = Path(args.dir or "configs/vf-rl")
    for name, text in examples.items():
        write(out / f"{name}.toml", text, args.force)
    print(f"run one with: vf-rl @ {out / 'reverse-text.toml'}")
    return 0


def example_configs() -> dict[str, str]:
    """``{env name: TOML text}`` of the bundled vf-rl examples, by name."""
    folder = resources.files("verifiers") / "configs" / "vf-rl"  # package data
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

    Layout (prime-rl's combined ``rl`` entry point): top-level ``max_steps``;
    ``[model] name``; ``[orchestrator]`` batch_size, rollouts_per_example, seq_len,
    lora_name; ``[orchestrator.sampling]``; ``[[orchestrator.env]]`` id/name/args;
    ``[trainer.model.lora]`` rank/alpha/dropout/target_modules; ``[trainer.optim]``;
    ``[inference]``; ``[wandb]``; ``[ckpt]``. prime-rl renames keys between
    releases: check it against the version you install.
    """
    from verifiers.cli.toml_config import parse_config, tomllib

    config = parse_config(tomllib.loads(example))
    rl = config.rl_config()
    name = model or HUB_IDS.get(config.model.lower(), config.model)
    envs = ", ".join(e.id for e in config.envs)
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
        f"max_steps = {_value(rl.max_steps)}",
        "",
        "[model]",
        f"name = {_value(name)}",
        "",
        "[ckpt]  # checkpoint at the end of training",
        "",
        "[orchestrator]",
        f"batch_size = {_value(rl.batch_size)}  # rollouts per step",
        f"rollouts_per_example = {_value(rl.rollouts_per_example)}",
        f"seq_len = {_value(rl.max_seq_len)}",
    ]
    if rl.use_lora:
        lines.append(f"lora_name = {_value(f'{rl.run_name}-r{rl.lora_rank}')}")
    sampling = {"max_tokens": rl.max_tokens, "temperature": rl.temperature}
    lines += ["", "[orchestrator.sampling]"]
    lines += [f"{k} = {_value(v)}" for k, v in sampling.items() if v is not None]
    for env in config.envs:
        lines += ["", "[[orchestrator.env]]", f"id = {_value(env.id)}", f"name = {_value(env.name)}"]
        if env.args:
            lines.append(f"args = {_value(env.args)}")
    if len(config.envs) > 1 and all(e.weight is not None for e in config.envs):
        lines.append("# the vf-rl config weighted these environments; set prime-rl's mixing to match")
    if rl.use_lora:
        lines += [
            "",
            "[trainer.model.lora]",
            f"rank = {_value(rl.lora_rank)}",
            f"alpha = {_value(rl.lora_alpha)}",
            f"dropout = {_value(rl.lora_dropout)}",
            f"target_modules = {_value(rl.target_modules)}",
        ]
    lines += [
        "",
        "[trainer.optim]",
        f"lr = {_value(rl.learning_rate)}",
        f"max_norm = {_value(rl.max_grad_norm)}",
    ]
    lines += ["", "[inference]"]
    if rl.use_lora:
        lines += ["enable_lora = true", f"max_lora_rank = {_value(rl.lora_rank)}"]
    if rl.wandb_project or rl.wandb_name:
        lines += ["", "[wandb]"]
        lines += [
            f"{k} = {_value(v)}" for k, v in (("project", rl.wandb_project), ("name", rl.wandb_name)) if v
        ]
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

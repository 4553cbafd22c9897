"""The ``vf-rl`` / ``vf-train`` command line: config files, overrides, environment variables, ``--help``.

    vf-rl @ base.toml @ cpu.toml --trainer.args.max_steps 5 --no-trainer.args.use_lora

- ``@ FILE`` may be given several times: the files are merged in order, table by
  table and key by key, the later file winning (a list, such as ``[[env]]`` tables,
  is replaced whole).
- ``--dotted.key VALUE`` or ``--dotted.key=VALUE`` sets one key; values are TOML
  literals (``5``, ``true``, ``1e-5``, ``["q_proj"]``), anything else is a string;
  ``--env.1.weight 2`` indexes ``[[env]]``. A bare ``--key`` is ``true``, and
  ``--no-KEY`` is ``false`` (``--no-trainer.args.use_lora``).
- Environment variables ``VF_RL__<KEY>`` set keys too, ``__`` between the parts of the
  dotted key, any case: ``VF_RL__TRAINER__ARGS__LEARNING_RATE=1e-4``.
- Precedence, lowest first: defaults < the files in order < environment variables <
  the command line.
- ``-h`` / ``--help`` lists every key with its default and help, from the dataclasses.

A key that is not in the schema (toml_schema.py) is a ``ConfigError`` naming the nearest
valid key; so is a value of the wrong type.
"""

from __future__ import annotations

import copy
import json
import os
import re
import sys
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verifiers.cli.run_config.schema import (  # noqa: F401 (re-exported: the 0.2 names of this module)
    DEFAULT_HOST,
    DEFAULT_PORT,
    ENV_KEYS,
    INFERENCE_KEYS,
    TOP_KEYS,
    TRAINER_KEYS,
    WANDB_KEYS,
    EnvConfig,
    InferenceConfig,
    RunConfig,
    TrainerConfig,
    parse_config,
    schema_keys,
)
from verifiers.errors import ConfigError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ENV_PREFIX = "VF_RL__"
_FIRST_SENTENCE = re.compile(r"(?<!e\.g)(?<!i\.e)\.\s")  # "e.g. " does not end a sentence


# -- reading ----------------------------------------------------------------------------------


def read_toml(path: str | os.PathLike) -> dict[str, Any]:
    """Parse a TOML file; a missing file or a syntax error is a one-line ``ConfigError``."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            f"config file {path} not found", hint="pass an existing file: vf-rl @ path/to/config.toml"
        )
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path} is not valid TOML: {err}") from None


def load_config(
    paths: str | os.PathLike | Sequence[str | os.PathLike],
    overrides: Sequence[tuple[str, str]] = (),
    environ: Mapping[str, str] | None = None,
) -> RunConfig:
    """Read the config file(s), merge them in order, apply the environment's ``VF_RL__`` variables
    (``environ``, default ``os.environ``), then ``overrides`` (``(dotted key, value text)``); validate.

    Precedence, lowest first: the dataclass defaults, the files in order, environment
    variables, the command line.
    """
    files = [Path(paths)] if isinstance(paths, (str, os.PathLike)) else [Path(p) for p in paths]
    raw: dict[str, Any] = {}
    for path in files:
        merge_tables(raw, read_toml(path))
    apply_overrides(raw, env_overrides(os.environ if environ is None else environ), source="environment")
    apply_overrides(raw, overrides)
    return parse_config(raw, sources=files)


def merge_tables(into: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """Merge ``other`` into ``into`` key by key (tables recursively); any other value of ``other``
    (a list of ``[[env]]`` tables included) replaces the one in ``into``."""
    for key, value in other.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge_tables(into[key], value)
        else:
            into[key] = copy.deepcopy(value)
    return into


def env_overrides(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """``VF_RL__TRAINER__ARGS__LEARNING_RATE=1e-4`` -> ``("trainer.args.learning_rate", "1e-4")``.

    After the prefix, ``__`` separates the keys of the dotted path and the names are
    lower-cased; the values are read like command-line values (TOML literals, else strings).
    Sorted by name, so the order does not depend on the environment's.
    """
    return [
        (name[len(ENV_PREFIX) :].lower().replace("__", "."), text)
        for name, text in sorted(environ.items())
        if name.startswith(ENV_PREFIX) and len(name) > len(ENV_PREFIX)
    ]


def parse_value(text: str) -> Any:
    """A TOML literal (``5``, ``true``, ``1e-5``, ``"x"``, ``[1, 2]``), else the text as a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_overrides(
    raw: dict[str, Any], overrides: Sequence[tuple[str, str]], source: str = "command line"
) -> None:
    """Set each dotted key in ``raw`` (tables are created; digits index ``[[env]]``)."""
    for key, text in overrides:
        parts = key.split(".")
        if not all(parts):
            if source == "environment":
                variable = ENV_PREFIX + key.upper().replace(".", "__")
                raise ConfigError(
                    f"environment variable {variable} does not name a dotted key",
                    hint=f"e.g. {ENV_PREFIX}TRAINER__ARGS__MAX_STEPS=5",
                )
            raise ConfigError(f"override --{key} is not a dotted key", hint="e.g. --trainer.args.max_steps 5")
        node: Any = raw
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    where = ".".join(parts[:i])
                    raise ConfigError(
                        f"override --{key}: '{where}' is a list of {len(node)} tables",
                        hint=f"index it, e.g. --{where}.0.{'.'.join(parts[i + 1 :]) or 'id'}",
                    )
                if last:
                    node[int(part)] = parse_value(text)
                else:
                    node = node[int(part)]
                continue
            if isinstance(node, dict) and part == "0" and i > 0 and not last:
                continue  # --env.0.id on a single [env] table
            if not isinstance(node, dict):
                raise ConfigError(f"override --{key}: '{'.'.join(parts[:i])}' is not a table")
            if last:
                node[part] = parse_value(text)
            else:
                node = node.setdefault(part, {})


# -- vf-vllm flags ----------------------------------------------------------------------------


def inference_flags(args: dict[str, Any]) -> list[str]:
    """``[inference.args]`` as ``vf-vllm`` flags.

    ``key = true`` -> ``--key`` (``no_key = true`` -> ``--no-key``); ``key = false`` ->
    ``--no-key`` for vLLM's on/off pairs, nothing for a switch that is off by default,
    and a ``ConfigError`` for a flag with no "off" form (checked against vLLM's own
    parser, so false is never silently dropped); lists repeat the flag; tables become
    JSON (vLLM reads JSON for its config flags); anything else -> ``--key value``.
    """
    flags: list[str] = []
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            flags.append(flag)
        elif value is False:
            flags += _false_flags(key)
        elif isinstance(value, list):
            for item in value:
                flags += [flag, _flag_value(item)]
        else:
            flags += [flag, _flag_value(value)]
    return flags


def _false_flags(key: str) -> list[str]:
    try:
        from verifiers.inference.server.main import false_flags

        return false_flags(key)
    except ImportError:  # no vLLM here (a dry run elsewhere): vLLM's own --no-X spelling, unchecked
        return ["--no-" + key.replace("_", "-")]


def _flag_value(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


# -- command line -----------------------------------------------------------------------------


@dataclass
class CommandLine:
    """``vf-rl``/``vf-train`` arguments: the config path(s), overrides, and boolean flags."""

    config: str  # the first config file
    overrides: list[tuple[str, str]]
    flags: set[str]
    configs: list[str] = field(default_factory=list)  # every config file, in merge order

    def __post_init__(self) -> None:
        if not self.configs:
            self.configs = [self.config]

    def config_args(self) -> list[str]:
        """The config files as arguments again (``@ a.toml @ b.toml``), to hand to a child command."""
        return [a for path in self.configs for a in ("@", path)]

    def override_args(self) -> list[str]:
        """The overrides as arguments again, to hand to a child command."""
        return [a for key, text in self.overrides for a in (f"--{key}", text)]


def parse_command_line(
    argv: Sequence[str] | None, prog: str, flags: dict[str, str], description: str
) -> CommandLine:
    """Parse ``@ cfg.toml [@ more.toml ...] [--flag] [--dotted.key value | --dotted.key=value | --no-key ...]``.

    ``flags`` maps our own boolean flags (``--dry-run``) to their help; ``-h`` prints
    help and exits 0. Bad input raises ``ConfigError`` (one line, exit 2 via run_cli).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    configs: list[str] = []
    overrides: list[tuple[str, str]] = []
    seen: set[str] = set()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-h", "--help"):
            print(_help(prog, flags, description))
            raise SystemExit(0)
        if arg.startswith("@"):
            path = arg[1:] or (argv[i + 1] if i + 1 < len(argv) else "")
            if not path:
                raise ConfigError(
                    "'@' must be followed by a config file",
                    hint=f"e.g. {prog} @ configs/vf-rl/reverse-text.toml",
                )
            if path in configs:  # a slip, not a merge: merging a file with itself changes nothing
                raise ConfigError(
                    f"two config files given are the same file ({path})",
                    hint="pass one @ file for it; several different @ files are merged in order",
                )
            configs.append(path)
            i += 1 if arg[1:] else 2
            continue
        if arg in flags:
            seen.add(arg)
            i += 1
            continue
        if not arg.startswith("--") or len(arg) == 2:
            raise ConfigError(
                f"unexpected argument {arg!r}", hint=f"usage: {prog} @ config.toml [--section.key value ...]"
            )
        key, eq, text = arg[2:].partition("=")
        if key.startswith("no-") and "." in key and not eq:
            overrides.append((key[len("no-") :], "false"))  # --no-trainer.args.use_lora
            i += 1
            continue
        if not eq:
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if nxt is None or nxt.startswith("--") or nxt.startswith("@"):
                text = "true"  # a bare --key: a boolean switch
            else:
                text, i = nxt, i + 1
        overrides.append((key, text))
        i += 1
    if not configs:
        raise ConfigError(
            "no config file given", hint=f"usage: {prog} @ path/to/config.toml (vf-setup writes examples)"
        )
    return CommandLine(config=configs[0], overrides=overrides, flags=seen, configs=configs)


def _help(prog: str, flags: dict[str, str], description: str) -> str:
    lines = [
        f"usage: {prog} @ CONFIG.toml [@ MORE.toml ...] [options] [--section.key VALUE ...]",
        "",
        description,
        "",
        "options:",
    ]
    lines += [
        f"  {flag:<22}{text}" for flag, text in {"-h, --help": "show this help and exit", **flags}.items()
    ]
    lines += [
        "",
        "Several @ files are merged in order (tables key by key, the later file wins).",
        "Overrides: any key below, e.g. --trainer.args.max_steps 5 --model=smollm2 --env.0.weight 2;",
        "a bare --key is true, --no-key false (--no-trainer.args.use_lora).",
        f"Environment variables: {ENV_PREFIX}<KEY>, '__' between the parts, e.g.",
        f"  {ENV_PREFIX}TRAINER__ARGS__LEARNING_RATE=1e-4",
        "Precedence: defaults < @ files in order < environment variables < command line.",
        "",
        "keys (default in brackets):",
    ]
    for key, default, text in schema_keys():
        first = _FIRST_SENTENCE.split(text.strip())[0].rstrip(".")
        lines.append(f"  {key} [{default}]")
        if first:
            lines += textwrap.wrap(first, width=96, initial_indent="      ", subsequent_indent="      ")
    return "\n".join(lines)

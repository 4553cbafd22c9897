"""The schema of a ``vf-rl`` / ``vf-train`` TOML config, and its validation into a :class:`RunConfig`.

    model = "smollm2"                  # hub id, local folder, or "smollm2"

    [env]                              # or several [[env]] tables, each with a sampling weight
    id = "reverse-text"
    args = { num_train_examples = 200 }   # -> load_environment(**args)
    # weight = 1.0                     # [[env]] only: relative share of the prompts (EnvGroup weights)
    # name = "rt"                      # task name in the EnvGroup (default: the id)

    [inference]
    gpus = 0                           # 0: serve on CPU
    # shared_gpu = true                # the server on the trainer's one GPU (unset: when one GPU is visible)
    # host = "127.0.0.1"; port = 8000
    # max_restarts = 3                 # restarts of a server that dies mid-run (0: stop the run)
    # hang_timeout_s = 60              # a server not answering this long is killed and restarted
    # progress_timeout_s = 120         # ... or its engine making no progress while work waits
    [inference.args]                   # -> vf-vllm flags: enforce_eager = true -> --enforce-eager
    enforce_eager = true

    [trainer]
    gpus = 0                           # > 1: accelerate launch with that many processes
    # accelerate_config = "configs/zero3.yaml"
    # max_restarts = 3                 # restarts of a trainer that dies or stops mid-run (0: stop the run)
    # hang_timeout_s = 600             # no training progress this long: restarted (unset: ~31 min; 0: off)
    [trainer.args]                     # RLConfig fields, or any other GRPOConfig field
    batch_size = 32
    # resume_from_checkpoint = true    # the last complete checkpoint in output_dir, or a folder
    [trainer.args.wandb]               # with report_to = "wandb"
    project = "my-project"

Keys, types and defaults of ``[trainer.args]`` come from the dataclasses: ``RLConfig``'s
fields, and any other ``GRPOConfig`` field (passed through as ``grpo_args``). A key that
is not in the schema is a ``ConfigError`` naming the nearest valid key; a value of the
wrong type (checked by pydantic against the field's annotation) is one too.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import math
import os
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verifiers.cli.run_config.types import check_type, describe_value
from verifiers.envs.loader import env_name
from verifiers.errors import ConfigError, nearest
from verifiers.training.config.batch_layout import check_batch_sizes
from verifiers.training.config.fields import GRPOConfig
from verifiers.training.rl.config import RENAMED_GRPO_FIELDS, RLConfig, grpo_field_names

TOP_KEYS = ("model", "env", "inference", "trainer")
ENV_KEYS = ("id", "args", "weight", "name")
INFERENCE_KEYS = (
    "gpus",
    "shared_gpu",
    "host",
    "port",
    "max_restarts",
    "hang_timeout_s",
    "progress_timeout_s",
    "args",
)
# The hang watch's bounds (cli/rl/server_watch.py); why these, in docs/vf-rl.md ("When the server
# hangs"): far above what a loaded CPU server takes to answer or to make a step, far below the
# trainer's own waits (vllm_server_timeout, sync_weights_timeout: 300 s by default).
DEFAULT_HANG_TIMEOUT_S = 60.0
DEFAULT_PROGRESS_TIMEOUT_S = 120.0
TRAINER_KEYS = ("gpus", "args", "accelerate_config", "max_restarts", "hang_timeout_s")
WANDB_KEYS = ("project", "name", "entity")
DEFAULT_HOST = RLConfig.vllm_server_host
DEFAULT_PORT = RLConfig.vllm_server_port


def _key(default: Any, help_text: str) -> Any:
    """A config key with its help (``vf-rl --help`` lists it)."""
    if isinstance(default, dict):
        return field(default_factory=dict, metadata={"help": help_text})
    return field(default=default, metadata={"help": help_text})


@dataclass(frozen=True)
class EnvConfig:
    """One environment of the run: ``load_environment(id, **args)``, sampled with ``weight``."""

    id: str = field(metadata={"help": 'Environment id, e.g. "reverse-text" (required).'})
    args: dict[str, Any] = _key({}, "Keyword arguments of its load_environment.")
    # None: several [[env]] tables and none sets a weight (sizes decide)
    weight: float | None = _key(1.0, "[[env]] only: relative share of the training prompts.")
    name: str = _key("", "Task name inside an EnvGroup; default: the id.")


@dataclass(frozen=True)
class InferenceConfig:
    """The ``vf-vllm`` server: where it listens, its GPUs, and its extra flags (``args``)."""

    gpus: int = _key(1, "GPUs of the vf-vllm server; 0: serve on CPU.")
    shared_gpu: bool | None = _key(
        None,
        "Run the server on the trainer's GPU (gpus = 1 on both sides; weights by CUDA IPC, the memory "
        "split printed before starting); unset: shared when one CUDA device is visible; false: never.",
    )
    host: str = _key(DEFAULT_HOST, "Where the server listens and the trainer connects.")
    port: int = _key(DEFAULT_PORT, "Port of the server.")
    max_restarts: int = _key(
        3,
        "Times vf-rl restarts a server that dies during training (same command, backoff); "
        "0: stop the run instead.",
    )
    hang_timeout_s: float = _key(
        DEFAULT_HANG_TIMEOUT_S,
        "Seconds the server may not answer (alive, but stopped or deadlocked) before vf-rl kills "
        "and restarts it (counted in max_restarts); 0: never.",
    )
    progress_timeout_s: float = _key(
        DEFAULT_PROGRESS_TIMEOUT_S,
        "Seconds the server's engine may make no progress while requests wait (generation not "
        "paused) or a weight sync's call into it waits, before vf-rl kills and restarts the server "
        "(counted in max_restarts); 0: never.",
    )
    # without host/port: those are above
    args: dict[str, Any] = _key({}, "vf-vllm flags: enforce_eager = true -> --enforce-eager.")

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


@dataclass(frozen=True)
class TrainerConfig:
    """The trainer: its GPUs and the ``RLConfig`` keyword arguments (``args``)."""

    gpus: int = _key(1, "Training GPUs; > 1: accelerate launch with that many processes; 0: CPU.")
    args: dict[str, Any] = _key({}, "RLConfig fields, or any other GRPOConfig field.")
    accelerate_config: str | None = _key(None, "An accelerate config file (e.g. DeepSpeed ZeRO-3).")
    max_restarts: int = _key(
        3,
        "Times vf-rl restarts a trainer that dies or stops making progress during training (same "
        "command, from its last complete checkpoint, backoff); 0: stop the run instead.",
    )
    hang_timeout_s: float | None = _key(
        None,
        "Seconds without progress in the training loop after which vf-rl kills and restarts the trainer; "
        "unset: the longest wait the trainer allows itself (30 min checkpoint write, or a longer "
        "vllm_server_timeout / generation_timeout) plus 60 s; 0: off.",
    )
    # trainer.train(resume_from_checkpoint=...): True (the last complete checkpoint), a folder, or None
    resume_from_checkpoint: bool | str | None = None

    @property
    def num_processes(self) -> int:
        return max(self.gpus, 1)


@dataclass(frozen=True)
class RunConfig:
    """A validated vf-rl config."""

    model: str
    envs: list[EnvConfig]
    inference: InferenceConfig
    trainer: TrainerConfig
    source: Path | None = None  # the first config file
    sources: tuple[Path, ...] = ()  # every config file, merged in this order

    def rl_config(self) -> RLConfig:
        return RLConfig(**self.trainer.args)

    @property
    def run_name(self) -> str:
        return self.trainer.args["run_name"]

    @property
    def output_dir(self) -> Path:
        return Path(self.trainer.args.get("output_dir") or os.path.join("outputs", self.run_name))


# -- validation -------------------------------------------------------------------------------


def parse_config(raw: dict[str, Any], source: Path | None = None, sources: Sequence[Path] = ()) -> RunConfig:
    """Validate a raw TOML mapping into a :class:`RunConfig` (see the module docstring)."""
    _check_keys("", raw, TOP_KEYS)
    model = raw.get("model")
    if model is None:
        raise ConfigError(
            "the config sets no model", hint='add model = "smollm2" (or a hub id / folder) at the top'
        )
    check_type("model", model, str)
    envs = _parse_envs(raw.get("env"))
    inference = _table(raw, "inference", INFERENCE_KEYS)
    trainer = _table(raw, "trainer", TRAINER_KEYS)
    inference_args = dict(_table(inference, "args", None, prefix="inference"))
    if "model" in inference_args:
        raise ConfigError(
            "key 'inference.args.model' is not allowed", hint="set the model once, at the top level"
        )
    trainer_args = _trainer_args(_table(trainer, "args", None, prefix="trainer"))
    resume = trainer_args.pop("resume_from_checkpoint", None)
    host, host_path = _one_value(
        "host",
        str,
        DEFAULT_HOST,
        ("inference.host", inference.get("host")),
        ("inference.args.host", inference_args.pop("host", None)),
        ("trainer.args.vllm_server_host", trainer_args.get("vllm_server_host")),
    )
    port, port_path = _one_value(
        "port",
        int,
        DEFAULT_PORT,
        ("inference.port", inference.get("port")),
        ("inference.args.port", inference_args.pop("port", None)),
        ("trainer.args.vllm_server_port", trainer_args.get("vllm_server_port")),
    )
    trainer_args.update(vllm_server_host=host, vllm_server_port=port)
    trainer_args.setdefault("run_name", "-".join(e.name for e in envs))
    gpus = {side: _gpus(table, side) for side, table in (("inference", inference), ("trainer", trainer))}
    max_restarts = _restarts(inference, "inference", "the server")
    trainer_restarts = _restarts(trainer, "trainer", "the trainer")
    hang_timeout_s = trainer.get("hang_timeout_s")
    if hang_timeout_s is not None:
        check_type("trainer.hang_timeout_s", hang_timeout_s, float)
        if not math.isfinite(hang_timeout_s) or hang_timeout_s < 0:
            raise ConfigError(
                f"trainer.hang_timeout_s = {hang_timeout_s} must be >= 0 and finite",
                hint="0 turns the progress watch off; leave it unset for the default (about 31 min)",
            )
    bounds = {  # None: not set, the default (fitted to the trainer's waits below)
        key: None if inference.get(key) is None else _hang_bound(f"inference.{key}", inference[key])
        for key in ("hang_timeout_s", "progress_timeout_s")
    }
    shared_gpu = inference.get("shared_gpu")
    if shared_gpu is not None:
        check_type("inference.shared_gpu", shared_gpu, bool)
    accelerate_config = trainer.get("accelerate_config")
    if accelerate_config is not None:
        check_type("trainer.accelerate_config", accelerate_config, str)
        if not Path(accelerate_config).is_file():
            raise ConfigError(f"trainer.accelerate_config: file {accelerate_config} not found")
    # The batch rule first, in the config's own terms (trainer.gpus), then RLConfig's other rules.
    defaults = {f.name: f.default for f in dataclasses.fields(RLConfig)}
    check_batch_sizes(
        *(
            trainer_args.get(k, defaults[k])
            for k in ("batch_size", "micro_batch_size", "rollouts_per_example")
        ),
        num_processes=max(gpus["trainer"], 1),
        processes_name="max(trainer.gpus, 1)",
    )
    # RLConfig applies every field rule (config/rules.py); its errors name the key as written here.
    try:
        rl = RLConfig(**trainer_args)
    except ConfigError as err:
        raise _as_written(err, {"vllm_server_host": host_path, "vllm_server_port": port_path}) from None
    if resume is not None:
        resume = _check_resume(resume, rl.output_dir)
    bounds = _fit_hang_bounds(bounds, rl)
    return RunConfig(
        model=model,
        envs=envs,
        inference=InferenceConfig(
            gpus=gpus["inference"],
            shared_gpu=shared_gpu,
            host=host,
            port=port,
            max_restarts=max_restarts,
            hang_timeout_s=bounds["hang_timeout_s"],
            progress_timeout_s=bounds["progress_timeout_s"],
            args=inference_args,
        ),
        trainer=TrainerConfig(
            gpus=gpus["trainer"],
            args=trainer_args,
            accelerate_config=accelerate_config,
            max_restarts=trainer_restarts,
            hang_timeout_s=None if hang_timeout_s is None else float(hang_timeout_s),
            resume_from_checkpoint=resume,
        ),
        source=source if source is not None else (sources[0] if sources else None),
        sources=tuple(sources) or ((source,) if source is not None else ()),
    )


def _restarts(table: dict[str, Any], side: str, who: str) -> int:
    """``<side>.max_restarts``: an int >= 0 (default 3); one line otherwise."""
    value = table.get("max_restarts", 3)
    check_type(f"{side}.max_restarts", value, int)
    if value < 0:
        raise ConfigError(
            f"{side}.max_restarts = {value} must be >= 0",
            hint=f"0 ends the run when {who} dies; 3 restarts it up to 3 times",
        )
    return value


def _hang_bound(key: str, value: Any) -> float:
    """A hang watch bound: seconds >= 0 (0: that check is off), as a float; one line otherwise."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
    ):
        raise ConfigError(
            f"{key} = {describe_value(value)} must be a number of seconds >= 0",
            hint="0 turns this check off; e.g. 60",
        )
    return float(value)


def _fit_hang_bounds(bounds: dict[str, float | None], rl: RLConfig) -> dict[str, float]:
    """The hang bounds against the trainer's own waits on a server that hangs: its requests time
    out (a weight sync after ``sync_weights_timeout``, a batch after ``generation_timeout``) and
    it waits ``vllm_server_timeout`` for a server it lost. A hang found after one of these ran
    out comes too late (the trainer failed, or gave up on the server), so a bound set at or above
    the shortest is refused in one line; a default is lowered to half of it."""
    waits = {
        "trainer.args.vllm_server_timeout": float(rl.vllm_server_timeout),
        "trainer.args.generation_timeout": float(rl.generation_timeout),
        "trainer.args.sync_weights_timeout": float(
            rl.grpo_args.get("sync_weights_timeout", GRPOConfig.sync_weights_timeout)
        ),
    }
    name, shortest = min(waits.items(), key=lambda item: item[1])
    defaults = {"hang_timeout_s": DEFAULT_HANG_TIMEOUT_S, "progress_timeout_s": DEFAULT_PROGRESS_TIMEOUT_S}
    fitted: dict[str, float] = {}
    for key, bound in bounds.items():
        if bound is None:
            fitted[key] = min(defaults[key], shortest / 2)
        elif bound >= shortest:
            raise ConfigError(
                f"inference.{key} = {bound:g} must be below {name} ({shortest:g} s)",
                hint="a hang must be found before the trainer's own wait runs out; lower it, or 0 for never",
            )
        else:
            fitted[key] = bound
    return fitted


def _check_resume(value: bool | str, output_dir: str) -> bool | str | None:
    """``trainer.args.resume_from_checkpoint``: refused here, before anything starts, if there is nothing to resume."""
    from verifiers.training.lifecycle import checkpoint as ckpt

    path = "trainer.args.resume_from_checkpoint"
    if value is False or value == "":
        return None
    if value is True:
        # Sizes only (a stat per file): the trainer reads and checks the one it picks.
        if ckpt.last_complete_checkpoint(output_dir) is None:
            found = [p.name for _, p in ckpt.checkpoints(output_dir)]
            problem = (
                f"none of {', '.join(found)} is complete and intact" if found else "it holds no checkpoint"
            )
            raise ConfigError(
                f"{path} = true, but output_dir {output_dir}: {problem}",
                hint="train without it first, or set it to a checkpoint folder",
            )
        return True
    if not Path(value).is_dir():
        raise ConfigError(
            f'{path} = "{value}": no such folder',
            hint=f"name a checkpoint folder, e.g. {output_dir}/checkpoint-50",
        )
    return value


def _parse_envs(raw: Any) -> list[EnvConfig]:
    if raw is None:
        raise ConfigError(
            "the config has no [env] table", hint='add [env] with id = "reverse-text" (or [[env]] tables)'
        )
    tables = raw if isinstance(raw, list) else [raw]
    if not tables or not all(isinstance(t, dict) for t in tables):
        raise ConfigError("'env' must be an [env] table or a list of [[env]] tables")
    envs: list[EnvConfig] = []
    for i, table in enumerate(tables):
        prefix = f"env.{i}" if isinstance(raw, list) else "env"
        _check_keys(prefix, table, ENV_KEYS)
        env_id = table.get("id")
        if env_id is None:
            raise ConfigError(f"{prefix} has no id", hint='e.g. id = "reverse-text"')
        check_type(f"{prefix}.id", env_id, str)
        args = _table(table, "args", None, prefix=prefix)
        weight = table.get("weight")
        if weight is not None:
            check_type(f"{prefix}.weight", weight, float)
            if not math.isfinite(weight) or weight <= 0:
                raise ConfigError(
                    f"{prefix}.weight = {weight} must be > 0 and finite",
                    hint="weights are relative shares, e.g. 3.0 and 1.0; drop the environment to leave it out",
                )
        name = table.get("name", env_name(env_id))  # owner/name@version -> name: a task and run name
        check_type(f"{prefix}.name", name, str)
        weight = None if weight is None else float(weight)
        envs.append(EnvConfig(id=env_id, args=dict(args), weight=weight, name=name))
    if len(envs) == 1 or any(e.weight is not None for e in envs):
        # Once one table sets a weight, the others count 1.0; no weight at all keeps None.
        envs = [dataclasses.replace(e, weight=1.0 if e.weight is None else e.weight) for e in envs]
    names = [e.name for e in envs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(
            f"two [[env]] tables are both named '{dupes[0]}'", hint='give each a distinct name = "..."'
        )
    return envs


def _trainer_args(raw: dict[str, Any]) -> dict[str, Any]:
    """``[trainer.args]`` -> RLConfig keyword arguments (other GRPOConfig fields go to ``grpo_args``)."""
    own = _rl_hints()
    passthrough = _grpo_hints()
    out: dict[str, Any] = {}
    grpo_args: dict[str, Any] = {}
    for key, value in raw.items():
        path = f"trainer.args.{key}"
        if key == "resume_from_checkpoint":  # an argument of train(), not a config field
            check_type(path, value, bool | str)
            out[key] = value
        elif key == "wandb":
            table = _table(raw, "wandb", WANDB_KEYS, prefix="trainer.args")
            for sub, sub_value in table.items():
                check_type(f"{path}.{sub}", sub_value, str)
                out[f"wandb_{sub}"] = sub_value
        elif key in RENAMED_GRPO_FIELDS:
            raise ConfigError(
                f"key '{path}' is set through '{RENAMED_GRPO_FIELDS[key]}' in a vf-rl config",
                hint=f"set trainer.args.{RENAMED_GRPO_FIELDS[key]} instead",
            )
        elif key in own:
            check_type(path, value, own[key])
            out[key] = value
        elif key in passthrough:
            check_type(path, value, passthrough[key])
            grpo_args[key] = value
        else:
            _unknown(path, key, [*own, *passthrough, "wandb"])
    if grpo_args:
        out["grpo_args"] = grpo_args
    return out


@functools.lru_cache(maxsize=1)
def _rl_hints() -> dict[str, Any]:
    hints = typing.get_type_hints(RLConfig)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(RLConfig) if f.name != "grpo_args"}


@functools.lru_cache(maxsize=1)
def _grpo_hints() -> dict[str, Any]:
    try:
        hints = typing.get_type_hints(GRPOConfig)
    except Exception:  # an annotation transformers cannot resolve: check names only
        hints = {}
    return {name: hints.get(name, Any) for name in grpo_field_names()}


def _table(
    parent: dict[str, Any], key: str, allowed: Sequence[str] | None, prefix: str = ""
) -> dict[str, Any]:
    path = f"{prefix}.{key}" if prefix else key
    value = parent.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(
            f"'{path}' must be a table, got {describe_value(value)}", hint=f"write it as [{path}]"
        )
    if allowed is not None:
        _check_keys(path, value, allowed)
    return value


def _check_keys(prefix: str, table: dict[str, Any], allowed: Sequence[str]) -> None:
    for key in table:
        if key not in allowed:
            _unknown(f"{prefix}.{key}" if prefix else key, key, allowed)


def _unknown(path: str, key: str, allowed: Sequence[str]) -> typing.NoReturn:
    guess = nearest(key, allowed)
    if guess:
        raise ConfigError(f"unknown key '{path}'; did you mean '{guess}'?")
    if len(allowed) <= 8:
        raise ConfigError(f"unknown key '{path}'", hint=f"valid keys here: {', '.join(allowed)}")
    raise ConfigError(f"unknown key '{path}'", hint="it is neither an RLConfig nor a GRPOConfig field")


def _gpus(table: dict[str, Any], side: str) -> int:
    gpus = table.get("gpus", 1)
    check_type(f"{side}.gpus", gpus, int)
    if gpus < 0:
        raise ConfigError(f"{side}.gpus = {gpus} must be >= 0", hint="0 runs on CPU")
    return gpus


def _one_value(what: str, tp: Any, default: Any, *given: tuple[str, Any]) -> tuple[Any, str]:
    """The value set (possibly in several places, which must agree) for the server's host or port,
    and the key it was set by (the first; ``trainer.args.<field>`` when none sets it)."""
    values = [(path, v) for path, v in given if v is not None]
    for path, v in values:
        check_type(path, v, tp)
    if len({v for _, v in values}) > 1:
        listed = " and ".join(f"{path} = {v!r}" for path, v in values)
        raise ConfigError(f"{listed} disagree", hint=f"set the server's {what} once, in [inference]")
    return (values[0][1], values[0][0]) if values else (default, given[-1][0])


def _as_written(err: ConfigError, paths: dict[str, str]) -> ConfigError:
    """RLConfig's error as this config's keys: ``trainer.args: <its line>``, or, for a server field
    set in ``[inference]``, that key (``inference.port = 70000 is not a TCP port ...``)."""
    for name, path in paths.items():
        if err.message.startswith(f"{name}=") and not path.startswith("trainer.args."):
            return ConfigError(f"{path} = {err.message[len(name) + 1 :]}", hint=err.hint)
    return ConfigError(f"trainer.args: {err.message}", hint=err.hint)


# -- the key list of `vf-rl --help` -------------------------------------------------------------


def schema_keys() -> list[tuple[str, str, str]]:
    """Every key of the schema as ``(dotted key, default as TOML, help)``, read from the dataclasses."""
    keys = [("model", "(required)", 'Hub id, local folder, or "smollm2".')]
    for prefix, cls in (("env", EnvConfig), ("inference", InferenceConfig), ("trainer", TrainerConfig)):
        keys += [
            (f"{prefix}.{f.name}", _default_text(f), f.metadata.get("help", ""))
            for f in dataclasses.fields(cls)
            if "help" in f.metadata
        ]
    rl_fields = [f for f in dataclasses.fields(RLConfig) if f.name != "grpo_args"]
    for f in rl_fields:
        if f.name.startswith("wandb_"):
            keys.append((f"trainer.args.wandb.{f.name[len('wandb_') :]}", "(unset)", f.metadata["help"]))
        else:
            keys.append((f"trainer.args.{f.name}", _default_text(f), f.metadata.get("help", "")))
    keys.append(
        (
            "trainer.args.resume_from_checkpoint",
            "(unset)",
            "true: the last complete checkpoint in output_dir; or a checkpoint folder.",
        )
    )
    own = {f.name for f in rl_fields}
    grpo = {f.name: f for f in dataclasses.fields(GRPOConfig)}
    for name in sorted(grpo_field_names() - own):
        keys.append((f"trainer.args.{name}", _default_text(grpo[name]), grpo[name].metadata.get("help", "")))
    return keys


def _default_text(f: dataclasses.Field) -> str:
    if f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    elif f.default is dataclasses.MISSING:
        return "(required)"
    else:
        value = f.default
    if value is None:
        return "(unset)"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, list, dict)):
        return json.dumps(value)
    return repr(value)

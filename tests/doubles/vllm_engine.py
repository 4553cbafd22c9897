"""vf-vllm's /vf routes in this process over a fake engine: the real router, no vLLM.

Stands in for the vLLM engine behind vf-vllm: ``FakeEngine`` is the slice of vLLM's
EngineClient the routes use (pause, collective_rpc, add_lora, ...), recording each call and
loading the weights file the client wrote (tensors as ``SPEC`` says; ``weights`` makes a set);
``Double`` serves the real router (``attach``) over it with uvicorn on a thread, on a free port.

Used by the default tier's component tests of the client and the weight sync
(tests/inference/test_client.py, and the GPU-path tests test_weight_update_gpu_path.py and
tests/training/weights/test_sync_gpu_path.py, which skip without CUDA).
"""

from __future__ import annotations

import asyncio
import collections
import socket
import threading
import time
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")
uvicorn = pytest.importorskip("uvicorn")

from fastapi import FastAPI  # noqa: E402

from verifiers.inference.server.routes import attach  # noqa: E402
from verifiers.inference.server.state import Settings  # noqa: E402

__all__ = ["SPEC", "Double", "FakeEngine", "FakeModels", "Settings", "weights"]


SPEC = {
    "params": {
        "embed.weight": [[8, 4], "F32"],
        "layers.0.attn.q_proj.weight": [[4, 4], "F32"],
        "layers.0.attn.k_proj.weight": [[4, 4], "F32"],
        "layers.0.attn.v_proj.weight": [[4, 4], "F32"],
        "layers.0.mlp.weight": [[4, 4], "F32"],
        "layers.0.mlp.bias": [[4], "F32"],
    },
    "fused": {"qkv_proj": ["q_proj", "k_proj", "v_proj"]},
    "tied": True,
}


def weights(scale: float = 1.0) -> dict[str, torch.Tensor]:
    return {n: torch.full(shape, scale) for n, (shape, _) in SPEC["params"].items()}


class FakeEngine:
    """The slice of vLLM's EngineClient the /vf routes use."""

    def __init__(
        self, lora: bool = True, fail_load: bool = False, errored_for: int = 0, lora_load_s: float = 0.0
    ):
        pc = SimpleNamespace(
            world_size_across_dp=1, tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1
        )
        lora_config = SimpleNamespace(max_lora_rank=8) if lora else None
        self.vllm_config = SimpleNamespace(
            parallel_config=pc, lora_config=lora_config, weight_transfer_config=None
        )
        self.fail_load, self.errored_for, self.lora_load_s = fail_load, errored_for, lora_load_s
        self.calls: list[str] = []
        self.paused = False
        self.loaded: dict[str, torch.Tensor] = {}
        self.loras: list = []
        self.dead_error = RuntimeError("engine died")

    @property
    def errored(self) -> bool:
        self.errored_for -= 1
        return self.errored_for >= 0

    async def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        self.calls.append(method)
        if method == "vf_weight_spec":
            return [SPEC]
        if method == "vf_load_safetensors":
            if self.fail_load:
                raise RuntimeError("worker exploded")
            from safetensors.torch import load_file

            self.loaded = load_file(args[0])
            return [{"loaded": len(self.loaded), "seconds": 0.0, "cpu_seconds": 0.0}]
        raise AssertionError(method)

    async def pause_generation(self, mode="keep", clear_cache=False):
        self.calls.append(f"pause:{mode}")
        self.paused = True

    async def resume_generation(self):
        self.calls.append("resume")
        self.paused = False

    async def is_paused(self):
        return self.paused

    async def reset_prefix_cache(self, reset_running=False, reset_external=False):
        self.calls.append("reset_prefix_cache")
        return True

    async def update_weight_version(self, version):
        pass

    async def add_lora(self, request):
        self.calls.append("add_lora")
        self.loras.append(request)
        await asyncio.sleep(self.lora_load_s)
        if self.fail_load or request.lora_name.startswith("broken"):
            raise RuntimeError("adapter exploded")
        return True


class FakeModels:
    """vLLM's OpenAIServingModels, as far as the LoRA route touches it."""

    def __init__(self):
        self.base_model_paths = [SimpleNamespace(name="base")]
        self.lora_requests: dict = {}
        self.lora_resolver_lock = collections.defaultdict(asyncio.Lock)
        self.lora_id_counter = SimpleNamespace(n=0, inc=self._inc)

    def _inc(self, k=1):
        self.lora_id_counter.n += k
        return self.lora_id_counter.n

    def is_base_model(self, name):
        return name == "base"


class Double:
    """The real /vf router served by uvicorn on a thread, over a FakeEngine."""

    def __init__(self, engine: FakeEngine, settings: Settings):
        self.engine = engine
        app = FastAPI()
        app.state.openai_serving_models = FakeModels()
        self.state = attach(app, engine, settings)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Double:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(5)

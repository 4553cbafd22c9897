"""VLLMClient and the /vf routes against a local double: the real router, a fake engine, no vLLM.

The fake engine records the calls the routes make (pause, collective_rpc, add_lora,
...) and loads the weights file the client wrote, so the handshake, typed errors,
auth, retries and readiness waits are tested in well under a second each.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")
uvicorn = pytest.importorskip("uvicorn")

from tests.doubles.vllm_engine import SPEC, Double, FakeEngine, weights  # noqa: E402
from verifiers.errors import ServerError, ServerTimeoutError, ServerUnreachableError, WeightSyncError  # noqa: E402
from verifiers.inference.client.vllm_client import VLLMClient  # noqa: E402
from verifiers.inference.server.state import Settings, check_admin, is_loopback  # noqa: E402
from verifiers.inference.server.worker import validate_params  # noqa: E402
from verifiers.utils import owned_files  # noqa: E402


def double(**engine_kw) -> Double:
    return Double(FakeEngine(**engine_kw), Settings())


def test_update_weights_handshake_over_shm_and_http():
    with double() as d:
        client = VLLMClient(d.url)
        assert client.update_weights(weights(1.0)) == 1
        assert d.engine.calls == [
            "vf_weight_spec",
            "pause:keep",
            "vf_load_safetensors",
            "reset_prefix_cache",
            "resume",
        ]
        assert torch.equal(d.engine.loaded["layers.0.mlp.bias"], torch.ones(4))
        assert client.update_weights(weights(2.0), transport_name="http") == 2
        assert torch.equal(d.engine.loaded["embed.weight"], torch.full((8, 4), 2.0))
        health = client.health()
        assert health["weight_version"] == 2 and not health["paused"] and not health["update_in_progress"]
        staged = list(Path("/dev/shm").glob(f"vf-weights-{os.getpid()}-*"))
        assert len(staged) <= 1  # one staging file, reused across updates...
        client.close()
        assert not any(p.exists() for p in staged)  # ...removed with the client


def test_tied_duplicate_is_sent_once():
    w = weights()
    w["lm_head.weight"] = w["embed.weight"]  # the same storage, as in a tied model
    with double() as d:
        VLLMClient(d.url).update_weights(w)
        assert "lm_head.weight" not in d.engine.loaded and "embed.weight" in d.engine.loaded


def test_validation_errors_are_typed_and_leave_generation_running():
    with double() as d:
        client = VLLMClient(d.url)
        with pytest.raises(WeightSyncError) as info:
            client.update_weights({**weights(), "nope.weight": torch.zeros(2)})
        err = info.value
        assert (err.stage, err.status) == ("validate", 400)
        assert "unknown parameter 'nope.weight'" in str(err) and err.url.endswith("/vf/weights/begin")
        assert "nope.weight" in err.body
        assert "vf_load_safetensors" not in d.engine.calls and not d.engine.paused


def test_validate_params_rules():
    meta = [{"name": n, "shape": s, "dtype": "float32"} for n, (s, _) in SPEC["params"].items()]
    assert validate_params(SPEC, meta) == []
    wrong = [{**meta[0], "shape": [2, 2]}]
    assert "expects [8, 4]" in validate_params(SPEC, wrong)[0]
    q_only = [m for m in meta if "q_proj" in m["name"]]
    assert "k_proj" in validate_params(SPEC, q_only)[0]
    weight_only = [m for m in meta if m["name"] == "layers.0.mlp.weight"]
    assert "layers.0.mlp.bias" in validate_params(SPEC, weight_only)[0]
    assert validate_params(SPEC, [m for m in meta if m["name"] == "embed.weight"]) == []
    assert "dtype int64" in validate_params(SPEC, [{**meta[0], "dtype": "int64"}])[0]


def test_load_failure_is_typed_and_generation_resumes():
    with double(fail_load=True) as d:
        client = VLLMClient(d.url)
        with pytest.raises(WeightSyncError) as info:
            client.update_weights(weights())
        assert (
            info.value.stage == "load" and info.value.status == 500 and "worker exploded" in str(info.value)
        )
        health = client.health()
        assert (
            not health["paused"]
            and not health["update_in_progress"]
            and "worker exploded" in health["last_error"]
        )


def test_admin_routes_need_a_token_off_loopback():
    assert is_loopback("127.0.0.2") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback(None) and not is_loopback("10.1.2.3")
    check_admin(Settings(loopback=True), None)  # loopback, no token: open
    with Double(FakeEngine(), Settings(loopback=False)) as d:
        client = VLLMClient(d.url)
        assert client.health()["admin_token_required"]  # readiness stays open
        with pytest.raises(ServerError) as info:
            client.reset_prefix_cache()
        assert info.value.status == 403 and "--admin-token" in str(info.value)
        with pytest.raises(WeightSyncError) as info:
            client.update_weights(weights())
        assert info.value.stage == "auth" and info.value.status == 403
    with Double(FakeEngine(), Settings(loopback=False, admin_token="s3cret")) as d:
        for token in (None, "wrong"):
            with pytest.raises(ServerError) as info:
                VLLMClient(d.url, admin_token=token).pause()
            assert info.value.status == 401 and "admin_token" in str(info.value)
        ok = VLLMClient(d.url, admin_token="s3cret")
        ok.pause()
        assert ok.health()["paused"]
        ok.resume()
        assert ok.update_weights(weights()) == 1


def test_wait_until_ready_errors_name_the_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = VLLMClient(f"http://127.0.0.1:{port}/v1", max_retries=1)
    t0 = time.monotonic()
    with pytest.raises(ServerUnreachableError) as info:
        client.wait_until_ready(timeout=1.0, poll=0.1)
    assert time.monotonic() - t0 < 3 and f"127.0.0.1:{port}" in str(info.value)
    with pytest.raises(ServerUnreachableError):
        client.reset_prefix_cache()
    with double(errored_for=10**6) as d:  # answers 503 forever
        with pytest.raises(ServerTimeoutError) as info:
            VLLMClient(d.url).wait_until_ready(timeout=1.0, poll=0.1)
        assert d.url in str(info.value) and "503" in str(info.value)


def test_safe_calls_retry_through_503():
    with double(errored_for=2) as d:  # two 503s, then ready
        assert VLLMClient(d.url, max_retries=3).health()["status"] == "ready"


def test_lora_swap_and_lora_disabled():
    pytest.importorskip("vllm")  # the route builds vLLM's LoRARequest
    cfg = {"r": 2, "lora_alpha": 4, "target_modules": ["q_proj"], "peft_type": "LORA"}
    adapter = {"base_model.model.layers.0.attn.q_proj.lora_A.weight": torch.ones(2, 4)}
    with double(lora=False) as d:
        with pytest.raises(WeightSyncError) as info:
            VLLMClient(d.url).update_lora(adapter, config=cfg)
        assert info.value.stage == "lora" and "--enable-lora" in str(info.value)
    with double() as d:
        client = VLLMClient(d.url)
        assert client.update_lora(adapter, name="policy", config=cfg) == "policy"
        first = d.engine.loras[-1].lora_path
        client.update_lora(adapter, name="policy", config=cfg, transport_name="http")
        swap = d.engine.loras[-1]
        assert swap.load_inplace and swap.lora_int_id == d.engine.loras[0].lora_int_id
        assert client.health()["lora"]["adapters"] == {"policy": 2}
        assert not Path(first).exists()  # the replaced folder is gone, the served one stays
        assert Path(swap.lora_path, "adapter_config.json").is_file()
        assert not d.engine.paused
        from verifiers.inference.server.routes import cleanup

        cleanup(d.state)
        assert not Path(swap.lora_path).exists()
    with double(fail_load=True) as d:  # a folder that failed to load goes, whoever wrote it
        for kind in ("shm", "http"):
            with pytest.raises(WeightSyncError, match="adapter exploded"):
                VLLMClient(d.url).update_lora(adapter, config=cfg, transport_name=kind)
        written = [r.lora_path for r in d.engine.loras]
        assert len(written) == 2 and not [p for p in written if Path(p).exists()]
        assert not set(written) & set(owned_files.held())


# The double in a process of its own, as vf-vllm runs beside a trainer: which process holds an
# adapter folder matters here. Adapters named "broken..." fail to load after the same wait.
SLOW_LORA_SERVER = """
import sys
import vllm.lora.request  # imported before the clock starts: the first load imports it
from tests.inference.test_client import Double, FakeEngine, Settings
from verifiers.inference.server.routes import cleanup
with Double(FakeEngine(lora_load_s=float(sys.argv[1])), Settings()) as d:
    print(d.url, flush=True)
    sys.stdin.read()  # until the test closes our stdin
    cleanup(d.state)
"""


def test_an_adapter_load_that_times_out_leaves_the_folder_to_the_server():
    """The trainer gives up on a slow load, the server goes on loading: the folder it will serve
    from (and reload an evicted adapter from) must stay; one whose load then fails must go."""
    pytest.importorskip("vllm")  # the route builds vLLM's LoRARequest
    import subprocess
    import sys

    from verifiers.inference.wire import transfer_dir

    def written() -> set[Path]:
        return set(transfer_dir().glob(f"vf-lora-{os.getpid()}-*"))

    cfg = {"r": 2, "lora_alpha": 4, "target_modules": ["q_proj"], "peft_type": "LORA"}
    adapter = {"base_model.model.layers.0.attn.q_proj.lora_A.weight": torch.ones(2, 4)}
    root = Path(__file__).resolve().parents[2]
    server = subprocess.Popen(
        [sys.executable, "-c", SLOW_LORA_SERVER, "3"],
        cwd=root,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        client = VLLMClient(server.stdout.readline().strip(), update_timeout=1.5, max_retries=0)
        before = written()
        served = {}
        for name in ("policy", "broken"):
            with pytest.raises(WeightSyncError) as info:
                client.update_lora(adapter, name=name, config=cfg, transport_name="shm")
            assert info.value.stage == "timeout"
            (folder,) = written() - before - set(served.values())
            assert folder.is_dir() and str(folder) not in owned_files.held()  # the server still loads it
            # The load ends 1.5 s after the timeout. A folder that nobody holds is also removed by
            # the sweep any other vf process runs at its start, but only once 10 s old: the
            # deadline keeps this a test of the server's own removal.
            served[name], deadline = folder, time.monotonic() + 6
            while not (name in client.health()["lora"]["adapters"] or not folder.exists()):
                assert time.monotonic() < deadline, name
                time.sleep(0.1)
        assert client.health()["lora"]["adapters"] == {"policy": 1}
        assert Path(served["policy"], "adapter_config.json").is_file()  # loaded: it stays
        assert not served["broken"].exists()  # failed after its writer gave up: the server removed it
    finally:
        server.stdin.close()
        server.wait(30)
        server.stdout.close()
    assert not served["policy"].exists()  # the server's cleanup at exit


def test_openai_surface():
    client = VLLMClient("http://127.0.0.1:9/v1", api_key="k")
    assert client.base_url == "http://127.0.0.1:9/v1" and client.server_url == "http://127.0.0.1:9"
    assert client.chat.completions.create and client.completions.create
    assert str(client.openai.base_url).rstrip("/") == client.base_url
    assert client.with_options  # anything else comes from the AsyncOpenAI client


def test_one_client_serves_successive_event_loops():
    """A trainer's generator thread runs its own loop; a second trainer (or env.evaluate before
    training) brings another. The keep-alive connection pooled on the first, now closed, loop must
    not be reused: that failed with "Event loop is closed" (seen in CI, calculator after number-guess)."""
    from tests.doubles.openai_server import fake_server

    with fake_server(reply=lambda request: "hi") as server:
        client = VLLMClient(server.url, max_retries=0)

        async def ask() -> str:
            reply = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}]
            )
            return reply.choices[0].message.content

        answers = []
        for _ in range(3):  # each loop in its own thread, closed after use, like GRPOTrainer's generator
            thread = threading.Thread(target=lambda: answers.append(asyncio.run(ask())))
            thread.start()
            thread.join()
        assert answers == ["hi", "hi", "hi"]
        assert client.openai is client.openai  # outside any loop: one client, made once


def test_staging_file_is_reused_and_readable(tmp_path):
    from safetensors.torch import load_file

    from verifiers.inference.client.transport import StagingFile

    staging = StagingFile()
    mixed = {"a": torch.randn(3, 5), "b": torch.randn(7).to(torch.bfloat16), "c": torch.randn(2, 2)}
    path = staging.write(mixed)
    assert {k: v.dtype for k, v in load_file(str(path)).items()} == {k: v.dtype for k, v in mixed.items()}
    again = {k: v * 2 for k, v in mixed.items()}
    assert staging.write(again) == path  # same layout: same file, overwritten in place
    assert all(torch.equal(v, again[k]) for k, v in load_file(str(path)).items())
    other = staging.write({"a": torch.zeros(4)})  # another layout (a second request): its own file
    assert other != path and path.exists() and torch.equal(load_file(str(other))["a"], torch.zeros(4))
    assert staging.write(mixed) == path and staging.paths == [other, path]
    staging.close()
    assert not other.exists() and not path.exists()
    small = StagingFile(max_files=1)
    first = small.write({"a": torch.zeros(1)})
    small.write({"b": torch.zeros(1)})
    assert not first.exists()  # the oldest layout is dropped beyond max_files
    small.close()


def test_a_killed_processes_weight_file_and_adapter_folder_are_removed_by_the_next_trainer():
    """SIGKILL leaves the shm weight file (a model's size of memory) and the adapter folder; the
    next StagingFile (each client makes one) removes them. A live process's, however old, stay."""
    import signal
    import subprocess
    import sys

    from verifiers.inference.client.transport import StagingFile

    code = (
        "import sys, time, torch\nfrom verifiers.inference.client import adapters, transport\n"
        "s = transport.StagingFile()\nprint(s.write({'w': torch.zeros(1000)}), flush=True)\n"
        "cfg = {'r': 2, 'lora_alpha': 4, 'target_modules': ['q_proj'], 'peft_type': 'LORA'}\n"
        "print(adapters.write_lora_dir({'q_proj.lora_A.weight': torch.ones(2, 4)}, cfg), flush=True)\n"
        "time.sleep(600)\n"
    )
    root = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "-c", code]
    owners = [subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        dead, live = ([Path(p.stdout.readline().strip()) for _ in range(2)] for p in owners)
        owners[0].send_signal(signal.SIGKILL)
        owners[0].wait(10)
        hour_ago = time.time() - 3600  # past the age below which a path is never removed
        for path in (*dead, *live):
            os.utime(path, (hour_ago, hour_ago))
        assert dead[1].name.startswith("vf-lora-") and (dead[1] / "adapter_config.json").is_file()
        assert all(path.exists() for path in (*dead, *live))
        StagingFile().close()
        assert not [path for path in dead if path.exists()] and all(path.exists() for path in live)
    finally:
        for p in owners:
            p.kill()
            p.wait(10)
            p.stdout.close()


def test_an_adapter_folder_that_fails_to_write_is_removed(tmp_path):
    from verifiers.inference.client.adapters import write_lora_dir

    not_an_adapter = tmp_path / "empty"
    not_an_adapter.mkdir()
    with pytest.raises(ValueError, match="not a PEFT adapter folder"):
        write_lora_dir(not_an_adapter, root=tmp_path)
    assert list(tmp_path.iterdir()) == [not_an_adapter]
    assert not [p for p in owned_files.held() if p.startswith(str(tmp_path))]


def test_lora_tensors_match_peft(tiny_model_dir):
    peft = pytest.importorskip("peft")
    from transformers import AutoModelForCausalLM

    from verifiers.inference.client.adapters import lora_payload

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    cfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    pm = peft.get_peft_model(model, cfg)
    tensors, config = lora_payload(pm)
    expected = peft.get_peft_model_state_dict(pm)
    assert tensors.keys() == expected.keys() and all(torch.equal(tensors[k], expected[k]) for k in expected)
    assert config["r"] == 4 and sorted(config["target_modules"]) == ["q_proj", "v_proj"]


def test_load_refuses_a_file_that_differs_from_begin():
    from verifiers.inference import wire
    from verifiers.inference.client import transport
    from verifiers.inference.safetensors_writer import write_safetensors

    with double() as d:
        client = VLLMClient(d.url)
        meta = transport.tensor_meta(weights())
        client._request(
            "POST", "/vf/weights/begin", json={"update_id": "u1", "transport": "shm", "params": meta}
        )
        path = wire.transfer_dir() / wire.new_name("weights", ".safetensors")
        write_safetensors({"embed.weight": torch.zeros(2, 2)}, path)  # not what begin announced
        try:
            with pytest.raises(WeightSyncError) as info:
                client._request(
                    "POST", "/vf/weights/load", stage="load", json={"update_id": "u1", "path": str(path)}
                )
        finally:
            path.unlink()
        assert info.value.status == 400 and "not announced at begin" in str(info.value)
        assert "vf_load_safetensors" not in d.engine.calls
        assert client._request("POST", "/vf/weights/abort", json={"update_id": "u1"})["aborted"]
        assert not client.health()["paused"]


def test_nccl_control_flow_with_a_fake_broadcast(monkeypatch):
    """The GPU path's HTTP side: no GPU here, so vLLM's NCCL engine is replaced by a stand-in."""
    pytest.importorskip("vllm")
    from verifiers.inference.client import nccl_sender

    class FakeSender:  # what NCCLTrainerWeightTransferEngine does, minus the broadcast
        def __init__(self, control, *, master_address, master_port, world_size):
            assert world_size == 2 and master_address
            control.init_weight_transfer_engine(
                {"master_address": master_address, "master_port": master_port}
            )
            self.control = control

        def send(self, tensors, ready=None):
            self.control.start_weight_update()
            info = {
                "names": list(tensors),
                "dtype_names": [str(t.dtype).split(".")[-1] for t in tensors.values()],
                "shapes": [list(t.shape) for t in tensors.values()],
            }
            self.control.update_weights(info)
            self.control.finish_weight_update()

        def close(self):
            pass

    class NcclEngine(FakeEngine):
        async def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
            if method in ("start_weight_update", "finish_weight_update", "vf_repack_tied"):
                self.calls.append(method)
                return [None]
            return await super().collective_rpc(method, timeout, args, kwargs)

        async def init_weight_transfer_engine(self, request):
            self.calls.append("init_weight_transfer_engine")

        async def update_weights(self, request):
            self.calls.append("update_weights")
            self.update_info = request.update_info

    monkeypatch.setattr(nccl_sender, "NcclWeightSender", FakeSender)
    engine = NcclEngine()
    engine.vllm_config.weight_transfer_config = SimpleNamespace(backend="nccl")
    with Double(engine, Settings()) as d:
        d.state.device = "cuda"
        client = VLLMClient(d.url)
        assert client.update_weights(weights(), transport_name="nccl") == 1
        assert engine.calls == [
            "init_weight_transfer_engine", "vf_weight_spec", "pause:keep", "start_weight_update",
            "update_weights", "finish_weight_update", "vf_repack_tied", "reset_prefix_cache", "resume",
        ]  # fmt: skip
        assert sorted(engine.update_info["names"]) == sorted(SPEC["params"])
        assert client.health()["weight_version"] == 1 and not engine.paused


def test_malformed_begin_requests_are_400s():
    import requests

    meta = [{"name": "embed.weight", "shape": [8, 4], "dtype": "float32"}]
    cases = [
        ({"params": [5]}, "validate", "params[0] is 5"),
        ({"timeout_s": "soon"}, "request", "timeout_s is 'soon'"),
        ({"version": -1}, "request", "version is -1"),
        ({"transport": "pigeon"}, "request", "transport in"),
        ({"params": [{**meta[0], "name": "embed.weigth"}]}, "validate", "did you mean 'embed.weight'"),
    ]
    with double() as d:
        for change, stage, needle in cases:
            body = {"update_id": "x", "transport": "shm", "params": meta, **change}
            r = requests.post(d.url + "/vf/weights/begin", json=body, timeout=10)
            error = r.json()["error"]
            assert r.status_code == 400 and error["stage"] == stage and needle in error["message"], (
                change,
                error,
            )
        assert not d.engine.paused and d.state.update is None


def test_large_update_goes_as_several_files_in_one_transaction():
    with double() as d:
        client = VLLMClient(d.url)
        loads = []
        original = d.engine.collective_rpc

        async def spy(method, timeout=None, args=(), kwargs=None):
            if method == "vf_load_safetensors":
                loads.append(d.engine.paused)
            return await original(method, timeout, args, kwargs)

        d.engine.collective_rpc = spy
        assert client.update_weights(weights(3.0), max_file_bytes=64) == 1
        assert len(loads) > 1 and all(loads)  # several files, generation paused for all of them
        assert d.engine.calls.count("resume") == 1 and d.engine.calls.count("reset_prefix_cache") == 1
        # q/k/v of one block always share a file
        from verifiers.inference.client.transport import split_by_module

        pieces = split_by_module(weights(), 1)
        qkv = [i for i, p in enumerate(pieces) for n in p if "_proj" in n]
        assert len(set(qkv)) == 1


class SleepyEngine(FakeEngine):
    """A FakeEngine started with vLLM's --enable-sleep-mode."""

    def __init__(self, sleep_mode: bool = True, **kw):
        super().__init__(**kw)
        self.vllm_config.model_config = SimpleNamespace(enable_sleep_mode=sleep_mode, dtype=torch.float32)

    async def sleep(self, level=1, mode="abort"):
        self.calls.append(f"sleep:{level}:{mode}")

    async def wake_up(self, tags=None):
        self.calls.append(f"wake:{tags}")


def test_sleep_frees_the_cache_and_a_sync_wakes_the_server_first():
    with Double(SleepyEngine(), Settings()) as d:
        client = VLLMClient(d.url)
        assert client.health()["sleep_mode"] is True
        client.sleep()
        client.sleep()  # asleep already: vLLM is not asked twice
        assert client.health()["sleeping"] is True
        assert d.engine.calls == ["sleep:1:wait"]
        client.update_weights(weights(1.0))  # begin wakes it: the weights must be on the GPU
        assert d.engine.calls[1:3] == ["wake:None", "reset_prefix_cache"]
        assert client.health()["sleeping"] is False
        client.wake()  # awake: nothing to do
        assert d.engine.calls.count("wake:None") == 1


def test_sleep_on_a_server_without_sleep_mode_is_a_400():
    with Double(SleepyEngine(sleep_mode=False), Settings()) as d:
        client = VLLMClient(d.url)
        assert client.health()["sleep_mode"] is False
        with pytest.raises(ServerError, match="without --enable-sleep-mode"):
            client.sleep()

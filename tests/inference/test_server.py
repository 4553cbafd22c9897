"""vf-vllm against a real vLLM server (tiny tied Llama, CPU, loopback).

One server for the module, started with LoRA on so full-weight and adapter
updates share it (a start costs ~40 s on 2 cores). Each test that compares with
transformers pushes the weights it compares against first, so tests do not
depend on each other's order; the restart test runs next to last because it
replaces the server, and the kill test last because it ends it.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import tempfile
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("vllm")
torch = pytest.importorskip("torch")

from tests.doubles.vllm_server import bound_unix_sockets, serve  # noqa: E402
from verifiers.errors import ServerTimeoutError, ServerUnreachableError, WeightSyncError  # noqa: E402
from verifiers.inference.client.vllm_client import VLLMClient  # noqa: E402
from verifiers.utils import owned_files  # noqa: E402
from verifiers.utils.backoff import Backoff, poll_until  # noqa: E402

TOL = 1e-3  # fp32 server vs fp32 transformers, per sampled token


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    flags = ("--max-num-seqs", "16", "--enable-lora", "--max-lora-rank", "8")
    flags += ("--disable-log-requests",)  # retired flag: must be accepted with a warning
    with serve(tiny_model_dir, tmp_path_factory.mktemp("vf-vllm"), *flags) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    with contextlib.closing(server.client()) as c:
        yield c


@pytest.fixture(scope="module")
def base_model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32).eval()


def perturbed(model, seed: int, scale: float = 0.05):
    """A copy of ``model`` with every weight moved by Gaussian noise (the tied pair moves together)."""
    out = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in out.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)
    return out


def sample(
    client: VLLMClient,
    model: str,
    prompt: str = "The quick brown fox",
    n: int = 8,
    chat: bool = False,
    temperature: float = 1.0,
):
    """``(prompt_ids, completion_ids, sampling logprobs)`` of one sampled completion."""
    extra = {"return_token_ids": True, "return_tokens_as_token_ids": True}
    if chat:
        out = client.sync_openai.chat.completions.create(
            model=model, messages=[{"role": "user", "content": prompt}], max_tokens=n, logprobs=True,
            temperature=temperature, extra_body=extra,
        )  # fmt: skip
        ch = out.choices[0]
        return out.prompt_token_ids, ch.token_ids, [t.logprob for t in ch.logprobs.content]
    out = client.sync_openai.completions.create(
        model=model, prompt=prompt, max_tokens=n, logprobs=1, temperature=temperature, extra_body=extra
    )
    ch = out.choices[0]
    return ch.prompt_token_ids, ch.token_ids, ch.logprobs.token_logprobs


def max_logprob_gap(hf_model, prompt_ids, completion_ids, server_logprobs, temperature: float = 1.0) -> float:
    with torch.no_grad():
        logits = hf_model(torch.tensor([list(prompt_ids) + list(completion_ids)])).logits[0]
    lp = torch.log_softmax(logits.float() / temperature, -1)
    start = len(prompt_ids) - 1
    hf = [lp[start + i, t].item() for i, t in enumerate(completion_ids)]
    return max(abs(a - b) for a, b in zip(hf, server_logprobs, strict=True))


def model_name(client: VLLMClient) -> str:
    return client.health()["model"]


@pytest.mark.server
def test_chat_and_completion_carry_token_data(client, tiny_model_dir):
    name = model_name(client)
    prompt_ids, ids, lps = sample(client, name, chat=True)
    assert prompt_ids and len(ids) == len(lps) == 8 and all(lp <= 0 for lp in lps)
    out = client.sync_openai.chat.completions.create(
        model=name, messages=[{"role": "user", "content": "hi"}], max_tokens=4, logprobs=True,
        extra_body={"return_token_ids": True, "return_tokens_as_token_ids": True},
    )  # fmt: skip
    ch = out.choices[0]
    assert ch.message.content and ch.finish_reason in ("length", "stop")
    assert [int(t.token.removeprefix("token_id:")) for t in ch.logprobs.content] == ch.token_ids
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    templated = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    templated = templated if isinstance(templated, list) else templated["input_ids"]
    assert out.prompt_token_ids == list(templated)

    prompt_ids, ids, lps = sample(client, name, prompt="Hello there", n=5)
    assert prompt_ids == tok("Hello there")["input_ids"] and len(ids) == len(lps) == 5


@pytest.mark.server
def test_logprobs_match_transformers(client, base_model):
    client.update_weights(base_model.named_parameters())
    name = model_name(client)
    for chat in (False, True):
        gap = max_logprob_gap(base_model, *sample(client, name, chat=chat))
        assert gap < TOL, f"chat={chat}: server log-probs differ from transformers by {gap}"
    # Below temperature 1 the server reports the temperature-scaled policy that
    # sampled (vf-vllm's default --logprobs-mode), which is what the trainer scores.
    gap = max_logprob_gap(base_model, *sample(client, name, temperature=0.7), temperature=0.7)
    assert gap < TOL, f"temperature 0.7: server log-probs differ from logits/0.7 by {gap}"


@pytest.mark.server
def test_full_update_makes_server_match_new_weights(client, base_model):
    name = model_name(client)
    before = client.health()["weight_version"]
    for seed, kind in ((1, "auto"), (2, "http")):
        new = perturbed(base_model, seed)
        version = client.update_weights(new.named_parameters(), transport_name=kind)
        assert client.health()["weight_version"] == version > before
        gap = max_logprob_gap(new, *sample(client, name))
        assert gap < TOL, f"after a {kind} update the server is off by {gap} (tied lm_head not repacked?)"
        assert max_logprob_gap(base_model, *sample(client, name)) > 10 * TOL  # the weights really changed
        before = version
    health = client.health()
    assert not health["paused"] and not health["update_in_progress"]


@pytest.mark.server
def test_update_while_generating_lets_requests_finish(client, base_model):
    name, done = model_name(client), {}

    def generate():
        out = client.sync_openai.completions.create(
            model=name, prompt="Once", max_tokens=120, extra_body={"ignore_eos": True}
        )
        done["tokens"] = out.usage.completion_tokens

    thread = threading.Thread(target=generate)
    thread.start()
    time.sleep(0.3)
    client.update_weights(perturbed(base_model, 3).named_parameters(), timeout=60)
    thread.join(60)
    assert done.get("tokens") == 120


@pytest.mark.server
def test_lora_swap_makes_server_match_adapter(server, client, base_model):
    from peft import LoraConfig, get_peft_model

    client.update_weights(base_model.named_parameters())
    cfg = LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], lora_dropout=0.0
    )
    peft_model = get_peft_model(copy.deepcopy(base_model), cfg)
    g = torch.Generator().manual_seed(7)
    before = set(adapter_folders())
    for step, kind in enumerate(("auto", "auto", "http")):
        with torch.no_grad():
            for n, p in peft_model.named_parameters():
                if "lora_" in n:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.3)
        name = client.update_lora(peft_model, name="policy", transport_name=kind)
        assert name == client.lora_name == "policy"
        gap = max_logprob_gap(peft_model, *sample(client, name))
        assert gap < TOL, f"swap {step} ({kind}): adapter log-probs off by {gap}"
        # One adapter folder, the served one, held open by the server (a SIGKILL drops that
        # hold, and the next start removes the folder); the trainer has let it go.
        (served,) = set(adapter_folders()) - before
        assert served in open_paths(server.proc.pid) and str(served) not in owned_files.held()
    assert client.health()["lora"]["adapters"] == {"policy": 3}
    # the base model is still served without the adapter
    assert max_logprob_gap(base_model, *sample(client, model_name(client))) < TOL


@pytest.mark.server
def test_bad_updates_get_clear_errors_and_serving_goes_on(client, base_model):
    params = dict(base_model.named_parameters())
    cases = {
        "shape": ({**params, "model.norm.weight": torch.zeros(3)}, "model.norm.weight"),
        "unknown": (
            {**params, "model.nope.weight": torch.zeros(64)},
            "unknown parameter 'model.nope.weight'",
        ),
        "partial fused": ({"model.layers.0.self_attn.q_proj.weight": torch.zeros(64, 64)}, "k_proj"),
    }
    for case, (tensors, needle) in cases.items():
        with pytest.raises(WeightSyncError) as info:
            client.update_weights(tensors)
        err = info.value
        assert err.stage == "validate" and err.status == 400 and needle in str(err), case
    with pytest.raises(WeightSyncError, match="adapter_config.json"):
        client.update_lora("/nonexistent/adapter")
    health = client.health()
    assert not health["paused"] and not health["update_in_progress"]
    assert sample(client, model_name(client))[1]


@pytest.mark.server
def test_update_never_committed_expires_and_generation_resumes(client, base_model):
    import requests

    meta = [{"name": "model.norm.weight", "shape": [64], "dtype": "float32"}]
    body = {"update_id": "stuck", "version": 99, "transport": "shm", "params": meta, "timeout_s": 1.0}
    r = requests.post(client.server_url + "/vf/weights/begin", json=body, timeout=30)
    assert r.status_code == 200, r.text
    assert client.health()["update_in_progress"]
    time.sleep(1.5)
    health = client.health()
    assert not health["update_in_progress"] and not health["paused"] and "stuck" in health["last_error"]
    r = requests.post(client.server_url + "/vf/weights/commit", json={"update_id": "stuck"}, timeout=30)
    assert r.status_code == 410 and r.json()["error"]["stage"] == "handshake"
    assert sample(client, model_name(client))[1]


def adapter_folders() -> list[Path]:
    """The adapter folders vf wrote on this machine (``vf-lora-<pid>-<id>``)."""
    from verifiers.inference.wire import is_transfer_name, transfer_dir

    return [p for p in transfer_dir().glob("vf-lora-*") if is_transfer_name(p, "lora")]


def open_paths(pid: int) -> set[Path]:
    """The files and folders process ``pid`` holds open."""
    paths = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            paths.add(Path(os.readlink(fd)))
    return paths


@pytest.mark.server
def test_restart_is_detected_and_client_recovers(server, client, base_model):
    # What vLLM leaves in the temp dir goes with the server: its engine sockets live in a
    # directory of the server's own, and its rendezvous file (vLLM 0.32 logs it; 0.26 uses TCP).
    (sockets,) = {path.parent for path in bound_unix_sockets(server.proc.pid)}
    assert sockets.name.startswith("vf-vllm-ipc-") and Path(tempfile.gettempdir()) == sockets.parent
    rendezvous = {Path(m) for m in re.findall(r"file://(\S*/vllm_dist_[0-9a-f]+)", server.tail(10**7))}
    assert all(path.exists() for path in rendezvous)
    # Its shared memory is listed in that folder, for the next start should this server be killed.
    shm = [Path(p) for p in (sockets / "leftovers").read_text().split() if p.startswith("/dev/shm/")]
    assert {p.name[:4] for p in shm} == {"psm_", "sem."} and all(p.exists() for p in shm), shm
    served = set(adapter_folders()) & open_paths(server.proc.pid)  # the LoRA test's, in a module run
    server.stop()
    assert not sockets.exists(), sorted(sockets.iterdir())
    assert not [p for p in served if p.exists()]
    assert not [path for path in rendezvous if path.exists()]
    # The server's resource tracker removes its shared memory last: allow it 10 s.
    gone = poll_until(lambda: None if any(p.exists() for p in shm) else True, Backoff(0.1, 0.5, timeout=10))
    assert gone, [p for p in shm if p.exists()]
    with pytest.raises(ServerUnreachableError) as info:
        client.wait_until_ready(timeout=2)
    assert server.url in str(info.value)
    with pytest.raises((ServerUnreachableError, ServerTimeoutError, WeightSyncError)):
        client.update_weights(base_model.named_parameters(), timeout=5)
    # An adapter folder nobody holds (its server was killed) goes at the next start.
    from verifiers.inference.wire import new_name, transfer_dir

    abandoned = transfer_dir() / new_name("lora")
    abandoned.mkdir()
    hour_ago = time.time() - 3600  # past the age below which nothing is removed
    os.utime(abandoned, (hour_ago, hour_ago))
    start = server.log.stat().st_size
    server.start()
    assert client.wait_until_ready(timeout=240)["weight_version"] == 0  # a fresh server
    assert not abandoned.exists()
    client.update_weights(perturbed(base_model, 4).named_parameters())
    assert sample(client, model_name(client))[1]
    # vf's own INFO lines reach the server's log: the serving line, and one per weight update.
    log = server.log.read_text(errors="replace")[start:]
    assert "(trainer routes under /vf)" in log and re.search(r"weight update \S+ \(v\d+\) committed", log), (
        log[-3000:]
    )


@pytest.mark.server
def test_a_server_killed_alone_takes_its_engine_processes_with_it(server):
    """``kill -9`` of vf-vllm's own pid, not its process group (a user's kill, the OOM killer):
    vLLM's engine core and worker, which hold the model and its KV cache (on a GPU, the GPU's
    memory), end too instead of running on unowned (verifiers/inference/server/parent_watch.py)."""
    import signal

    import psutil  # a vLLM dependency

    from verifiers.inference.server.files import remove_abandoned_ipc_dirs
    from verifiers.inference.server.parent_watch import still_running

    engine = psutil.Process(server.proc.pid).children(recursive=True)  # multiprocessing's tracker too
    assert "VLLM::EngineCore" in {p.name() for p in engine}, engine

    os.kill(server.proc.pid, signal.SIGKILL)
    server.proc.wait(30)
    assert poll_until(lambda: not still_running(engine) or None, Backoff(0.1, 0.5, timeout=60)), (
        still_running(engine)
    )
    remove_abandoned_ipc_dirs(tempfile.gettempdir())  # its socket folder, as its next start would


def test_cli_defaults_and_retired_flags(capsys):
    from verifiers.inference.server.main import EXTENSION, drop_retired_flags, parse_args

    argv = [
        "--model",
        "m",
        "--disable-log-requests",
        "--swap-space",
        "4",
        "--multi-step-stream-outputs",
        "false",
    ]
    kept, warnings = drop_retired_flags(argv, known=set())
    assert kept == ["--model", "m"] and len(warnings) == 3
    assert all(w.count("\n") == 0 and "retired" in w for w in warnings)
    assert drop_retired_flags(["--disable-log-requests"], known={"--disable-log-requests"})[0] == [
        "--disable-log-requests"
    ]  # a flag vLLM knows again passes through

    args, settings = parse_args(["m", "--disable-log-requests", "--guided-decoding-backend=xgrammar"])
    err = capsys.readouterr().err
    assert "--disable-log-requests" in err and "--guided-decoding-backend" in err
    assert args.model == "m" and args.host == "127.0.0.1" and settings.loopback
    assert args.worker_extension_cls == EXTENSION and settings.admin_token is None
    assert args.logprobs_mode == "processed_logprobs"  # the temperature-scaled policy the trainer scores
    assert args.enable_chunked_prefill is False  # CPU: seeded requests fail with chunked prompts
    args, _ = parse_args(["m", "--logprobs-mode", "raw_logprobs", "--enable-chunked-prefill"])
    assert args.logprobs_mode == "raw_logprobs" and args.enable_chunked_prefill is True
    args, settings = parse_args(["--model", "m", "--host", "0.0.0.0", "--admin-token", "t"])
    assert not settings.loopback and settings.admin_token == "t"


def test_engine_sockets_get_a_directory_of_their_own_unless_the_user_chose_one(short_tmp, monkeypatch):
    from verifiers.inference.server.files import private_ipc_dir

    monkeypatch.setattr(tempfile, "tempdir", str(short_tmp))  # the user's temp dir
    env: dict[str, str] = {}
    with private_ipc_dir(env) as path:
        assert env == {"VLLM_RPC_BASE_PATH": path} and Path(path).parent == short_tmp
        (Path(path) / "engine-socket").touch()  # what vLLM binds there
    assert env == {} and list(short_tmp.iterdir()) == []
    env = {"VLLM_RPC_BASE_PATH": str(short_tmp)}  # the user's: used as is, never deleted
    with private_ipc_dir(env) as path:
        assert path is None and env == {"VLLM_RPC_BASE_PATH": str(short_tmp)}
    assert short_tmp.is_dir()
    long_tmp = short_tmp / ("d" * (107 - len(str(short_tmp)) - 40))  # a socket path under it would not fit
    long_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long_tmp))
    with private_ipc_dir(env := {}) as path:
        assert path is None and env == {}  # vLLM's default (the temp dir itself) stays


# A vf-vllm stand-in: its socket folder (private_ipc_dir), and a rendezvous file and shared memory
# (a segment and a named semaphore, as vLLM's engine makes) listed in it as the real server lists them.
SOCKET_FOLDER_OWNER = """
import multiprocessing, sys, tempfile, time
from multiprocessing import shared_memory
from pathlib import Path
from verifiers.inference.server.files import note_leftovers, private_ipc_dir, shared_memory_of_this_server
tempfile.tempdir = sys.argv[1]
with private_ipc_dir({}) as folder:
    rendezvous = Path(sys.argv[1], "vllm_dist_" + Path(folder).name[-8:].replace("_", "0"))
    rendezvous.touch()
    (Path(folder) / "engine-socket").touch()
    segment = shared_memory.SharedMemory(create=True, size=4096)
    lock = multiprocessing.get_context("spawn").Lock()  # spawn: its name stays until the end
    note_leftovers(folder, [str(rendezvous), *shared_memory_of_this_server()])
    shm = ["/dev/shm/" + segment.name, "/dev/shm/sem." + lock._semlock.name.lstrip("/")]
    print(folder, rendezvous, *shm, flush=True)
    time.sleep(600)
"""


def test_a_killed_servers_socket_folder_rendezvous_file_and_shared_memory_go_at_the_next_start(
    short_tmp, monkeypatch
):
    import signal
    import subprocess
    import sys

    from verifiers.inference.server.files import private_ipc_dir

    root = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "-c", SOCKET_FOLDER_OWNER, str(short_tmp)]
    # Each in a group of its own, with its resource tracker: killed together, as a crash ends a server.
    owners = [
        subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, text=True, start_new_session=True)
        for _ in range(2)
    ]
    dead_shm: list[Path] = []
    live_shm: list[Path] = []
    try:
        (dead, dead_file, *dead_shm), (live, live_file, *live_shm) = (
            list(map(Path, p.stdout.readline().split())) for p in owners
        )
        listed = (dead / "leftovers").read_text().split()
        assert listed == [str(dead_file), *sorted(map(str, dead_shm))]  # the semaphore found by its inode
        os.killpg(owners[0].pid, signal.SIGKILL)
        owners[0].wait(10)
        foreign = short_tmp / "vllm_dist_0123abcd"  # a plain `vllm serve`'s: listed nowhere
        foreign.touch()
        hour_ago = time.time() - 3600  # past the age below which nothing is removed
        for path in (dead, live):
            os.utime(path, (hour_ago, hour_ago))
        time.sleep(0.5)  # the killed group's resource tracker is gone too: nothing removes them but us
        assert dead.is_dir() and dead_file.exists() and all(p.exists() for p in dead_shm)
        monkeypatch.setattr(tempfile, "tempdir", str(short_tmp))
        with private_ipc_dir({}) as mine:
            assert not dead.exists() and not dead_file.exists()
            assert not [p for p in dead_shm if p.exists()]
            assert live.is_dir() and live_file.exists() and foreign.exists() and Path(mine).is_dir()
            assert all(p.exists() for p in live_shm)
        assert not Path(mine).exists()
    finally:
        for p in owners:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)
            p.stdout.close()
        for path in (*dead_shm, *live_shm):  # the live owner's, and ours if the test failed
            path.unlink(missing_ok=True)


def test_a_killed_servers_list_removes_only_what_vllm_makes(short_tmp):
    """The list is data: a path not named as vLLM names its files, or elsewhere, or a link, stays."""
    import secrets

    from verifiers.inference.server.files import IPC_PREFIX, note_leftovers, remove_abandoned_ipc_dirs

    tag = secrets.token_hex(4)
    (short_tmp / "sub").mkdir()
    kept = [
        Path(f"/dev/shm/vf-test-other-{tag}"),  # /dev/shm, but not a name vLLM uses
        short_tmp / "sub" / f"vllm_dist_{tag}",  # a rendezvous name, not beside the folder
        short_tmp / f"psm_{tag}",  # a segment name, not in /dev/shm
        Path(f"/dev/shm/psm_{tag}-target"),  # what the link below points to (not listed itself)
    ]
    link = Path(f"/dev/shm/psm_{tag}")
    gone = [short_tmp / f"vllm_dist_{tag}", Path(f"/dev/shm/sem.mp-{tag}")]
    folder = short_tmp / f"{IPC_PREFIX}{tag}"  # no lock: its server is gone
    folder.mkdir()
    try:
        for path in (*kept, *gone):
            path.write_bytes(b"x")
        link.symlink_to(kept[-1])
        note_leftovers(str(folder), [str(p) for p in (*kept[:-1], link, *gone)])
        hour_ago = time.time() - 3600
        os.utime(folder, (hour_ago, hour_ago))
        remove_abandoned_ipc_dirs(str(short_tmp))
        assert not folder.exists() and not [p for p in gone if p.exists()]
        assert [p for p in kept if not p.exists()] == [] and link.is_symlink()
    finally:
        for path in (*kept, *gone, link):
            path.unlink(missing_ok=True)


def test_the_workers_name_their_rendezvous_file_only_when_it_is_vllms():
    from verifiers.inference.server.worker import WeightSyncExtension

    worker = WeightSyncExtension()
    assert worker.vf_rendezvous_file() is None  # no attribute: not a vLLM worker
    for method, expected in [
        ("file:///tmp/vllm_dist_0a1b", "/tmp/vllm_dist_0a1b"),
        ("tcp://127.0.0.1:29500", None),
        ("file:///home/me/my-store", None),  # someone else's file: never removed
    ]:
        worker.distributed_init_method = method
        assert worker.vf_rendezvous_file() == expected


def test_cli_sizes_the_cpu_kv_cache_unless_the_user_does(tiny_model_dir, capsys, monkeypatch):
    """On CPU: no memory flag -> --max-num-seqs × --max-model-len; any user size (or the env var) stands."""
    from verifiers.inference.server.main import parse_args

    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    base = ["--model", str(tiny_model_dir), "--max-model-len", "512", "--dtype", "float32"]
    args, _ = parse_args([*base, "--max-num-seqs", "8"])
    per_token = 2 * 2 * 2 * 32 * 4  # K and V × 2 layers × 2 KV heads × head size 32 × fp32
    assert args.kv_cache_memory_bytes == 8 * 512 * per_token
    line = [x for x in capsys.readouterr().err.splitlines() if "KV cache" in x]
    assert line == [
        "vf-vllm: KV cache 4.0 MiB for 4096 tokens (8 sequences × 512 tokens, 1.0 KiB per token); "
        "--kv-cache-memory-bytes or --gpu-memory-utilization set it yourself"
    ]
    args, _ = parse_args([*base, "--kv-cache-tokens", "10000"])
    assert args.kv_cache_memory_bytes == 10240 * per_token  # whole 256-token granules
    assert "(--kv-cache-tokens 10000, 1.0 KiB per token)" in capsys.readouterr().err
    for own in (["--gpu-memory-utilization", "0.5"], ["--kv-cache-memory-bytes", "1000000"]):
        args, _ = parse_args([*base, *own])
        assert args.kv_cache_memory_bytes in (None, 1000000)
    assert "KV cache" not in capsys.readouterr().err
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    assert parse_args(base)[0].kv_cache_memory_bytes is None  # vLLM's legacy variable decides

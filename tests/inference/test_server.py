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

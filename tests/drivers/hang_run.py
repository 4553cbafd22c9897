"""A short multi-process GRPO run with one fault injected; ``tests/training/lifecycle/test_rank_hangs.py``
launches it (2 DDP processes over gloo) and checks that every process ends, or carries on,
within the bound and what the output says.

    ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2 tests/drivers/hang_run.py \\
        --model DIR --out DIR [--crash-rank 1 --crash-step 2 | --outage-step 2 --outage-s 5 | --tool]

The main process serves the rollouts itself (a fake OpenAI server in a thread) and can take
it down: while "down", every request's connection is closed unanswered, as a dead server's
would be (``--outage-s -1``: for good). ``--tool`` trains a tool environment whose one tool
never returns (``--tool-timeout 0``: no limit). Each process prints
``hang_run rank R: done, N steps`` when it finishes, and a fault's own line when it fails
(``error: ...``, as the CLIs print a ``VerifiersError``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # `tests.doubles` from the checkout

from tests.doubles.openai_server import FakeServer, _Handler, make_client  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--crash-rank", type=int)
    p.add_argument("--crash-step", type=int, default=2)
    p.add_argument("--outage-step", type=int, help="take the server down when this step begins")
    p.add_argument("--outage-request", type=int, help="take it down on this chat request (mid-batch)")
    p.add_argument("--outage-s", type=float, default=5.0, help="seconds down; -1: for good")
    p.add_argument(
        "--tool",
        choices=("async", "sync"),
        help="a tool environment whose (async or sync) tool never returns",
    )
    p.add_argument("--tool-timeout", type=float, default=2.0, help="ToolEnv.tool_timeout (0: None)")
    p.add_argument("--server-timeout", type=float, default=10.0, help="vllm_server_timeout")
    p.add_argument("--generation-timeout", type=float, default=10.0, help="async_generation_timeout")
    p.add_argument("--sync-timeout", type=float, default=10.0, help="sync_weights_timeout")
    p.add_argument("--ddp-timeout", type=int, help="ddp_timeout (None: derived)")
    return p.parse_args(argv)


class _DroppingHandler(_Handler):
    def handle_one_request(self) -> None:
        if self.fake.down:
            self.close_connection = True  # nothing read, nothing sent: the client sees a dead server
            return
        super().handle_one_request()


class OutageServer(FakeServer):
    """A fake server that can be taken down (connections closed unanswered) and brought back."""

    down = False

    def start(self) -> OutageServer:
        super().start()
        self._httpd.RequestHandlerClass = type("Handler", (_DroppingHandler,), {"fake": self})
        return self

    def outage(self, seconds: float) -> None:
        self.down = True
        print(f"hang_run: server down{f' for {seconds:g} s' if seconds >= 0 else ' for good'}", flush=True)
        if seconds >= 0:
            threading.Timer(seconds, self._back).start()

    def _back(self) -> None:
        self.down = False
        print("hang_run: server back", flush=True)


def reply(request: dict) -> str | dict:
    """A tool call on the first turn of a tool rollout, else a few characters; the server goes
    down after answering the ``--outage-request``-th request."""
    with COUNT_LOCK:
        COUNT[0] += 1
        if COUNT[0] == OUTAGE["request"]:
            SERVER[0].outage(OUTAGE["seconds"])
    messages = request.get("messages") or []
    if request.get("tools") and messages and messages[-1].get("role") != "tool":
        return {"content": "", "tool_calls": [{"name": "wait_forever", "arguments": {}}]}
    return "abcdefgh"[: 1 + len(str(messages)) % 8]


COUNT, COUNT_LOCK = [0], threading.Lock()
OUTAGE: dict = {"request": None, "seconds": 5.0}
SERVER: list[OutageServer] = []


class FakeClient:
    """The trainer's client: OpenAI calls go to the fake server; health, ping and weight pushes
    answer only while it is up (a push to a down server fails like vf-vllm's)."""

    def __init__(self, server: OutageServer):
        self.server = server
        self._oai = make_client(server.url)
        self.syncs = 0

    def __getattr__(self, name):
        return getattr(self._oai, name)

    def _check(self) -> None:
        from verifiers.errors import ServerUnreachableError

        if self.server.down:
            raise ServerUnreachableError("could not connect to the model server", url=self.server.url)

    def health(self):
        self._check()
        return {"model": "fake-model", "status": "ready"}

    def ping(self, timeout: float = 2.0):
        return None if self.server.down else {"status": "ready"}

    def lost_weights(self, health) -> bool:
        return True

    def wait_for_server(self, timeout: float = 300.0):
        from verifiers.errors import ServerUnreachableError

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if (health := self.ping()) is not None:
                return health
            time.sleep(0.5)
        raise ServerUnreachableError(
            f"the model server did not come back within {timeout:.0f} s", url=self.server.url
        )

    def update_weights(self, named_tensors, **_):
        self._check()
        self.syncs += 1

    def update_lora(self, tensors, name="vf-lora", config=None):
        self._check()

    def reset_prefix_cache(self):
        self._check()
        return True


async def wait_forever() -> str:
    """A tool that never returns (within the test)."""
    await asyncio.sleep(3600)
    return "never"


def wait_forever_sync() -> str:
    """The same as a plain function: it runs in a thread, which nothing can stop."""
    time.sleep(3600)
    return "never"


def length_reward(completion, **_) -> float:
    return min(len(str(completion)), 200) / 100.0


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    import datasets
    from transformers import TrainerCallback

    import verifiers as vf
    from verifiers.errors import VerifiersError

    server = OutageServer(reply=reply)
    SERVER.append(server)
    OUTAGE.update(request=a.outage_request, seconds=a.outage_s)
    args = vf.GRPOConfig(
        output_dir=str(Path(a.out) / "trainer"),
        report_to="none",
        max_steps=a.steps,
        per_device_train_batch_size=4,
        num_generations=4,
        learning_rate=1e-3,
        max_tokens=128,  # room for a tool call
        max_seq_len=512,
        max_prompt_length=448,  # the tool's schema goes into the prompt
        logging_steps=1,
        save_strategy="no",
        num_batches_ahead=0,
        importance_sampling_mask_low=None,
        importance_sampling_mask_high=None,
        vllm_server_timeout=a.server_timeout,
        async_generation_timeout=a.generation_timeout,
        sync_weights_timeout=a.sync_timeout,
        ddp_timeout=a.ddp_timeout,
        seed=0,
    )
    rank = args.process_index
    model, tokenizer = vf.get_model_and_tokenizer(a.model)
    rows = {"question": [f"Count to {i}." for i in range(8)], "answer": [""] * 8}
    data = datasets.Dataset.from_dict(rows)
    rubric = vf.Rubric(funcs=[length_reward])
    if a.tool:
        tool = wait_forever if a.tool == "async" else wait_forever_sync
        tool.__name__ = "wait_forever"  # the name the fake server calls
        env = vf.ToolEnv(dataset=data, rubric=rubric, tools=[tool], max_turns=2)
        env.tool_timeout = a.tool_timeout or None
    else:
        env = vf.SingleTurnEnv(dataset=data, rubric=rubric)
    client = FakeClient(server.start()) if rank == 0 else None

    class Faults(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            step = state.global_step + 1
            if a.crash_rank == rank and step == a.crash_step:
                raise RuntimeError(f"injected failure on rank {rank} at step {step}")
            if a.outage_step == step and rank == 0:
                server.outage(a.outage_s)

    trainer = vf.GRPOTrainer(
        model=model, processing_class=tokenizer, env=env, args=args, client=client, callbacks=[Faults()]
    )
    print(f"hang_run rank {rank}: ddp_timeout={args.ddp_timeout}", flush=True)
    try:
        trainer.train()
    except VerifiersError as err:
        print(f"error: rank {rank}: {err}", flush=True)
        sys.exit(err.exit_code)
    restarts = sum(h.get("errors/server_restarts", 0) for h in trainer.state.log_history)
    print(f"hang_run rank {rank}: done, {trainer.state.global_step} steps, {restarts:g} outages", flush=True)


if __name__ == "__main__":
    main()

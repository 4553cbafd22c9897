"""Multi-turn and tool rollouts, trained: on-policy at step 0, every assistant token trained once.

SmolLM2-135M-Instruct against a real vf-vllm server, on the two bundled multi-turn
tasks: ``number-guess`` (the environment answers each guess; no tools) and
``calculator`` (Hermes tool calls through verifiers' tool template, tool results as
environment turns). The random tiny model cannot be used here: it never ends a turn
by itself and never calls a tool, and forcing either (``logit_bias``, structured
outputs) changes the server's sampling log-probs but not the trainer's.

For the first optimizer step of a fresh LoRA adapter (server and trainer hold the
same weights) the test checks, on what the trainer actually trains:

- every assistant token of every rollout has loss mask 1 exactly once, in order,
  with the server's sampling log-prob; no environment token (user/tool turns,
  template glue) has loss mask 1, whether a rollout is one sample or (after a
  template rewrite) one sample per turn;
- the importance ratio (trainer's log-prob over the sampling log-prob, over the
  loss tokens) is 1 within 1e-3 at its mean, min and max.

Two SmolLM2 runs plus one server start: about 3 minutes on 2 cores, so ``slow``.
"""

from __future__ import annotations

import contextlib

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import verifiers as vf  # noqa: E402
from tests.doubles.vllm_server import serve  # noqa: E402
from verifiers.training import trainer as trainer_module  # noqa: E402
from verifiers.training.generation import producer as producer_module  # noqa: E402

pytestmark = [pytest.mark.server, pytest.mark.slow]

TOL = 1e-3


@pytest.fixture(scope="module")
def smol_server(smollm2_model_dir, tmp_path_factory):
    flags = ("--max-num-seqs", "32", "--seed", "0")
    with serve(smollm2_model_dir, tmp_path_factory.mktemp("smol-vllm"), *flags, max_model_len=1024) as server:
        with contextlib.closing(server.client()) as client:
            yield client


def trained_tokens(train, rows: list[int]) -> tuple[list[int], list[float]]:
    """The loss-masked token ids and sampling log-probs of ``rows`` of a TrainBatch, in order."""
    ids, lps = [], []
    for b in rows:
        keep = train.loss_mask_BT[b].bool()
        ids += train.input_ids_BT[b][keep].tolist()
        lps += train.sampling_logprobs_BT[b][keep].tolist()
    return ids, lps


@pytest.mark.parametrize("env_id, max_tokens, turns", [("number-guess", 12, 3), ("calculator", 48, 2)])
def test_step0_is_on_policy_and_trains_each_assistant_token_once(
    env_id, max_tokens, turns, smollm2_model_dir, smol_server, tmp_path, monkeypatch
):
    captured = []
    prepare = trainer_module.prepare_batch

    def recording_prepare_batch(batch, train, *args, **kwargs):
        captured.append((batch, train))
        return prepare(batch, train, *args, **kwargs)

    monkeypatch.setattr(trainer_module, "prepare_batch", recording_prepare_batch)
    # Keep each rollout's turn tokens (the producer drops them from the states once processed).
    monkeypatch.setattr(producer_module, "lean_outputs", lambda outputs: outputs)
    env = vf.load_environment(env_id, seed=0)
    model, tokenizer = vf.get_model_and_tokenizer(str(smollm2_model_dir))
    args = vf.GRPOConfig(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        report_to="none",
        max_steps=1,
        num_generations=8,
        per_device_train_batch_size=8,
        gradient_accumulation_steps=2,  # 2 prompts x 8 rollouts
        max_tokens=max_tokens,
        max_seq_len=1024,  # nothing cut after sampling
        max_prompt_length=512,
        mask_truncated_completions=False,  # train every rollout, so every assistant token counts
        learning_rate=1e-4,
        beta=0.0,
        num_batches_ahead=0,
        save_strategy="no",
        logging_steps=1,
        seed=0,
    )
    trainer = vf.GRPOTrainer(
        model=model, processing_class=tokenizer, env=env, args=args,
        peft_config=vf.lora_defaults(r=8, alpha=16), client=smol_server,
    )  # fmt: skip
    trainer.train()

    ((batch, train),) = captured
    states, index = batch.outputs.state, batch.processed.rollout_index
    assert len(states) == 16 and all(s.get("error") is None for s in states)
    for r, state in enumerate(states):
        calls = state["turn_tokens"]  # one per model call
        sampled = [t for call in calls for t in call.completion_ids]
        sampled_lps = [lp for call in calls for lp in call.completion_logprobs]
        ids, lps = trained_tokens(train, [b for b, i in enumerate(index) if i == r])
        assert ids == sampled, f"rollout {r}: trained tokens are not its sampled tokens, once each"
        assert lps == pytest.approx(sampled_lps, abs=1e-6)
    turn_counts = [len(s["turn_tokens"]) for s in states]
    assert max(turn_counts) >= turns, turn_counts  # real multi-turn rollouts were trained
    if env_id == "calculator":  # and real tool calls, answered by the tool
        called = [s for s in states if any(m.get("tool_calls") for m in s["completion"])]
        assert called, "no rollout called the calculator"
        assert all(
            s["completion"][1]["role"] == "tool" for s in called if s["completion"][0].get("tool_calls")
        )

    (log,) = [h for h in trainer.state.log_history if "importance_ratio/mean" in h]
    for key in ("importance_ratio/mean", "importance_ratio/min", "importance_ratio/max"):
        assert abs(log[key] - 1.0) < TOL, (key, log[key])

"""Multi-process GRPO training on CPU: ``accelerate launch`` of ``dist_train.py`` over gloo.

- The loss normalization across processes, in-process: every loss type but ``bnpo``
  gives the same step gradient however the step is split into processes and micro-batches.
- Against a real vf-vllm server (tiny model, fp32; ``-m server``): 2-process DDP, 2-process
  DeepSpeed ZeRO-3 (``configs/zero3-cpu.yaml``) and ZeRO-3 + LoRA. After every weight sync
  the server's log-probs must equal the trainer's, which proves the gathered weights.
- 1 process vs 2 processes on the same batches (fake server: deterministic rollouts):
  same losses, gradient norms and updated weights within fp32 tolerance.
- Full fine-tuning with a KL term under ZeRO-3 (``beta > 0``, no LoRA; 2 processes and 1):
  the reference is its own sharded DeepSpeed engine; its log-probs equal one plain
  process's, every rank runs the same reference forwards, and its sync after each step
  follows ``ref = alpha * policy + (1 - alpha) * ref``.

Every launched run must exit 0, print its step lines, have only rank 0 talk to the
server, and have each rank train its own slice of every generation batch.

The default suite launches ZeRO-3 against vf-vllm, DDP against one process and ZeRO-3
with a reference model (2 processes) against one process (plus the server start); the
other layouts, loss types and model-first loads are ``slow``.

FSDP through accelerate does not run on CPU; it is checked on a GPU machine only.
DeepSpeed builds one C++ op (``deepspeed_shm_comm``) on its first use, about a minute,
cached under ``$TORCH_EXTENSIONS_DIR`` afterwards.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from tests.doubles.launch import command, run  # noqa: E402
from verifiers.training.batch.tensors import split_batch  # noqa: E402
from verifiers.training.loss.losses import (  # noqa: E402
    LOSS_TYPES,
    STEP_COUNTS,
    compute_loss,
    step_counts,
    step_loss_scale,
)

SCRIPT = Path(__file__).resolve().parents[1] / "drivers" / "dist_train.py"
TOL = 1e-3  # fp32 server vs fp32 trainer, per sampled token
STEPS = 2


# ---------------------------------------------------------------------------
# Loss normalization across processes (no processes started)


def step_objective(loss_type: str, tensors: dict, num_processes: int, grad_accum: int) -> torch.Tensor:
    """The objective whose gradient one optimizer step applies, as the trainer computes it.

    Each of ``P`` processes takes its slice of the step's rows (``split_batch``) in ``GA``
    micro-batches; the trainer scales each micro-batch loss by ``step_loss_scale``,
    ``transformers.Trainer`` divides it by ``GA`` and DDP / DeepSpeed average gradients
    over processes: the step objective is ``mean_p sum_m scale · loss_pm / GA``.
    """
    rows = list(range(len(tensors["advantages_B"])))
    parts = [split_batch(rows, num_processes=num_processes, process_index=p, num_micro_batches=grad_accum)
             for p in range(num_processes)]  # fmt: skip
    masks = [[tensors["loss_mask_BT"][r] for r in part] for part in parts]
    counts = step_counts(loss_type, masks, grad_accum)
    total = torch.zeros(())
    for part in parts:
        for r in part:
            t = {k: v[r] for k, v in tensors.items()}
            loss, _ = compute_loss(
                loss_type, t["logprobs_BT"], t["old_BT"], t["sampling_BT"], t["advantages_B"], t["loss_mask_BT"],
                max_completion_length=8, step_count=counts[0] if counts else None,
            )  # fmt: skip
            if counts:
                loss = loss * step_loss_scale(loss_type, grad_accum, num_processes)
            total = total + loss / grad_accum
    return total / num_processes


@pytest.mark.parametrize("loss_type", sorted(STEP_COUNTS))
def test_step_gradient_does_not_depend_on_the_process_split(loss_type):
    # 7 rows (uneven slices, as when a rollout is trained as one sample per turn), different
    # lengths, and a row without loss tokens: the cases where per-micro-batch means would differ.
    g = torch.Generator().manual_seed(0)
    B, T = 7, 8
    lengths = torch.tensor([8, 3, 0, 5, 1, 8, 6])
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    base = -2.0 + 0.3 * torch.randn(B, T, generator=g)
    tensors = {
        "old_BT": base,
        "sampling_BT": base + 0.05 * torch.randn(B, T, generator=g),
        "advantages_B": torch.randn(B, generator=g),
        "loss_mask_BT": mask,
    }
    ref_lp = base + 0.3 * torch.randn(B, T, generator=g)  # ratios beyond the clip range too
    results = {}
    for P, GA in [(1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (1, 7)]:
        lp = ref_lp.clone().requires_grad_(True)
        objective = step_objective(loss_type, {**tensors, "logprobs_BT": lp}, P, GA)
        objective.backward()
        results[(P, GA)] = (objective.detach(), lp.grad)
    loss_1, grad_1 = results[(1, 1)]
    assert grad_1.abs().sum() > 0
    for layout, (loss, grad) in results.items():
        torch.testing.assert_close(loss, loss_1, rtol=1e-5, atol=1e-7, msg=f"{loss_type} {layout}")
        torch.testing.assert_close(grad, grad_1, rtol=1e-5, atol=1e-7, msg=f"{loss_type} {layout}")


def test_every_loss_type_but_bnpo_is_step_normalized():
    # bnpo is by definition the token mean of one micro-batch (dapo is its step-wide version).
    assert set(LOSS_TYPES) - set(STEP_COUNTS) == {"bnpo"}
    assert step_counts("bnpo", [[torch.ones(2, 3)]], 1) == []
    assert step_loss_scale("bnpo", 4, 2) == 1.0 and step_loss_scale("dapo", 4, 2) == 8.0


def test_deepspeed_launch_with_use_cpu_is_refused(monkeypatch, tmp_path):
    # accelerate would silently skip DeepSpeed and train a ZeRO-3-partitioned model as plain DDP.
    import verifiers as vf
    from verifiers.errors import ConfigError

    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    with pytest.raises(ConfigError, match="ignore the DeepSpeed config"):
        vf.GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none")


# ---------------------------------------------------------------------------
# Launching runs


def launch(kind: str, out: Path, *script_args: str, timeout: float = 600) -> tuple[str, list[dict]]:
    """Run ``dist_train.py`` as ``kind``: ``single`` (a plain python process), ``ddp`` (2),
    ``zero3`` (2) or ``zero3-1`` (ZeRO-3 in one process), under ``accelerate launch``; its output
    and rank records."""
    if kind == "single":
        cmd, env = command("single", launcher=None)
    else:
        layout, processes = ("zero3", 1) if kind == "zero3-1" else (kind, None)
        cmd, env = command(layout, "accelerate", processes)
    rc, text, _ = run([*cmd, str(SCRIPT), "--out", str(out), *script_args], env, timeout, f"the {kind} run")
    assert rc == 0, f"{kind} run failed (exit {rc}):\n{text[-6000:]}"
    world = 1 if kind in ("single", "zero3-1") else 2
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]
    check_run(text, ranks, kind)
    return text, ranks


def check_run(text: str, ranks: list[dict], kind: str) -> None:
    """What every launched run must show: its steps, rank-0-only server traffic, one slice per rank."""
    world = len(ranks)
    for r, rec in enumerate(ranks):
        assert rec["rank"] == r and rec["world_size"] == world and rec["global_step"] == STEPS
        assert f"dist_train rank {r}/{world}: done, {STEPS} steps" in text
        assert rec["zero3"] == kind.startswith("zero3")
    # Trainer's per-step log lines (printed by rank 0 only) and its history.
    assert text.count("{'loss': ") == STEPS, text[-3000:]
    steps = [h for h in ranks[0]["log_history"] if "loss" in h and "reward" in h]
    assert [h["step"] for h in steps] == list(range(1, STEPS + 1))
    assert all(math.isfinite(h["loss"]) and math.isfinite(h["grad_norm"]) for h in steps)
    # Generation, weight pushes and the log-prob probe: rank 0 only.
    assert ranks[0]["server_connections"] > 0
    assert [rec["server_connections"] for rec in ranks[1:]] == [0] * (world - 1)
    # Every rank received the same generation batches and trained its own contiguous slice.
    batches = ranks[0]["global_batches"]
    assert len(batches) == STEPS and all(rec["global_batches"] == batches for rec in ranks)
    slices = []
    for r, rec in enumerate(ranks):
        mine = [row for b in batches for row in split_batch(b, num_processes=world, process_index=r,
                                                              num_micro_batches=1)[0]]  # fmt: skip
        assert [row for micro in rec["trained"] for row in micro] == mine
        slices.append(mine)
    if world > 1:
        assert slices[0] != slices[1]


def check_zero3(ranks: list[dict], full_weights: bool) -> None:
    """Parameters really sharded; weight sync gathers at most 8 tensors, never the whole model."""
    for rec in ranks:
        assert rec["zero3"] and rec["local_numel"] < 0.6 * rec["model_numel"], rec["local_numel"]
        gathers = rec["gathers"]
        assert gathers and max(n for n, _ in gathers) <= 8
        assert max(numel for _, numel in gathers) < rec["model_numel"]
        if full_weights:  # every parameter once per sync: the initial one and one per step
            assert sum(n for n, _ in gathers) == (STEPS + 1) * rec["num_params"]


# ---------------------------------------------------------------------------
# Against a real vf-vllm server


@pytest.fixture(scope="module")
def vllm_url(lora_vllm_server):
    """The training tests' vf-vllm (tests/training/conftest.py), shared with test_trainer.py."""
    return lora_vllm_server.url


def check_logprobs(ranks: list[dict]) -> None:
    gaps = ranks[0]["logprob_gaps"]
    print("server vs trainer max |logprob gap| after each step:", gaps)
    assert len(gaps) == STEPS and max(gaps) < TOL, gaps


@pytest.mark.server
@pytest.mark.slow  # the default suite runs DDP in test_two_processes_match_one_process
def test_ddp_two_processes_against_vllm(tiny_model_dir, vllm_url, tmp_path):
    _, ranks = launch(
        "ddp", tmp_path, "--server", vllm_url, "--model", str(tiny_model_dir), "--check-logprobs"
    )
    assert all(rec["sync_mode"] == "full" and not rec["gathers"] for rec in ranks)
    check_logprobs(ranks)


@pytest.mark.server
def test_zero3_two_processes_against_vllm(tiny_model_dir, vllm_url, tmp_path):
    _, ranks = launch(
        "zero3", tmp_path, "--server", vllm_url, "--model", str(tiny_model_dir), "--check-logprobs"
    )
    check_zero3(ranks, full_weights=True)
    check_logprobs(ranks)


@pytest.mark.server
@pytest.mark.slow
@pytest.mark.parametrize("lora_sync", ["adapter", "merged"])
@pytest.mark.usefixtures("base_weights")  # tests/training/conftest.py
def test_zero3_lora_two_processes_against_vllm(tiny_model_dir, vllm_url, tmp_path, lora_sync):
    # adapter: the sharded adapter is gathered and sent alone (the default with a GPU server);
    # merged: base weights and adapter gathered together and folded (the default with a CPU server).
    _, ranks = launch(
        "zero3", tmp_path, "--server", vllm_url, "--model", str(tiny_model_dir), "--check-logprobs", "--lora",
        "--lora-sync", lora_sync, "--beta", "0.01",  # KL to the adapter-free base model, under ZeRO-3
    )  # fmt: skip
    assert all(rec["sync_mode"] == {"adapter": "lora", "merged": "merged"}[lora_sync] for rec in ranks)
    check_zero3(ranks, full_weights=False)
    check_logprobs(ranks)
    assert all("kl" in h for h in ranks[0]["log_history"] if "reward" in h)


# ---------------------------------------------------------------------------
# 1 process vs 2 processes on the same batches


BASELINES: dict[str, tuple[list[dict], dict]] = {}


def run_same_batches(kind: str, loss_type: str, model: Path, url: str, out: Path) -> tuple[list[dict], dict]:
    # The global step batch is 8 samples (2 prompts × 4 generations), generated once by rank 0 and
    # broadcast. One process trains all 8 rows in one micro-batch; two processes train rows 0-3
    # (rank 0) and 4-7 (rank 1). Both compute the same step objective: the loss is normalized by a
    # count over the whole step (losses.STEP_COUNTS), each rank's loss is its share of it, and
    # averaging gradients over 2 ranks is undone by step_loss_scale. Only fp32 summation order differs.
    per_device = "8" if kind == "single" else "4"
    args = ["--fake", url, "--model", str(model), "--per-device", per_device, "--loss-type", loss_type]
    if loss_type == "grpo":
        # Truncated completions lose their loss tokens: the ranks hold different numbers of
        # non-empty sequences, which a per-rank mean would weigh differently.
        args.append("--mask-truncated")
    _, ranks = launch(kind, out, *args)
    if loss_type == "grpo" and kind != "single":
        per_rank = [rec["trained_with_loss_tokens"] for rec in ranks]
        assert per_rank[0] != per_rank[1], per_rank  # the case a per-rank mean gets wrong
    steps = [h for h in ranks[0]["log_history"] if "loss" in h and "reward" in h]
    return steps, torch.load(out / "weights.pt")


@pytest.mark.parametrize(
    "kind, loss_type",
    [
        ("ddp", "dr_grpo"),
        pytest.param("zero3", "dr_grpo", marks=pytest.mark.slow),
        pytest.param("ddp", "dapo", marks=pytest.mark.slow),
        pytest.param("zero3", "grpo", marks=pytest.mark.slow),
    ],
)
def test_two_processes_match_one_process(tiny_model_dir, fake_url, tmp_path, kind, loss_type):
    if loss_type not in BASELINES:
        BASELINES[loss_type] = run_same_batches(
            "single", loss_type, tiny_model_dir, fake_url, tmp_path / "one"
        )
    one_steps, one_weights = BASELINES[loss_type]
    two_steps, two_weights = run_same_batches(kind, loss_type, tiny_model_dir, fake_url, tmp_path / "two")
    print(f"{loss_type} loss, 1 vs 2 processes ({kind}):",
          [(a["loss"], b["loss"]) for a, b in zip(one_steps, two_steps, strict=True)])  # fmt: skip
    for a, b in zip(one_steps, two_steps, strict=True):
        assert b["reward"] == a["reward"]  # the same batch
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4, abs=1e-7)
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4)
    # Real numbers, not vanishing ones.
    assert max(abs(h["loss"]) for h in one_steps) > 1e-4 and min(h["grad_norm"] for h in one_steps) > 1e-4
    assert one_weights.keys() == two_weights.keys()
    for name, w in one_weights.items():
        torch.testing.assert_close(two_weights[name], w, rtol=1e-4, atol=1e-5, msg=name)


# ---------------------------------------------------------------------------
# Full fine-tuning with a KL term under ZeRO-3: the reference is its own sharded engine

REF_ALPHA = 0.5  # ref = 0.5 * policy + 0.5 * ref after every step
REF_RUNS: dict[str, tuple[list[dict], dict]] = {}


def run_with_reference(kind: str, model: Path, url: str, out: Path, *extra: str) -> tuple[list[dict], dict]:
    """The same batches as ``run_same_batches``, with ``beta > 0`` and the reference synced every step;
    the rank records and the last synced weights."""
    per_device = "4" if kind == "zero3" else "8"
    args = ["--fake", url, "--model", str(model), "--per-device", per_device, "--beta", "0.1",
            "--ref-sync-alpha", str(REF_ALPHA), *extra]  # fmt: skip
    _, ranks = launch(kind, out, *args)
    return ranks, torch.load(out / "weights.pt")


@pytest.mark.parametrize(
    "kind, extra",
    [
        # The model loaded under zero.Init (GRPOConfig first): the reference is built sharded.
        pytest.param("zero3", (), id="2-processes"),
        # The model loaded before GRPOConfig, as in the guides' Quick Start: copied whole, then sharded.
        pytest.param("zero3-1", ("--model-first",), id="1-process-model-first", marks=pytest.mark.slow),
        pytest.param("zero3", ("--model-first",), id="2-processes-model-first", marks=pytest.mark.slow),
    ],
)
def test_zero3_full_finetuning_with_kl(tiny_model_dir, fake_url, tmp_path, kind, extra):
    if "single" not in REF_RUNS:
        REF_RUNS["single"] = run_with_reference("single", tiny_model_dir, fake_url, tmp_path / "one")
    (one,), one_weights = REF_RUNS["single"]
    ranks, weights = run_with_reference(kind, tiny_model_dir, fake_url, tmp_path / "ds", *extra)
    world, label = len(ranks), kind + (" model-first" if extra else "")
    print(f"{label}: reference mixes per rank [(max deviation from the formula, max change)]:",
          [rec["ref_mixes"] for rec in ranks], "reference shard / model:",
          [(rec["ref_local_numel"], rec["model_numel"]) for rec in ranks])  # fmt: skip
    for rec in ranks:
        assert rec["loaded_sharded"] == ("--model-first" not in extra)  # the reference path taken
        # The reference is sharded like the policy, and every rank ran one reference forward per
        # micro-batch (a ZeRO-3 forward is collective: unequal counts would hang).
        if world > 1:
            assert rec["ref_local_numel"] < 0.6 * rec["model_numel"], rec["ref_local_numel"]
        assert rec["ref_forwards"] == len(rec["trained"]) == STEPS
        # Each step's sync: ref_new = alpha * policy + (1 - alpha) * ref_old, tensor by tensor.
        assert len(rec["ref_mixes"]) == STEPS, rec["ref_mixes"]
        for deviation, change in rec["ref_mixes"]:
            assert deviation < 1e-6 and change > 1e-4, rec["ref_mixes"]
    assert [d for d, _ in one["ref_mixes"]] == [0.0] * STEPS  # the same formula without DeepSpeed
    # Reference log-probs of every trained row, as one fp32 process computes them: at step 1 the
    # initial weights, at step 2 the mix of those and the policy after step 1.
    ref_lp = {k: v for rec in ranks for k, v in rec["ref_logprobs"].items()}
    assert ref_lp.keys() == one["ref_logprobs"].keys()
    gap = max(abs(x - y) for k, v in ref_lp.items() for x, y in zip(v, one["ref_logprobs"][k], strict=True))
    print(f"reference log-probs, {label} vs 1 process: max |gap| {gap:.2e} over {len(ref_lp)} rows")
    assert gap < 1e-4
    # It trains: finite losses (check_run), a KL term that is 0 while the policy is the reference
    # and positive after, and the same losses and updated weights as one process.
    one_steps = [h for h in one["log_history"] if "loss" in h and "reward" in h]
    steps = [h for h in ranks[0]["log_history"] if "loss" in h and "reward" in h]
    print(f"loss, kl (1 process / {label}):",
          [(x["loss"], y["loss"], x["kl"], y["kl"]) for x, y in zip(one_steps, steps, strict=True)])  # fmt: skip
    assert abs(steps[0]["kl"]) < 1e-6 and steps[1]["kl"] > 1e-6, steps
    for a, b in zip(one_steps, steps, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4, abs=1e-7)
        # The logged kl is each rank's token mean, averaged over ranks: close to, not equal to, the
        # one-process token mean (the loss above uses the step-wide count and is equal).
        assert b["kl"] == pytest.approx(a["kl"], rel=0.05, abs=1e-8)
    from transformers import AutoModelForCausalLM

    initial = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32).state_dict()
    assert max(float((w - initial[n]).abs().max()) for n, w in weights.items()) > 1e-3
    assert weights.keys() == one_weights.keys()
    for name, w in one_weights.items():
        torch.testing.assert_close(weights[name], w, rtol=1e-4, atol=1e-5, msg=name)

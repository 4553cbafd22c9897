"""Grouping, splitting across processes and micro-batches, padding, and the TrainBatch masks."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from verifiers.training.batch.tensors import (  # noqa: E402
    TrainBatch,
    build_train_batch,
    even_slices,
    pad_and_stack,
    split_batch,
)
from verifiers.types import ProcessedOutputs  # noqa: E402

PAD = 0


def test_split_batch_contiguous_per_process():
    batch = list(range(16))
    # 2 processes × 2 micro-batches of 4 (per_device_train_batch_size = 4)
    assert split_batch(batch, num_processes=2, process_index=0, num_micro_batches=2) == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
    ]
    assert split_batch(batch, num_processes=2, process_index=1, num_micro_batches=2) == [
        [8, 9, 10, 11],
        [12, 13, 14, 15],
    ]
    with pytest.raises(ValueError, match="process_index=2"):
        split_batch(batch, num_processes=2, process_index=2, num_micro_batches=2)


def test_split_batch_cuts_between_rollouts_when_one_is_split_per_turn():
    # 8 rollouts (2 groups of 4) in 2 micro-batches; rollout 6 was trained as 2 samples
    # (a template rewrite), so there are 9 rows. Even cuts of rows would put 5 + 4 rows and
    # move rollout 4 (group 1) into the first micro-batch; cuts between rollouts keep the groups.
    index = [0, 1, 2, 3, 4, 5, 6, 6, 7]
    rows = [f"r{i}" for i in index]
    parts = split_batch(rows, num_processes=1, process_index=0, num_micro_batches=2, rollout_index=index)
    assert parts == [["r0", "r1", "r2", "r3"], ["r4", "r5", "r6", "r6", "r7"]]
    assert split_batch(rows, num_processes=1, process_index=0, num_micro_batches=2)[0][-1] == "r4"  # rows cut
    # Over 2 processes: each takes 4 rollouts, whatever their row counts.
    assert split_batch(rows, num_processes=2, process_index=1, num_micro_batches=1, rollout_index=index) == [
        ["r4", "r5", "r6", "r6", "r7"]
    ]
    with pytest.raises(ValueError, match="non-decreasing"):
        split_batch(rows, num_processes=1, process_index=0, num_micro_batches=2, rollout_index=index[::-1])


@settings(max_examples=100, deadline=None)
@given(counts=st.lists(st.integers(1, 3), max_size=30), processes=st.integers(1, 4), micro=st.integers(1, 4))
def test_split_batch_by_rollout_covers_every_row_once_and_never_splits_a_rollout(counts, processes, micro):
    index = [k for k, c in enumerate(counts) for _ in range(c)]
    parts = [
        split_batch(list(range(len(index))), num_processes=processes, process_index=p,
                    num_micro_batches=micro, rollout_index=index)
        for p in range(processes)
    ]  # fmt: skip
    assert all(len(mbs) == micro for mbs in parts)
    flat = [x for mbs in parts for mb in mbs for x in mb]
    assert flat == list(range(len(index)))
    filled = [mb for mbs in parts for mb in mbs if mb]
    for a, b in zip(filled, filled[1:], strict=False):
        assert index[a[-1]] != index[b[0]]  # no rollout across a cut, within or between processes


@settings(max_examples=100, deadline=None)
@given(n=st.integers(0, 60), processes=st.integers(1, 5), micro=st.integers(1, 5))
def test_split_batch_covers_everything_once(n, processes, micro):
    batch = list(range(n))
    parts = [
        split_batch(batch, num_processes=processes, process_index=p, num_micro_batches=micro)
        for p in range(processes)
    ]
    assert all(len(mbs) == micro for mbs in parts)  # every process runs the same number of micro-steps
    flat = [x for mbs in parts for mb in mbs for x in mb]
    assert flat == batch  # contiguous, in order, nothing lost or repeated
    sizes = [len(mb) for mbs in parts for mb in mbs]
    if n % (processes * micro) == 0:
        assert set(sizes) <= {n // (processes * micro)}
    assert max(sizes) - min(sizes) <= 1


def test_even_slices():
    assert even_slices(7, 3) == [slice(0, 3), slice(3, 5), slice(5, 7)]
    with pytest.raises(ValueError):
        even_slices(3, 0)


def test_pad_and_stack_masks_are_separate():
    ids, attn, loss = pad_and_stack([[5, 6, 7], [8]], PAD, "right", loss_masks=[[0, 1, 1], [1]])
    assert ids.tolist() == [[5, 6, 7], [8, PAD, PAD]]
    assert attn.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert loss.tolist() == [[0, 1, 1], [1, 0, 0]]
    assert attn.data_ptr() != loss.data_ptr()
    ids, attn, loss = pad_and_stack([[5, 6, 7], [8]], PAD, "left", width=4)
    assert ids.tolist() == [[PAD, 5, 6, 7], [PAD, PAD, PAD, 8]]
    assert attn.tolist() == [[0, 1, 1, 1], [0, 0, 0, 1]]
    assert torch.equal(loss, attn)  # without loss masks: every real token
    with pytest.raises(ValueError, match="length of its token list"):
        pad_and_stack([[1, 2]], PAD, loss_masks=[[1]])
    with pytest.raises(ValueError, match="side='middle'"):
        pad_and_stack([[1]], PAD, "middle")


@settings(max_examples=100, deadline=None)
@given(
    seqs=st.lists(st.lists(st.integers(1, 50), max_size=8), min_size=1, max_size=6),
    side=st.sampled_from(["left", "right"]),
)
def test_pad_and_stack_round_trip(seqs, side):
    masks = [[(i + len(s)) % 2 for i in range(len(s))] for s in seqs]
    ids, attn, loss = pad_and_stack(seqs, PAD, side, loss_masks=masks)
    assert ids.shape == (len(seqs), max(len(s) for s in seqs))
    for b, s in enumerate(seqs):
        assert ids[b][attn[b].bool()].tolist() == s
        assert loss[b][attn[b].bool()].tolist() == masks[b]
    assert torch.all(loss <= attn)
    assert torch.all(ids[attn == 0] == PAD)


def processed_example() -> ProcessedOutputs:
    # sample 0: prompt [11, 12, 13], completion [21, 22, 23] with an env token (22) masked out
    # sample 1: prompt [14], completion [24, 25]
    return ProcessedOutputs(
        prompt_ids=[[11, 12, 13], [14]],
        prompt_mask=[[1, 1, 1], [1]],
        completion_ids=[[21, 22, 23], [24, 25]],
        completion_mask=[[1, 0, 1], [1, 1]],
        completion_logprobs=[[-0.1, 0.0, -0.3], [-0.4, -0.5]],
        rewards=[1.0, 0.0],
    )


def test_build_train_batch_attention_and_loss_masks_differ():
    batch = build_train_batch(processed_example(), [0.5, -0.5], PAD)
    assert batch.input_ids_BT.tolist() == [[11, 12, 13, 21, 22, 23], [14, 24, 25, PAD, PAD, PAD]]
    # the model attends to the prompt and to env tokens ...
    assert batch.attention_mask_BT.tolist() == [[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]]
    # ... but trains only on sampled completion tokens
    assert batch.loss_mask_BT.tolist() == [[0, 0, 0, 1, 0, 1], [0, 1, 1, 0, 0, 0]]
    expected = torch.tensor([[0, 0, 0, -0.1, 0, -0.3], [0, -0.4, -0.5, 0, 0, 0]])
    assert torch.allclose(batch.sampling_logprobs_BT, expected)
    assert batch.advantages_B.tolist() == [0.5, -0.5]
    assert batch.rewards_B.tolist() == [1.0, 0.0]
    assert batch.completion_start == 1  # the shortest prompt


def test_one_forward_pass_scores_completion_tokens():
    # A toy bigram "model": log p(next = v | prev = u) = table[u, v]. The server's sampling
    # log-probs are computed from the token lists; the trainer recovers them from one forward
    # pass over input_ids with the slicing the module docstring describes.
    torch.manual_seed(0)
    table = torch.log_softmax(torch.randn(64, 64), dim=-1)
    processed = processed_example()
    processed.completion_logprobs = [
        [table[([*p, *c])[len(p) + i - 1], tok].item() for i, tok in enumerate(c)]
        for p, c in zip(processed.prompt_ids, processed.completion_ids, strict=True)
    ]
    batch = build_train_batch(processed, [1.0, 1.0], PAD)
    s = batch.completion_start
    logits = table[batch.input_ids_BT]  # (B, T, V): logits at position t score token t + 1
    logprobs = torch.gather(logits[:, s - 1 : -1], 2, batch.input_ids_BT[:, s:, None]).squeeze(-1)
    mask = batch.loss_mask_BT[:, s:].bool()
    assert torch.allclose(logprobs[mask], batch.sampling_logprobs_BT[:, s:][mask])


def test_rollout_index_maps_advantages_to_samples():
    processed = processed_example()
    processed.rollout_index = [0, 0]  # one rollout trained as two samples (template rewrite)
    batch = build_train_batch(processed, [0.25], PAD)
    assert batch.advantages_B.tolist() == [0.25, 0.25]
    with pytest.raises(ValueError, match="1 advantages for rollouts up to index 1"):
        build_train_batch(processed_example(), [0.25], PAD)


def test_train_batch_slicing_dict_and_validation():
    batch = build_train_batch(processed_example(), [0.5, -0.5], PAD)
    d = batch.to_dict()
    assert "old_logprobs_BT" not in d and d["completion_start"] == 1
    again = TrainBatch.from_dict(d)
    assert torch.equal(again.input_ids_BT, batch.input_ids_BT)
    second = batch[1:]
    assert len(second) == 1 and second.input_ids_BT.tolist() == [[14, 24, 25, PAD, PAD, PAD]]
    kept = batch[torch.tensor([False, True])]
    assert kept.advantages_B.tolist() == [-0.5]
    micro = split_batch(batch, num_processes=2, process_index=1, num_micro_batches=1)
    assert micro[0].rewards_B.tolist() == [0.0]
    batch.old_logprobs_BT = torch.zeros(2, 6)
    assert "old_logprobs_BT" in batch.to_dict()
    with pytest.raises(ValueError, match="advantages_B has shape"):
        TrainBatch(**{**batch.to_dict(), "advantages_B": torch.zeros(3)})

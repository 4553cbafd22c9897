"""report_to="tensorboard": the step's scalars (Trainer's TensorBoardCallback) and the sample
table as text (metrics.log_samples) land in one event file, read back with tensorboard's reader."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("tensorboard", reason="the tensorboard extra: pip install -e '.[tensorboard]'")
pytest.importorskip("transformers")

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from transformers import TrainingArguments  # noqa: E402
from transformers.integrations import TensorBoardCallback  # noqa: E402

from tests.doubles.rollouts import outputs_of  # noqa: E402
from verifiers.envs.state import new_state  # noqa: E402
from verifiers.training.metrics import step as M  # noqa: E402


def _outputs():
    states = [new_state([], "", "default", {}) for _ in range(2)]
    out = outputs_of(states, [1.0, 0.25], {"lcs": [1.0, 0.25]})
    out.prompt = [[{"role": "user", "content": f"reverse ab{i}"}] for i in range(2)]
    out.completion = [
        [{"role": "assistant", "content": "ba | x"}],
        [{"role": "assistant", "content": "a\nb"}],
    ]
    return out


def test_scalars_and_samples_read_back_from_the_event_file(tmp_path, capsys):
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none")
    state = SimpleNamespace(is_world_process_zero=True, is_hyper_param_search=False, global_step=3)
    callback = TensorBoardCallback()
    callback.on_train_begin(args, state, None)
    writer = M.tensorboard_writer([object(), callback])
    assert writer is callback.tb_writer is not None
    outputs = _outputs()
    M.log_samples(outputs, outputs.reward, [0.375, -0.375], step=3, num=None, tensorboard=writer)
    callback.on_log(args, state, None, logs={"reward": 0.625, "time/step_s": 14.5, "entropy": 2.3})
    callback.on_train_end(args, state, None)
    assert "lcs: 0.250" in capsys.readouterr().out  # the console table is still printed

    (logdir,) = {p.parent for p in tmp_path.rglob("events.out.tfevents.*")}
    events = EventAccumulator(str(logdir), size_guidance={"tensors": 0, "scalars": 0})
    events.Reload()
    (reward,) = events.Scalars("train/reward")
    assert (reward.step, reward.value) == (3, 0.625)
    assert events.Scalars("train/time/step_s")[0].value == 14.5
    (text,) = events.Tensors("completions/text_summary")
    table = text.tensor_proto.string_val[0].decode()
    assert text.step == 3
    assert table.splitlines()[0] == "| prompt | completion | reward | advantage | lcs |"
    assert "| user: reverse ab0 | assistant: ba \\| x | 1.000 | 0.375 | 1.000 |" in table
    assert "a<br>b" in table  # newlines kept inside the cell


def test_no_writer_without_the_tensorboard_callback():
    assert M.tensorboard_writer([]) is None
    assert M.tensorboard_writer([SimpleNamespace()]) is None

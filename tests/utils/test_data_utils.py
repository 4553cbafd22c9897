"""Answer extraction helpers and the offline-first example datasets."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import verifiers as vf
from verifiers.errors import ConfigError
from verifiers.utils import data as data_utils

# -- extract_boxed_answer ------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"so \boxed{42}.", "42"),
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"first \boxed{1} then \boxed{2}", "2"),
        (r"\boxed{a{b{c}}d} tail", "a{b{c}}d"),
        (r"\boxed{}", ""),
        # 0.1.4: a last box that never closes gives the text back (tests/parity compares many more)
        (r"done \boxed{7} and then \boxed{unfinished", r"done \boxed{7} and then \boxed{unfinished"),
        ("no box here", "no box here"),  # unchanged, as 0.1.x
        (r"\boxed{never closed", r"\boxed{never closed"),
        ("", ""),
    ],
)
def test_extract_boxed_answer(text, expected):
    assert vf.extract_boxed_answer(text) == expected


_balanced_text = st.recursive(
    st.text(alphabet=st.characters(exclude_characters="{}\\"), max_size=8),
    lambda inner: st.tuples(inner, inner, inner).map(lambda t: f"{t[0]}{{{t[1]}}}{t[2]}"),
    max_leaves=6,
)


@given(prefix=st.text(alphabet=st.characters(exclude_characters="\\"), max_size=20), content=_balanced_text)
def test_boxed_roundtrip_property(prefix, content):
    assert vf.extract_boxed_answer(f"{prefix}\\boxed{{{content}}} and more") == content


@given(st.text().filter(lambda t: "\\boxed{" not in t))
def test_text_without_box_is_returned_unchanged(text):
    assert vf.extract_boxed_answer(text) == text


# -- extract_hash_answer ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("She has 3 + 4 = 7 apples.\n#### 7", "7"),
        ("#### 42 ", "42"),
        ("a #### 1\nb #### 1,000", "1\nb"),  # 0.1.4: the text between the first two markers
        ("no marker", "no marker"),  # 0.1.4: the text itself
        ("####", ""),
    ],
)
def test_extract_hash_answer(text, expected):
    assert vf.extract_hash_answer(text) == expected


# -- load_example_dataset --------------------------------------------------------


def test_reverse_text_is_offline_and_suits_the_task():
    train = vf.load_example_dataset("reverse_text")
    test = vf.load_example_dataset("reverse_text", split="test")
    assert len(train) == 1000 and len(test) == 200
    assert {"question", "answer"} <= set(train.column_names)
    for row in list(train) + list(test):
        assert row["answer"] == row["question"][::-1]
        assert 3 <= len(row["question"].split()) <= 12
    assert not set(train["question"]) & set(test["question"])
    assert len(set(train["question"])) == len(train)


def test_reverse_text_is_deterministic():
    a = vf.load_example_dataset("reverse-text", split="train")
    b = vf.load_example_dataset("REVERSE_TEXT", split="train")
    assert a["question"] == b["question"]


def test_n_and_seed_select_a_reproducible_sample():
    full = vf.load_example_dataset("reverse_text")
    s1 = vf.load_example_dataset("reverse_text", n=10, seed=1)
    s1_again = vf.load_example_dataset("reverse_text", n=10, seed=1)
    s2 = vf.load_example_dataset("reverse_text", n=10, seed=2)
    first = vf.load_example_dataset("reverse_text", n=10, seed=None)
    assert len(s1) == 10 and s1["question"] == s1_again["question"]
    assert s1["question"] != s2["question"]
    assert first["question"] == full["question"][:10]
    assert set(s1["question"]) <= set(full["question"])
    assert len(vf.load_example_dataset("reverse_text", n=-1)) == len(full)
    assert len(vf.load_example_dataset("reverse_text", n=10_000)) == len(full)


def test_unknown_dataset_names_the_alternatives():
    with pytest.raises(ConfigError) as info:
        vf.load_example_dataset("not_a_dataset")
    message = str(info.value)
    assert "not_a_dataset" in message and "reverse_text" in message and "gsm8k" in message


def test_unknown_split_names_the_splits():
    with pytest.raises(ConfigError, match="no split 'validation'.*train, test"):
        vf.load_example_dataset("reverse_text", split="validation")


def test_hub_dataset_failure_names_offline_alternatives(monkeypatch):
    import datasets

    calls = []

    def offline(*args, **kwargs):
        calls.append((args, kwargs))
        raise ConnectionError("Couldn't reach the Hugging Face Hub (offline mode)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(ConfigError) as info:
        vf.load_example_dataset("gsm8k", split="test")
    message = str(info.value)
    assert "openai/gsm8k" in message and "reverse_text" in message and "\n" not in message
    assert calls == [(("openai/gsm8k", "main"), {"split": "test"})]


def test_hub_dataset_rows_are_converted(monkeypatch):
    import datasets

    raw = datasets.Dataset.from_list([{"question": "1+1?", "answer": "1 + 1 = 2\n#### 2"}])
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: raw)
    ds = vf.load_example_dataset("gsm8k")
    assert ds.column_names == ["question", "answer"] and ds[0] == {"question": "1+1?", "answer": "2"}


def test_bundled_datasets_all_load():
    for name in data_utils.BUNDLED_DATASETS:
        assert len(vf.load_example_dataset(name, n=3)) == 3


def test_my_modules_do_not_import_heavy_packages():
    """The CLI and utils modules import datasets/rich/openai only when they run."""
    code = (
        "import sys, verifiers, verifiers.utils.data, verifiers.utils.display, verifiers.envs.loader, "
        "verifiers.cli.eval, verifiers.cli.init, verifiers.cli.install, verifiers.data.reverse_text\n"
        "heavy = [m for m in ('torch', 'datasets', 'transformers', 'vllm') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True, cwd=root
    )
    assert out.stdout.strip() == ""


# 0.1.4's names: one raw row in the hub dataset's own columns -> the row 0.1.4 made of it.
HUB_ROWS = {
    "aime2024": ({"problem": "P", "answer": "073"}, {"question": "P", "answer": "73"}),
    "aime2025": ({"question": "P", "answer": "$12$"}, {"question": "P", "answer": "12"}),
    "amc2023": ({"problem": "P", "answer": "3"}, {"question": "P", "answer": "3"}),
    "gsm8k": ({"question": "Q", "answer": "so\n#### 5"}, {"question": "Q", "answer": "5"}),
    "math": ({"problem": "P", "solution": "thus \\boxed{\\frac12}"}, {"question": "P", "answer": "\\frac12"}),
    "math500": ({"problem": "P", "answer": "4"}, {"question": "P", "answer": "4"}),
    "mmlu": (
        {"question": "Q", "choices": ["a", "b", "c", "d"], "answer": 2},
        {"question": "Question: Q\n\nA: a\nB: b\nC: c\nD: d", "answer": "C"},
    ),
    "mmlu_pro": (
        {"question": "Q", "options": ["a", "b"], "answer": "B"},
        {"question": "Question: Q\n\nA: a\nB: b", "answer": "B"},
    ),
    "openbookqa": (
        {"question_stem": "Q", "choices": {"text": ["x", "y"], "label": ["A", "B"]}, "answerKey": "B"},
        {"question": "Question: Q\n\nChoices:\nA. x\nB. y", "answer": "B"},
    ),
    "openrs": ({"problem": "P", "answer": "1", "level": "Easy"}, {"question": "P", "answer": "1"}),
    "openrs_easy": ({"problem": "P", "answer": "1", "level": "Easy"}, {"question": "P", "answer": "1"}),
    "openrs_hard": ({"problem": "P", "answer": "1", "level": "Hard"}, {"question": "P", "answer": "1"}),
    "prime_code": (
        {
            "prompt": "Solve the following coding problem using the programming language python: x",
            "verification_info": "{}",
        },
        {
            "question": "Solve the following coding problem using the programming language python: x",
            "answer": "{}",
        },
    ),
}


def test_all_fifteen_014_names_are_known():
    assert set(data_utils.HUB_DATASETS) == set(HUB_ROWS) | {"gpqa_diamond", "gpqa_main"}
    assert len(data_utils.HUB_DATASETS) == 15


@pytest.mark.parametrize("name", sorted(HUB_ROWS))
def test_hub_names_give_014_columns(monkeypatch, name):
    import datasets

    raw, expected = HUB_ROWS[name]
    seen = []

    def fake(path, config=None, split=None):
        seen.append((path, config, split))
        return datasets.Dataset.from_list([raw])

    monkeypatch.setattr(datasets, "load_dataset", fake)
    ds = vf.load_example_dataset(name)
    spec = data_utils.HUB_DATASETS[name]
    assert seen[0] == (spec.path, spec.config, spec.default_split)
    assert ds.column_names == ["question", "answer"] and ds[-1] == expected


def test_gpqa_row_keeps_the_right_letter(monkeypatch):
    import datasets

    raw = {
        "Question": "Q",
        "Correct Answer": "right",
        "Incorrect Answer 1": "w1",
        "Incorrect Answer 2": "w2",
        "Incorrect Answer 3": "w3",
    }
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: datasets.Dataset.from_list([raw]))
    row = vf.load_example_dataset("gpqa_diamond")[0]
    assert f"{row['answer']}: right" in row["question"] and row["question"].startswith("Question: Q\n\nA: ")


def test_offline_hub_name_fails_in_one_line(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(ConfigError) as info:
        vf.load_example_dataset("math")
    message = str(info.value)
    assert (
        "needs the Hugging Face hub" in message and "HF_DATASETS_OFFLINE" in message and "\n" not in message
    )

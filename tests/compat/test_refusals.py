"""The refusal and call-form mechanism of verifiers.compat (refused.py, forms.py, the finder's
refused modules), tested with entries of its own; the release walk tests the tables' contents."""

from __future__ import annotations

import asyncio
import importlib
import sys

import pytest

import verifiers as vf
from verifiers.compat import forms, refused


@pytest.fixture
def tables(monkeypatch):
    monkeypatch.setitem(refused.REFUSED_MEMBERS, ("Environment", "old_member"), "gone for a test")
    monkeypatch.setitem(refused.REFUSED_MEMBERS, ("Rubric", "old_rubric_member"), "gone too")
    return refused


def _env():
    from datasets import Dataset

    return vf.SingleTurnEnv(dataset=Dataset.from_list([{"question": "q", "answer": "a"}]))


def test_a_refused_member_is_one_line_and_an_attribute_error(tables):
    env = _env()
    with pytest.raises(refused.RefusedMemberError) as info:
        env.old_member  # noqa: B018 - the access is the test
    message = str(info.value)
    assert message.startswith("SingleTurnEnv.old_member") and "gone for a test" in message
    assert "\n" not in message and isinstance(info.value, AttributeError)
    # hasattr / getattr with a default answer as for a missing attribute
    assert not hasattr(env, "old_member") and getattr(env, "old_member", 7) == 7
    with pytest.raises(refused.RefusedMemberError, match="gone too"):
        vf.Rubric().old_rubric_member  # noqa: B018


def test_an_unlisted_missing_member_is_a_plain_attribute_error(tables):
    env = _env()
    with pytest.raises(AttributeError) as info:
        env.never_public  # noqa: B018
    assert type(info.value) is AttributeError


def test_a_refused_module_imports_and_refuses_each_name(monkeypatch):
    path = "verifiers.utils.made_up_for_a_test"
    monkeypatch.setitem(refused.REFUSED_MODULES, path, "a hosted thing")
    # The finder's set of served paths is made at import; one of its own is needed here.
    from verifiers.compat import finder

    monkeypatch.setattr(finder, "_SERVED", finder._SERVED | {path})
    sys.modules.pop(path, None)
    module = importlib.import_module(path)
    try:
        with pytest.raises(refused.RefusedNameError) as info:
            module.anything  # noqa: B018
        assert "a hosted thing" in str(info.value) and isinstance(info.value, ImportError)
        with pytest.raises(ImportError):
            exec(f"from {path} import anything", {})
    finally:
        sys.modules.pop(path, None)


class _Scorer:
    def _old(self, prompt, completion, answer):
        return ("old", prompt, completion, answer)

    @forms.also_takes(_old, when=lambda *a, **k: "prompt" in k or (a and not isinstance(a[0], dict)))
    def score(self, state):
        return ("new", state)

    async def _old_async(self, prompt, completion):
        return ("old", prompt)

    @forms.also_takes(_old_async, when=lambda *a, **k: bool(a) and isinstance(a[0], str))
    async def ascore(self, state):
        return ("new", state)


def test_also_takes_sends_each_form_to_its_code():
    s = _Scorer()
    assert s.score({"x": 1}) == ("new", {"x": 1})
    assert s.score("p", "c", "a") == ("old", "p", "c", "a")
    assert s.score(prompt="p", completion="c", answer="a")[0] == "old"
    assert asyncio.run(s.ascore({"x": 1})) == ("new", {"x": 1})
    assert asyncio.run(s.ascore("p", "c")) == ("old", "p")
    import inspect

    assert inspect.iscoroutinefunction(_Scorer.ascore)
    assert list(inspect.signature(_Scorer.score).parameters) == ["self", "state"]
    assert forms.forms_of(_Scorer.score) == (_Scorer._old,)


def test_every_refused_name_is_refused_where_it_is_looked_up():
    """Each REFUSED_NAMES entry raises the one-line error from its module (the old path's module,
    for a moved one), and each REFUSED_MODULES path imports."""
    from verifiers.compat.paths import MOVED

    modules = {module for module, _ in refused.REFUSED_NAMES}
    for module in [*modules, *refused.REFUSED_MODULES]:
        importlib.import_module(module)
    for module, name in refused.REFUSED_NAMES:
        mod = sys.modules[MOVED.get(module, module)]
        with pytest.raises(refused.RefusedNameError) as info:
            getattr(mod, name)
        assert "\n" not in str(info.value), (module, name)


def test_every_refused_member_is_refused_on_its_class():
    classes = {
        "Environment": vf.Environment, "EnvGroup": vf.EnvGroup, "ToolEnv": vf.ToolEnv,
        "StatefulToolEnv": vf.StatefulToolEnv, "SandboxEnv": vf.SandboxEnv, "PythonEnv": vf.PythonEnv,
        "Rubric": vf.Rubric, "MathRubric": vf.MathRubric,
    }  # fmt: skip
    for cls_name, member in refused.REFUSED_MEMBERS:
        cls = classes[cls_name]
        # refused only where the normal lookup fails: a class that defines it would never refuse it
        assert not hasattr(cls, member), (cls_name, member)
        assert refused.member_refusal(cls, member), (cls_name, member)

"""vf.load_environment: id -> module mapping, argument checks, and honest import errors."""

from __future__ import annotations

import sys
import textwrap
import uuid
from pathlib import Path

import pytest

import verifiers as vf
from verifiers.errors import ConfigError, EnvironmentArgsError, EnvironmentNotFoundError

# A loader body that returns a real (tiny) environment.
_ENV_BODY = """
import verifiers as vf

def _env(**kw):
    from datasets import Dataset
    return vf.SingleTurnEnv(dataset=Dataset.from_list([{"question": "q", "answer": "a"}]), **kw)
"""


@pytest.fixture
def make_env_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Write a module into a folder on sys.path; return its env id (hyphenated) and module name."""
    monkeypatch.syspath_prepend(str(tmp_path))
    created: list[str] = []

    def make(source: str, prefix: str = "vf-test-env") -> tuple[str, str]:
        env_id = f"{prefix}-{uuid.uuid4().hex[:8]}"
        module = env_id.replace("-", "_")
        (tmp_path / f"{module}.py").write_text(_ENV_BODY + textwrap.dedent(source))
        created.append(module)
        return env_id, module

    yield make
    for module in created:
        sys.modules.pop(module, None)


def test_hyphens_map_to_underscores_and_args_pass_through(make_env_module):
    env_id, module = make_env_module(
        """
        def load_environment(system_prompt="default prompt"):
            return _env(system_prompt=system_prompt)
        """
    )
    assert "-" in env_id and module in env_id.replace("-", "_")
    env = vf.load_environment(env_id, system_prompt="be brief")
    assert isinstance(env, vf.Environment)
    assert env.system_prompt == "be brief"


def test_underscored_id_also_works(make_env_module):
    _, module = make_env_module("def load_environment():\n    return _env()\n")
    assert isinstance(vf.load_environment(module), vf.SingleTurnEnv)


def test_unknown_id_names_the_id_and_the_fix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(EnvironmentNotFoundError) as info:
        vf.load_environment("no-such-env-xyz")
    message = str(info.value)
    assert "no-such-env-xyz" in message and "no_such_env_xyz" in message
    assert "vf-init" in message and "\n" not in message


def test_local_folder_not_installed_says_run_vf_install(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "environments" / "local_only_env").mkdir(parents=True)
    with pytest.raises(EnvironmentNotFoundError, match="run vf-install local-only-env"):
        vf.load_environment("local-only-env")


@pytest.mark.parametrize("bad_id", ["", "bad id!", "class", "a.b"])
def test_invalid_ids_are_rejected(bad_id):
    with pytest.raises(EnvironmentNotFoundError, match="not a valid environment id"):
        vf.load_environment(bad_id)


def test_unknown_argument_lists_the_accepted_ones(make_env_module):
    env_id, _ = make_env_module(
        """
        def load_environment(num_examples=10, *, seed=0):
            return _env()
        """
    )
    with pytest.raises(EnvironmentArgsError) as info:
        vf.load_environment(env_id, num_exampels=5, colour="red")
    message = str(info.value)
    assert "num_exampels" in message and "colour" in message
    assert "accepted: num_examples, seed" in message
    assert isinstance(info.value, TypeError)  # still catchable as the TypeError it replaces


def test_var_keyword_loader_accepts_anything(make_env_module):
    env_id, _ = make_env_module(
        """
        SEEN = {}
        def load_environment(**kwargs):
            SEEN.update(kwargs)
            return _env()
        """
    )
    vf.load_environment(env_id, anything=1, goes=[2])
    assert sys.modules[env_id.replace("-", "_")].SEEN == {"anything": 1, "goes": [2]}


def test_missing_required_argument_is_named(make_env_module):
    env_id, _ = make_env_module("def load_environment(data_path):\n    return _env()\n")
    with pytest.raises(EnvironmentArgsError, match="requires argument.*data_path"):
        vf.load_environment(env_id)


def test_missing_dependency_inside_env_module_is_named(make_env_module):
    env_id, module = make_env_module(
        "import vf_missing_dependency_abc\n\ndef load_environment():\n    return _env()\n"
    )
    with pytest.raises(ImportError) as info:
        vf.load_environment(env_id)
    err = info.value
    assert "vf_missing_dependency_abc" in str(err)
    assert "not found" not in str(err)  # the environment was found; its dependency was not
    assert err.name == "vf_missing_dependency_abc"
    assert isinstance(err.__cause__, ModuleNotFoundError)


def test_other_import_error_inside_env_module_surfaces(make_env_module):
    env_id, _ = make_env_module(
        "from os import no_such_name_q\n\ndef load_environment():\n    return _env()\n"
    )
    with pytest.raises(ImportError, match="no_such_name_q"):
        vf.load_environment(env_id)


def test_errors_raised_by_the_loader_are_not_masked(make_env_module):
    env_id, _ = make_env_module(
        """
        def load_environment(n=1):
            if n < 0:
                raise ValueError("n must be >= 0")
            raise TypeError("bug inside the loader")
        """
    )
    with pytest.raises(ValueError, match="n must be >= 0"):
        vf.load_environment(env_id, n=-1)
    with pytest.raises(TypeError, match="bug inside the loader") as info:
        vf.load_environment(env_id)
    assert not isinstance(info.value, EnvironmentArgsError)


def test_result_must_be_an_environment(make_env_module):
    env_id, _ = make_env_module("def load_environment():\n    return {'not': 'an env'}\n")
    with pytest.raises(ConfigError, match="returned dict, not a vf.Environment"):
        vf.load_environment(env_id)


def test_module_without_loader(make_env_module):
    env_id, _ = make_env_module("X = 1\n")
    with pytest.raises(ConfigError, match="has no load_environment function"):
        vf.load_environment(env_id)


def test_bundled_reverse_text_environment(monkeypatch):
    """The bundled package loads from its folder, with its documented defaults and arg checks."""
    folder = Path(__file__).resolve().parents[2] / "environments" / "reverse_text"
    monkeypatch.syspath_prepend(str(folder))
    try:
        env = vf.load_environment("reverse-text", num_train_examples=20, num_eval_examples=5)
        assert isinstance(env, vf.SingleTurnEnv)
        assert len(env.dataset) == 20 and len(env.eval_dataset) == 5
        with pytest.raises(EnvironmentArgsError, match="accepted: num_train_examples, num_eval_examples"):
            vf.load_environment("reverse-text", max_turns=3)
    finally:
        sys.modules.pop("reverse_text", None)


# -- hub-style ids ------------------------------------------------------------------


@pytest.mark.parametrize(
    "env_id, parts",
    [
        ("reverse-text", (None, "reverse-text", None)),
        ("primeintellect/reverse-text", ("primeintellect", "reverse-text", None)),
        ("primeintellect/reverse-text@0.1.2", ("primeintellect", "reverse-text", "0.1.2")),
        ("reverse-text@latest", (None, "reverse-text", "latest")),
        ("a/b/c", (None, "a/b/c", None)),  # no hub form: refused as a module name later
    ],
)
def test_split_env_id(env_id, parts):
    from verifiers.envs.loader import split_env_id

    assert split_env_id(env_id) == parts


def test_hub_style_id_loads_the_installed_environment_of_that_name(make_env_module):
    env_id, module = make_env_module("def load_environment(n=1):\n    return _env()\n")
    assert isinstance(vf.load_environment(f"primeintellect/{env_id}", n=2), vf.SingleTurnEnv)
    assert isinstance(vf.load_environment(f"someone/{env_id}@latest"), vf.SingleTurnEnv)
    with pytest.raises(EnvironmentArgsError, match="accepted: n"):
        vf.load_environment(f"primeintellect/{env_id}", m=2)


def test_hub_style_id_that_is_not_installed_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(EnvironmentNotFoundError) as info:
        vf.load_environment("primeintellect/no-such-env-xyz@0.2.0")
    message = str(info.value)
    assert message.startswith(
        "environment 'primeintellect/no-such-env-xyz@0.2.0' not found: no module named 'no_such_env_xyz' "
        "(hub ids resolve to installed packages only; nothing is downloaded)"
    ), message
    assert "pip install no-such-env-xyz" in message and "vf-install no-such-env-xyz" in message
    assert "\n" not in message
    (tmp_path / "environments" / "no_such_env_xyz").mkdir(parents=True)
    with pytest.raises(EnvironmentNotFoundError, match="run vf-install no-such-env-xyz"):
        vf.load_environment("primeintellect/no-such-env-xyz")


@pytest.mark.parametrize("bad_id", ["owner/", "/name", "a/b/c", "owner/name@", "owner/1name"])
def test_malformed_hub_ids_are_rejected(bad_id):
    with pytest.raises(EnvironmentNotFoundError, match="not a valid environment id.*owner/name@version"):
        vf.load_environment(bad_id)


def test_hub_style_version_must_match_the_installed_package():
    from verifiers.envs.loader import installed_version

    installed = installed_version("reverse-text")
    if installed is None:
        pytest.skip("the bundled reverse-text package is not installed here")
    try:
        env = vf.load_environment(f"primeintellect/reverse-text@{installed}", num_train_examples=4)
        assert isinstance(env, vf.SingleTurnEnv)
        with pytest.raises(EnvironmentNotFoundError) as info:
            vf.load_environment("primeintellect/reverse-text@99.0.0")
        assert str(info.value).startswith(
            f"environment 'primeintellect/reverse-text@99.0.0' asks for version 99.0.0, but reverse-text "
            f"{installed} is installed (install that version (pip install reverse-text==99.0.0)"
        ), info.value
    finally:
        sys.modules.pop("reverse_text", None)

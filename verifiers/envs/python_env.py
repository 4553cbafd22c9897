"""``PythonEnv`` (0.1.10+'s ``vf.PythonEnv``): the model runs Python through one ``python(code)``
tool, with the variables, functions and imports of earlier calls of the same rollout kept.

Same tool and arguments as upstream: the model sees ``python(code: str)``; ``sandbox_id``,
``sandbox_state`` and ``python_state`` are hidden and injected per rollout. The reply is
upstream's format: what the code printed, then ``stderr:`` and its text, then the traceback
of an error, or ``Out[n]: <repr>`` for a final expression's value, or ``(no output)``.

Where upstream keeps a Python worker running in a hosted container, each call here runs in
a fresh local sandbox (:mod:`verifiers.envs.sandbox`: no network, no processes, time and
memory limits) that first replays the rollout's earlier cells with their output discarded,
then runs the new one. So state carries over as in a REPL, with two differences: a replayed
cell runs again (its time counts against ``timeout_per_command_seconds``; random numbers or
clock reads it made may differ), and files it wrote do not persist across calls.
``pip_install_packages`` cannot be installed into the sandbox: the packages come from this
interpreter, and one that is missing is named in a warning at construction.
"""

from __future__ import annotations

import importlib.util
import json
import time
from typing import Any

from verifiers.compat.refused import refusing_getattr
from verifiers.envs.sandbox import arun_python
from verifiers.envs.sandbox_env import SandboxEnv
from verifiers.rubrics.rubric import Rubric
from verifiers.types import Messages, State

__all__ = ["PythonEnv", "PythonMonitorRubric", "python_cell_program"]

_MARK = "\n<<vf-python-env-result>>"

# The program one call runs: replay earlier cells silently, run the last like a REPL cell
# (a final expression's repr is the cell's value), print the result as one JSON line.
_PROGRAM = r"""
import ast, contextlib, io, json, sys, traceback
CELLS = json.loads(%s)
NS = {"__name__": "__main__"}

def run(source):
    out, err = io.StringIO(), io.StringIO()
    result = {"status": "ok", "result": None}
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            tree = ast.parse(source, "<cell>", "exec")
            last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
            if tree.body:
                exec(compile(tree, "<cell>", "exec"), NS, NS)
            if last is not None:
                value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), NS, NS)
                if value is not None:
                    result["result"] = repr(value)
        except Exception as e:
            tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
            result = {"status": "error", "result": "".join(traceback.format_exception(type(e), e, tb))}
    result["stdout"], result["stderr"] = out.getvalue(), err.getvalue()
    return result

for cell in CELLS[:-1]:
    run(cell)
sys.__stdout__.write(%r + json.dumps(run(CELLS[-1])))
sys.__stdout__.flush()
"""

# pip names whose import name differs (the ones math and data modules ask for).
_IMPORT_NAMES = {"scikit-learn": "sklearn", "pillow": "PIL", "beautifulsoup4": "bs4", "pyyaml": "yaml"}


def python_cell_program(cells: list[str]) -> str:
    """The sandbox program that replays ``cells[:-1]`` silently and runs ``cells[-1]``.

    It prints, after the cell's own output, a marker and one JSON object: ``status``
    (``ok``/``error``), ``result`` (the final expression's repr, or the traceback),
    ``stdout``, ``stderr`` (the last cell's).
    """
    return _PROGRAM % (repr(json.dumps(list(cells))), _MARK)


def format_python_reply(response: dict[str, Any], execution_count: int) -> str:
    """One call's reply text, as upstream's PythonEnv writes it."""
    parts: list[str] = []
    stdout = (response.get("stdout") or "").rstrip()
    if stdout:
        parts.append(stdout)
    stderr = (response.get("stderr") or "").rstrip()
    if stderr:
        parts.append(f"stderr:\n{stderr}")
    result = response.get("result")
    if response.get("status") == "error" and result:
        parts.append(str(result).rstrip())
    elif response.get("status") == "ok" and result is not None:
        parts.append(f"Out[{execution_count}]: {result}")
    return "\n".join(parts) or "(no output)"


def _missing_packages(spec: str) -> list[str]:
    missing = []
    for requirement in spec.split():
        name = requirement.split("[")[0]
        for sep in ("==", ">=", "<=", "~=", "!=", ">", "<"):
            name = name.split(sep)[0]
        module = _IMPORT_NAMES.get(name.lower(), name.replace("-", "_"))
        if name and importlib.util.find_spec(module) is None:
            missing.append(name)
    return missing


class PythonMonitorRubric(Rubric):
    """Monitor metric (weight 0): ``python_ready_wait_time`` (0 here: nothing to start)."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.add_metric(self.python_ready_wait_time)

    def python_ready_wait_time(self, state: State) -> float:
        return float((state.get("python_state") or {}).get("ready_wait_time", 0.0))


class PythonEnv(SandboxEnv):
    """A persistent-looking Python REPL per rollout, on the local sandbox (see the module)."""

    def __init__(
        self,
        pip_install_packages: str = "numpy sympy scipy",
        max_startup_wait_seconds: int = 30,
        **kwargs: Any,
    ):
        self.pip_install_packages = pip_install_packages
        self.max_startup_wait_seconds = max_startup_wait_seconds
        super().__init__(sandbox_name="python-env", docker_image="python:3.11-slim", **kwargs)
        missing = _missing_packages(pip_install_packages)
        if missing:
            self.logger.warning(
                "PythonEnv(pip_install_packages=%r): %s not installed in this interpreter, so code that imports "
                "them fails in the sandbox (pip install %s)",
                pip_install_packages,
                ", ".join(missing),
                " ".join(missing),
            )
        self.add_rubric(PythonMonitorRubric())
        self.add_tool(self.python, args_to_skip=["sandbox_id", "sandbox_state", "python_state"])
        self.remove_tool(self.bash)  # as upstream: the model sees python only

    async def setup_state(self, state: State, **kwargs: Any) -> State:
        state = await super().setup_state(state, **kwargs)
        state["python_state"] = {"ready": True, "execution_count": 0, "ready_wait_time": 0.0, "cells": []}
        return state

    def update_tool_args(
        self, tool_name: str, tool_args: dict, messages: Messages, state: State, **kwargs: Any
    ) -> dict:
        updated = super().update_tool_args(tool_name, tool_args, messages, state, **kwargs)
        if tool_name == "python":
            updated.update(
                sandbox_id=state["sandbox_id"],
                sandbox_state=state["sandbox_state"],
                python_state=state["python_state"],
            )
        return updated

    async def python(self, code: str, sandbox_id: str, sandbox_state: dict, python_state: dict) -> str:
        """Execute `code` inside persistent Python REPL."""
        cells = [*python_state.setdefault("cells", []), code]
        start = time.monotonic()
        run = await arun_python(
            python_cell_program(cells),
            timeout_s=float(self.timeout_per_command_seconds),
            memory_mb=int(float(self.memory_gb) * 1024),
            max_output_bytes=1 << 20,
            env=self.environment_vars,
        )
        sandbox_state["command_execution_times"].append(time.monotonic() - start)
        if run.timed_out:
            return f"Error: Command timed out after {self.timeout_per_command_seconds}s"
        head, mark, tail = run.stdout.rpartition(_MARK)
        if not mark:  # the cell ended the process (exit(), a limit, a blocked operation)
            python_state["execution_count"] += 1
            python_state["cells"] = cells
            return run.to_text()
        python_state["execution_count"] += 1
        python_state["cells"] = cells
        return format_python_reply(json.loads(tail), python_state["execution_count"])


# Names of upstream's module that are not offered here: refused in one line (verifiers.compat.refused).
__getattr__ = refusing_getattr(__name__)

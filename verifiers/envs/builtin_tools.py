"""Ready-made tools (0.1.x code imports them from ``verifiers.utils.tools``, an old path of ``verifiers.compat``).

- ``python(code)``: runs the code like a notebook cell (the value of a final
  expression is printed) in the sandbox of :mod:`verifiers.envs.sandbox` (no
  network, a scratch directory, time and memory limits) and returns what it
  printed; on an error, the error output instead. Limits: ``PYTHON_TIMEOUT_S``
  seconds, output cut to ``PYTHON_MAX_OUTPUT_CHARS`` characters, as in 0.1.x.
- ``calculator(expression)``: evaluates arithmetic (digits, ``+-*/().`` and
  spaces only) without running arbitrary code.

Both are plain functions with docstrings, so ``vf.ToolEnv(tools=[python])``
builds their schemas. 0.1.x's web tools (``search``, ``search_ddg``, ``ask``)
called third-party web APIs with the user's keys; they are not provided, and
importing them raises an ``ImportError`` that says so in one line (rather than
a tool that silently answers errors).
"""

from __future__ import annotations

import ast
import operator
import textwrap
from typing import Any

from verifiers.envs.sandbox import run_python

__all__ = ["calculator", "python"]

PYTHON_TIMEOUT_S = 10.0
"""Wall-clock (and CPU) limit of one ``python`` call."""
PYTHON_MAX_OUTPUT_CHARS = 1000
"""Characters of output (or of the error) ``python`` returns."""
PYTHON_MEMORY_MB = 512


def __getattr__(name: str) -> Any:
    # 0.1.x's web tools: refused in one line (verifiers.compat.refused says why).
    from verifiers.compat.refused import refuse

    refuse(__name__, name)


def notebook_cell(code: str) -> str:
    """``code`` rewritten so that a final expression's value is printed (unless None), as a notebook shows it.

    Code that does not parse is returned unchanged, so running it reports the
    syntax error with the user's own line numbers.
    """
    source = textwrap.dedent(code)
    try:
        tree = ast.parse(source, mode="exec")
    except SyntaxError:
        return source
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return source
    last = tree.body[-1]
    expression = ast.get_source_segment(source, last.value)
    show = "if __vf_value is not None: print(__vf_value)"
    if last.col_offset == 0 and expression is not None:
        # Rewrite only the last statement: earlier lines keep their text and line numbers.
        lines = source.splitlines()
        head, tail = lines[: last.lineno - 1], lines[last.end_lineno or last.lineno :]
        return "\n".join([*head, f"__vf_value = ({expression})", show, *tail])
    # The expression shares a line with an earlier statement (`x = 1; x`): rebuild the module.
    assign = ast.Assign(targets=[ast.Name("__vf_value", ast.Store())], value=last.value)
    tree.body[-1:] = [assign, *ast.parse(show).body]
    return ast.unparse(ast.fix_missing_locations(tree))


def python(code: str) -> str:
    """Evaluates Python code like a Jupyter notebook cell, returning output and/or the last expression value.

    Args:
        code (str): A block of Python code

    Returns:
        The output (stdout + last expression if not None) or error message
    """
    result = run_python(
        notebook_cell(code),
        timeout_s=PYTHON_TIMEOUT_S,
        memory_mb=PYTHON_MEMORY_MB,
        max_output_bytes=4 * PYTHON_MAX_OUTPUT_CHARS,
    )
    if result.timed_out:
        return f"Error: Code execution timed out after {PYTHON_TIMEOUT_S:g} seconds"
    if not result.ok:
        error = result.stderr.strip() or f"Error: {result.error}"
        return error[:PYTHON_MAX_OUTPUT_CHARS]
    return result.stdout.strip()[:PYTHON_MAX_OUTPUT_CHARS]


_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}
_ALLOWED_CHARS = set("0123456789+-*/.() ")
_MAX_EXPONENT = 10_000  # 9**9**9 would take the process down


def _evaluate(node: ast.AST) -> Any:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > _MAX_EXPONENT:
            raise ValueError(f"exponent {right} is too large")
        return _OPERATORS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.operand))
    raise ValueError("only numbers and + - * / ** ( ) are allowed")


def calculator(expression: str) -> str:
    """Evaluates a single line of Python math expression. No imports or variables allowed.

    Args:
        expression (str): A mathematical expression using only numbers and basic operators (+,-,*,/,**,())

    Returns:
        The result of the calculation or an error message
    """
    if not all(c in _ALLOWED_CHARS for c in expression):
        return "Error: Invalid characters in expression"
    try:
        return str(_evaluate(ast.parse(expression.strip(), mode="eval")))
    except Exception as err:  # syntax errors, division by zero, overflow: text for the model
        return f"Error: {err}"

"""Programs the tests start as subprocesses (``python -m tests.drivers.<name>``, ``accelerate launch``, the 0.1.4 oracle's venv).

They are not test files: pytest collects nothing here. Each says in its docstring how it is run and by which tests.
"""

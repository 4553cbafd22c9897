"""Placeholder: being written."""

class ToolEnv:  # noqa
    pass


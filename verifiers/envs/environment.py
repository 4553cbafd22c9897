"""Placeholder: being written."""

class Environment:  # noqa
    pass


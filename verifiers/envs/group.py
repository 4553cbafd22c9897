"""Placeholder: being written."""

class EnvGroup:  # noqa
    pass


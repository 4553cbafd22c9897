"""Placeholder: being written."""

class Parser:  # noqa
    pass


"""Placeholder: being written."""

class ThinkParser:  # noqa
    pass


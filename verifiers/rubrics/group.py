"""Placeholder: being written."""

class RubricGroup:  # noqa
    pass


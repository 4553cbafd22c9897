"""Placeholder: being written."""

class Rubric:  # noqa
    pass


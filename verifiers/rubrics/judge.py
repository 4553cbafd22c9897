"""Placeholder: being written."""

class JudgeRubric:  # noqa
    pass


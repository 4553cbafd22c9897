"""Placeholder: being written."""

class ToolRubric:  # noqa
    pass


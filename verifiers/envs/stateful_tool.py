"""Placeholder: being written."""

class StatefulToolEnv:  # noqa
    pass


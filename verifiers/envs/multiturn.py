"""Placeholder: being written."""

class MultiTurnEnv:  # noqa
    pass


"""Placeholder: being written."""

class SingleTurnEnv:  # noqa
    pass


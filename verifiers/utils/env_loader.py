"""Placeholder: being written."""


def load_environment(env_id, **env_args):  # noqa
    raise NotImplementedError

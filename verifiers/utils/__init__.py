"""Small helpers used across the package (no stage of their own, no domain: nothing here imports
envs, parsers, rubrics or compat); import each from its module.

0.1.x code imports ``tool_utils``, ``message_utils`` and ``async_utils`` from here by module
path; ``data_utils``, ``logging_utils``, ``model_utils``, ``tools``, ``response_utils`` (and
0.2's ``env_loader``, ``sandbox``, now in ``verifiers.envs``) are old paths served by
``verifiers.compat``.
"""

# As before the moves: a star import still brings the moved modules (served by the hook).
__all__ = [
    "async_utils",
    "backoff",
    "data",
    "display",
    "ensure",
    "env_loader",
    "extras",
    "logging",
    "message_utils",
    "sandbox",
    "sandbox_child",
    "tool_utils",
    "tools",
]

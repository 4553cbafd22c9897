"""Small helpers used across the package (no stage of their own); import each from its module.

0.1.x code imports ``tools``, ``tool_utils``, ``message_utils`` and ``async_utils`` from
here by module path; ``data_utils``, ``logging_utils`` and ``model_utils`` are old paths
served by ``verifiers.compat``.
"""

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

"""The TOML config that ``vf-rl`` and ``vf-train`` share: its schema, its command line, its type checks.

- ``schema.py``: the tables and keys (``RunConfig``), validated into an ``RLConfig``.
- ``load.py``: config files, ``--a.b value`` overrides, ``VF_RL__*`` variables, ``--help``.
- ``types.py``: value types checked against dataclass annotations, worded for people.

``schema.py`` imports the training config (transformers): import it where it is used.
"""

__all__ = ["load", "schema", "types"]

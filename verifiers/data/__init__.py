"""Small datasets bundled with verifiers, so examples and tests run offline.

Each bundled dataset is a module exposing ``SPLITS`` (split names) and
``rows(split) -> list[dict]``. They are generated from code rather than stored as
data files: nothing to download, nothing for packaging to forget, and the rows
are identical on every machine. Load them with ``vf.load_example_dataset(name)``.
"""

__all__ = ["reverse_text"]

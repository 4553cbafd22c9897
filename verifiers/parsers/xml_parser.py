"""Placeholder: being written."""

class XMLParser:  # noqa
    pass


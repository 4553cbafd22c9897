"""Parsers. The classes are also importable from here (``from verifiers.parsers import XMLParser``), as in 0.1.x."""

from verifiers.parsers.maybe_think_parser import MaybeThinkParser
from verifiers.parsers.parser import Parser
from verifiers.parsers.think_parser import ThinkParser
from verifiers.parsers.xml_parser import XMLParser

__all__ = ["MaybeThinkParser", "Parser", "ThinkParser", "XMLParser"]

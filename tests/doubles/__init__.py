"""Test doubles and helpers that several test modules share (one module per concept).

Each module says what it stands in for and which tier uses it; test modules import from here,
never from one another (tests/test_test_layout.py checks it).
"""

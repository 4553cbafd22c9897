"""A CLI's one error line, read as a user reads it.

Not a stand-in for a component: the check the CLI tests share that a command failed with exit status 2,
no traceback and exactly one ``error:`` line (returned). Used by the default tier's CLI tests
(tests/cli/: vf-rl, vf-train, vf-setup, vf-init/vf-install)."""

from __future__ import annotations


def one_error(capsys, rc: int) -> str:
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err
    return lines[0]

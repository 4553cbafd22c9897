"""Which of the inference server's lines ``vf-rl``'s shared terminal shows; its log file keeps all.

Without tmux, ``vf-rl`` prints both children's output to one terminal, each line prefixed. The
server writes a line per HTTP request, vLLM repeats some messages once per layer (a dtype cast as
the model loads, the weights a LoRA sync leaves out) or per interval, and when ``vf-rl`` stops the
server at the end of a run, vLLM's shutdown may log the engine's going as an error with a
traceback. In the README's 20-step demo (2026-11-29) that came to about 1,330 server lines beside
the trainer's 20 step lines, ending in that traceback after a run that had succeeded.

The terminal leaves out, the log file (``logs/inference.log``) keeping every line:

1. everything the server prints once ``vf-rl`` has begun to stop it (the end of the run, or a hung
   server killed for a restart): shutdown chatter, of a process that is being ended on purpose;
2. a successful request's access line (uvicorn's ``INFO: host:port - "POST /v1/... HTTP/1.1" 200
   OK``); failed requests (4xx, 5xx) stay;
3. a vLLM ``INFO`` or ``WARNING`` line from a call site (``[file.py:line]``) already shown: each
   kind of message is seen once. ``ERROR`` lines always stay (a traceback is many lines of one
   site), and so does every line not in vLLM's format (``vf-vllm``'s own, a Python traceback).

Before the first line it leaves out, the terminal gets one note saying where the rest is. In tmux
mode the server's pane shows the log whole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

# uvicorn's access log: INFO:     127.0.0.1:50412 - "POST /v1/chat/completions HTTP/1.1" 200 OK
ACCESS_OK = re.compile(r'^INFO:\s+\S+ - "[A-Z]+ \S+ HTTP/[\d.]+" [23]\d\d\b')
# vLLM's format: [(Process pid=N) ]LEVEL MM-DD HH:MM:SS [file.py:line] message
VLLM_LINE = re.compile(r"\b(DEBUG|INFO|WARNING) \d\d-\d\d \d\d:\d\d:\d\d \[([^\]\s]+:\d+)\]")


@dataclass
class ServerEcho:
    """Decides, line by line, what of the server's output the terminal shows (see the module doc)."""

    log: Path
    stopping: bool = False  # vf-rl has begun to stop the server: show nothing more of it
    sites: set[str] = field(default_factory=set)  # vLLM call sites already shown
    noted: bool = False

    def started(self) -> None:
        """A new server process (the first, or a restart): its lines are shown again."""
        self.stopping = False

    def lines(self, line: str) -> list[str]:
        """The lines to print for ``line``: itself, nothing, or the one note and nothing."""
        if not self._hidden(line):
            return [line]
        if self.noted:
            return []
        self.noted = True
        return [
            "(vf-rl shows each kind of server message once, and no request or shutdown lines; "
            f"every line is in {self.log})"
        ]

    def _hidden(self, line: str) -> bool:
        if self.stopping or ACCESS_OK.match(line):
            return True
        vllm = VLLM_LINE.search(line)
        if vllm is None:
            return False
        site = vllm.group(2)
        if site in self.sites:
            return True
        self.sites.add(site)
        return False

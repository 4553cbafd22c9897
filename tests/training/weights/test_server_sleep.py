"""``server_sleep_during_step``: the trainer's side (weights/server_link.py) asks a server with sleep
mode to free its KV cache for the step and to take it back before a sync; a server without sleep
mode is refused at connect, in one line."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from verifiers.errors import ConfigError
from verifiers.training.weights.server_link import ServerLink


class Client:
    server_url = "http://127.0.0.1:8000"

    def __init__(self, sleep_mode: bool):
        self.sleep_mode, self.calls = sleep_mode, []

    def health(self):
        return {"model": "m", "sleep_mode": self.sleep_mode}

    def sleep(self):
        self.calls.append("sleep")

    def wake(self):
        self.calls.append("wake")


def link(client, on: bool = True, main: bool = True, processes: int = 1) -> ServerLink:
    args = SimpleNamespace(server_sleep_during_step=on)
    return ServerLink(args, SimpleNamespace(is_main_process=main, num_processes=processes), client)


def test_sleep_and_wake_reach_the_server_from_the_main_process_only():
    client = Client(sleep_mode=True)
    s = link(client)
    s.sleep()
    s.wake()
    assert client.calls == ["sleep", "wake"]
    other = Client(sleep_mode=True)
    link(other, main=False).sleep()
    assert other.calls == []


def test_off_by_default_nothing_is_asked():
    client = Client(sleep_mode=False)
    s = link(client, on=False)
    s.connect()  # a server without sleep mode is fine when not asked for
    s.sleep()
    s.wake()
    assert client.calls == []


def test_a_server_without_sleep_mode_is_refused_at_connect():
    s = link(Client(sleep_mode=False))
    with pytest.raises(ConfigError, match="runs without sleep mode") as e:
        s.connect()
    assert "--enable-sleep-mode" in e.value.hint


def test_the_end_of_training_leaves_the_server_awake_even_if_it_is_gone():
    client = Client(sleep_mode=True)
    link(client).leave_awake()
    assert client.calls == ["wake"]

    class Gone(Client):
        def wake(self):
            raise ConnectionError("refused")

    link(Gone(sleep_mode=True)).leave_awake()  # logged, not raised
    link(None).leave_awake()  # never connected: nothing to wake, nothing waited for


def test_with_several_processes_the_main_one_asks_without_a_collective(monkeypatch):
    """The other ranks do not call sleep/wake together with the main one: a collective there
    (``connect()``'s wait) would leave the main process waiting for them forever."""
    from verifiers.training import processes

    def collective(accelerator, obj):
        raise AssertionError("a collective that the other processes never join")

    monkeypatch.setattr(processes, "broadcast", collective)
    client = Client(sleep_mode=True)
    s = link(client, processes=2)
    s.sleep()
    s.wake()
    assert client.calls == ["sleep", "wake"]

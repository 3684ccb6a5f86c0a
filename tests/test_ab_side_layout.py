"""Each block of a per-op benchmark on a side is a new draw of where its calls' arrays land."""

from __future__ import annotations

import contextlib
import random
import types

from pytest_opperf.ab import processes
from pytest_opperf.ab.side import ControllerRounds, SidePlugin


def test_each_redraw_holds_a_block_of_a_new_size():
    side = types.SimpleNamespace(spacer=None, layout=random.Random(3))
    sizes = []
    for _ in range(40):
        SidePlugin.redraw_layout(side)  # type: ignore[arg-type]
        sizes.append(len(side.spacer))
    low = processes.LAYOUT_PAD_MIN
    assert all(low <= n < low + processes.LAYOUT_PAD_SPAN and n % 16 == 0 for n in sizes)
    assert len(set(sizes)) > 20


class FakeSide:
    """The controller's orders for one benchmark, and what the side did, in order."""

    name = "head"

    def __init__(self, orders: list[dict]) -> None:
        self.orders = list(orders)
        self.sent: list[dict] = []
        self.events: list[str] = []

    def send(self, message: dict) -> None:
        self.sent.append(message)

    def receive(self) -> dict:
        return self.orders.pop(0)

    def redraw_layout(self) -> None:
        self.events.append("redraw")

    @contextlib.contextmanager
    def on_cpu(self, cpu, nodeid):
        yield

    def fail(self, text):
        raise AssertionError(text)


def test_the_layout_is_drawn_before_each_blocks_untimed_call():
    side = FakeSide([{"cmd": "calibrate", "min_round_s": 0.0},
                     {"cmd": "block", "iterations": 1, "rounds": 2},
                     {"cmd": "block", "iterations": 1, "rounds": 3},
                     {"cmd": "go"}])
    recorded = []
    bench = types.SimpleNamespace(
        request=types.SimpleNamespace(node=types.SimpleNamespace(nodeid="t::a", path=None)),
        stat="relu", record=lambda *a, **k: recorded.append(a))
    ControllerRounds(side, None).call(bench, lambda: side.events.append("call"), (), {})  # type: ignore[arg-type]
    # calibration: one call; each block: a new layout, its untimed call, then its rounds
    assert side.events == ["call", "redraw", "call", "call", "call",
                           "redraw", "call", "call", "call", "call"]
    assert [m["ev"] for m in side.sent] == ["bench", "calibrated", "block", "block"]
    assert len(recorded) == 1

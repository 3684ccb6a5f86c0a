"""Both sides of a generation share one PYTHONHASHSEED and one size of the layout variable; each
generation draws others."""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

from pytest_opperf.ab import processes
from pytest_opperf.ab.arena import ARENA_FD_ENV
from pytest_opperf.ab.processes import Sides, SideSpec, generation_env


def test_one_seed_per_generation_the_same_for_both_sides():
    seeds = [generation_env(12345, g, {})["PYTHONHASHSEED"] for g in range(20)]
    assert len(set(seeds)) == 20  # a new draw each generation
    assert all(0 < int(s) <= 4_294_967_295 for s in seeds)  # what Python accepts
    assert generation_env(12345, 3, {}) == generation_env(12345, 3, {"OTHER": "x"})
    assert generation_env(1, 0, {}) != generation_env(2, 0, {})  # from the session's seed


def test_a_seed_the_user_fixed_is_kept():
    assert generation_env(12345, 0, {"PYTHONHASHSEED": "0"}) == \
        {processes.LAYOUT_ENV: "." * processes.layout_pad(12345, 0)}


def test_one_layout_per_generation_the_same_for_both_sides():
    """The layout variable's size: drawn for each generation from the session's seed, in steps
    of 16 over a page above the pad, its value nothing but dots."""
    sizes = [processes.layout_pad(7, g) for g in range(60)]
    low = processes.LAYOUT_PAD_MIN
    assert all(low <= n < low + processes.LAYOUT_PAD_SPAN and n % 16 == 0 for n in sizes)
    assert len(set(sizes)) > 40  # a draw, not one size for all
    assert sizes == [processes.layout_pad(7, g) for g in range(60)]  # the same seed, the same
    assert sizes != [processes.layout_pad(8, g) for g in range(60)]
    env = generation_env(7, 5, {})
    assert env[processes.LAYOUT_ENV] == "." * sizes[5]


def test_the_sides_are_started_with_their_generations_seed(monkeypatch, tmp_path):
    seen: list[tuple[str, dict[str, str]]] = []

    class FakeSide:
        def __init__(self, spec: SideSpec, extra_env: dict[str, str] | None = None,
                     started=None, fds=()) -> None:
            env = dict(extra_env or {})
            # every side gets the session's shared memory, under one descriptor number
            assert fds == (sides.arena_fd,) and env.pop(ARENA_FD_ENV) == str(sides.arena_fd)
            seen.append((spec.name, env))
            self.name = spec.name
            self.process = types.SimpleNamespace(pid=os.getpid())  # what aslr.randomised reads
            started(self)

        def receive(self, timeout_s: float, doing: str) -> dict:
            return {"ev": "collected", "ids": ["t"]}

        def stop(self, grace_s: float) -> None:
            pass

    monkeypatch.setattr(processes, "Side", FakeSide)
    specs = [SideSpec(name, [sys.executable], Path(tmp_path), {}, tmp_path / f"{name}.log")
             for name in ("base", "head")]
    sides = Sides(*specs, first="base", timeout_s=5, seed=99)
    sides.spawn()
    sides.restart()
    sides.close()
    assert sides.arena_fd is None  # closed with the sides
    first, second = seen[:2], seen[2:]
    assert {name for name, _ in first} == {"base", "head"}
    assert first[0][1] == first[1][1] == generation_env(99, 0, {})
    assert second[0][1] == second[1][1] == generation_env(99, 1, {})
    assert first[0][1] != second[0][1]


def test_a_side_process_runs_under_the_seed_it_is_given(tmp_path):
    """The real process: its environment holds the seed (read back from its own log)."""
    spec = SideSpec("base", [sys.executable, "-c",
                             "import os; print(os.environ['PYTHONHASHSEED'], flush=True)"],
                    Path(tmp_path), {"PATH": "/usr/bin:/bin"}, tmp_path / "base.log")
    side = processes.Side(spec, {"PYTHONHASHSEED": "4242"})
    side.process.wait(timeout=30)
    side.kill()
    assert (tmp_path / "base.log").read_text().split() == ["4242"]


def test_the_owner_knows_a_side_before_it_is_fully_started(tmp_path):
    """An interrupt (Ctrl-C, SIGTERM) right after the process starts must not orphan it: the
    owner is told of it first, and ends it."""
    known: list[processes.Side] = []

    def interrupted(side: processes.Side) -> None:
        known.append(side)
        raise KeyboardInterrupt

    spec = SideSpec("head", [sys.executable, "-c", "import time; time.sleep(60)"],
                    Path(tmp_path), {"PATH": "/usr/bin:/bin"}, tmp_path / "head.log")
    try:
        processes.Side(spec, started=interrupted)
    except KeyboardInterrupt:
        pass
    assert len(known) == 1 and known[0].process.poll() is None  # running, and known
    known[0].kill()
    assert known[0].process.poll() is not None

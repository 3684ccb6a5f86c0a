"""What ``pytest_opperf.torch.profile()`` costs per aten op, next to ``torch.profiler``.

    python benchmarks/torch_profile_overhead.py [--ops 20000] [--repeats 7] [--steps 5] \
        [--threads 1]

Two workloads, each timed plain, under an empty dispatch mode, under both
mechanisms of ``profile()``, flat and ``nested=True`` (in a ``timers.recording()``),
and under ``torch.profiler.profile`` (CPU activity):

* ``tiny op``: a loop of ``torch.add`` on two 4-element tensors, where an op
  costs about a microsecond and the instrumentation is most of what changes;
* ``CNN step``: a training step of a small CNN (conv, batch norm, relu,
  pooling, linear, SGD with momentum), batch 8, 3x32x32.

Overhead per op = (instrumented time - plain time) / aten ops, the op count
taken from ``profile()``'s own table (its top-level ops, also for
``nested=True``, which times the ops each op calls as well). ``profile()``
(``mechanism="profiler"``, the default on the CPU) records with torch's
profiler and builds its stats when it ends (in a measured window: when the
window has closed): two figures, as for ``torch.profiler``, "in window" and
"with results" (its end included). ``profile(mechanism="dispatch")`` times each
op as it runs: its cost is all in the window. ``by="module"`` is timed in the
window under both mechanisms. An empty ``TorchDispatchMode`` (its
handler only calls the op, and torch's wrapping of it in
``torch._disable_dynamo`` switched off as ``profile()`` does) is timed too:
the floor of any instrumentation through torch's Python dispatch. For ``torch.profiler``
two figures: the cost inside the window ("in window"), and with its stop and ``key_averages()``
("with results"), which is what it takes to get per-op figures out of it.
The variants are interleaved, each repeat in all of them, and the medians
printed, so that a busy neighbour affects them alike; expect noise of 10-20 %
on a shared machine. torch runs on one intra-op thread by default
(``--threads``): the cost measured is the host's per op, and on a busy
machine torch's OpenMP workers waiting for each other's cores swamp it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from tabulate import tabulate


def _tiny(torch, ops: int) -> Callable[[], None]:
    a = torch.ones(4)

    def run() -> None:
        for _ in range(ops):
            torch.add(a, a)

    return run


def _cnn(torch, steps: int) -> Callable[[], None]:
    nn = torch.nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Conv2d(16, 16, 3, padding=1, bias=False),
                          nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(16, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))

    def run() -> None:
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()

    return run


def _empty_mode(torch):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Empty(TorchDispatchMode):
        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            return False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func._op(*args, **(kwargs or {}))

    return Empty


def measure(torch, run: Callable[[], None], repeats: int) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from pytest_opperf import timers
    from pytest_opperf.torch import profile

    run()  # warm-up: allocator, oneDNN primitives
    with timers.recording() as table, profile(mechanism="dispatch"):
        run()
    ops = sum(s.count for s in table.values())
    with timers.recording() as check, profile():
        run()
    counted = {n: s.count for n, s in table.items()}
    differ = {n: (counted.get(n, 0), check[n].count if n in check else 0)
              for n in {*counted, *check} if counted.get(n, 0) != (check[n].count if n in check
                                                                   else 0)}
    empty = _empty_mode(torch)
    times: dict[str, list[float]] = {"plain": [], "empty dispatch mode": [], "dispatch": [],
                                     "dispatch nested": [], "profiler in window": [],
                                     "profiler with results": [],
                                     "profiler nested with results": [], "dispatch by module": [],
                                     "profiler by module in window": [],
                                     "torch.profiler in window": [],
                                     "torch.profiler with results": []}
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times["plain"].append(time.perf_counter() - start)

        with empty():
            start = time.perf_counter()
            run()
            times["empty dispatch mode"].append(time.perf_counter() - start)

        with timers.recording(), profile(mechanism="dispatch"):
            start = time.perf_counter()
            run()
            times["dispatch"].append(time.perf_counter() - start)

        with timers.recording(), profile(nested=True, mechanism="dispatch"):
            start = time.perf_counter()
            run()
            times["dispatch nested"].append(time.perf_counter() - start)

        outer = time.perf_counter()
        with timers.recording(), profile(mechanism="profiler"):
            start = time.perf_counter()
            run()
            times["profiler in window"].append(time.perf_counter() - start)
        times["profiler with results"].append(time.perf_counter() - outer)

        outer = time.perf_counter()
        with timers.recording(), profile(nested=True, mechanism="profiler"):
            run()
        times["profiler nested with results"].append(time.perf_counter() - outer)

        with timers.recording(), profile(by="module", mechanism="dispatch"):
            start = time.perf_counter()
            run()
            times["dispatch by module"].append(time.perf_counter() - start)

        with timers.recording(), profile(by="module", mechanism="profiler"):
            start = time.perf_counter()
            run()
            times["profiler by module in window"].append(time.perf_counter() - start)

        outer = time.perf_counter()
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            start = time.perf_counter()
            run()
            times["torch.profiler in window"].append(time.perf_counter() - start)
        prof.key_averages()
        times["torch.profiler with results"].append(time.perf_counter() - outer)
    medians = {name: statistics.median(t) for name, t in times.items()}
    plain = medians["plain"]
    return {"ops": ops, "plain_us": plain / ops * 1e6, "differ": differ,
            **{name: (t - plain) / ops * 1e6 for name, t in medians.items() if name != "plain"}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", type=int, default=20000, help="tiny ops per repeat (default 20000)")
    p.add_argument("--steps", type=int, default=5, help="CNN training steps per repeat (default 5)")
    p.add_argument("--repeats", type=int, default=7, help="interleaved repeats (default 7)")
    p.add_argument("--threads", type=int, default=1, help="torch's intra-op threads (default 1)")
    args = p.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("torch_profile_overhead: torch is not installed; pip install torch==2.13.0",
              file=sys.stderr)
        return 1
    torch.set_num_threads(args.threads)
    rows, notes = [], []
    for label, run in (("tiny op (torch.add, 4 elements)", _tiny(torch, args.ops)),
                       ("CNN step (batch 8, 3x32x32)", _cnn(torch, args.steps))):
        m = measure(torch, run, args.repeats)
        rows.append([label, m["ops"], m["plain_us"], m["empty dispatch mode"], m["dispatch"],
                     m["dispatch nested"], m["profiler in window"], m["profiler with results"],
                     m["profiler nested with results"], m["dispatch by module"],
                     m["profiler by module in window"], m["torch.profiler in window"],
                     m["torch.profiler with results"]])
        for name, (dispatch, profiler) in sorted(m["differ"].items()):
            notes.append(f"{label}: {name} x{dispatch} per repeat under the dispatch mode, "
                         f"x{profiler} under the profiler")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; medians of "
          f"{args.repeats} interleaved "
          "repeats; overhead in us per aten op")
    print(tabulate(rows, headers=["workload", "ops/repeat", "plain us/op", "empty dispatch mode",
                                  "dispatch", "dispatch nested", "profile() in window",
                                  "profile() with results", "profile(nested) with results",
                                  "by=module dispatch", "by=module in window",
                                  "torch.profiler in window", "torch.profiler with results"],
                   floatfmt=".2f"))
    for note in notes:
        print(f"note: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

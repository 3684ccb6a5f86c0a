"""What ``pytest_opperf.paddle.profile()`` costs per Paddle op: recording, inside the window, and
reading the events after it. Prints measurements; asserts nothing.

    python benchmarks/paddle_profile_overhead.py [ops]

A dygraph loop of ``ops`` relu calls on a 16-element tensor (the op itself about as cheap as a
Paddle op gets), timed plain, inside ``profile()`` (recording), and the time the window's close
takes to read and file the events; the best of five of each, per op.
"""

from __future__ import annotations

import sys
from time import perf_counter_ns

from pytest_opperf import measure
from pytest_opperf.device import CPU_HOST
from pytest_opperf.paddle import profile
from pytest_opperf.paddle.support import import_paddle


def main(ops: int = 20000) -> None:
    paddle = import_paddle()
    x = paddle.ones([16])
    relu = paddle.nn.functional.relu

    def loop() -> int:
        start = perf_counter_ns()
        for _ in range(ops):
            relu(x)
        return perf_counter_ns() - start

    plain, recording, reading = [], [], []
    for _ in range(5):
        plain.append(loop())
        run = measure.Run("bench", "e2e", None, CPU_HOST, "host", "ExecutorRunTimer")
        window = measure.measure_window(run)
        window.__enter__()
        with profile():
            recording.append(loop())
            run.step(examples=1)
        start = perf_counter_ns()
        window.__exit__(None, None, None)
        reading.append(perf_counter_ns() - start)
    base = min(plain) / ops / 1e3
    print(f"paddle {paddle.__version__}, {ops} relu ops per loop, best of 5")
    print(f"plain:      {base:.2f} us per op")
    print(f"recording:  {min(recording) / ops / 1e3:.2f} us per op "
          f"(+{min(recording) / ops / 1e3 - base:.2f} us inside the window)")
    print(f"reading:    {min(reading) / ops / 1e3:.2f} us per op (after the window closed)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20000)

"""Paddle's host tracer events as samples of operators: names, nesting, threads (pure).

Paddle's profiler (``paddle.base.core._Profiler``) gives, per thread, a tree of host events
(``HostPythonNode``: ``name``, ``type``, ``start_ns``, ``end_ns``, ``thread_id``,
``children_node``). This module turns those trees into the samples
:func:`pytest_opperf.recorded.file_samples` files, ``(path, start, ns, thread)``, without importing
paddle (tested on synthetic trees). What counts, and the stat's name:

* ``StandaloneExecutor::run`` (:data:`EXECUTOR`): the static executor's run of a program, the
  report's ``ExecutorRunTimer``: a framework stat, the ops it runs nested under it.
* Events of type ``Operator``: one op each. Static graph (PIR) ops are ``pd_op.conv2d``, inplace
  ones ``pd_op.relu_``; dygraph forward ops ``conv2d dygraph``; a dygraph backward node is
  ``Global_Conv2dGradNodeFinal`` and is named after the kernel it launches (``conv2d_grad``). All
  become the op's name without the dialect prefix and the inplace ``_`` suffix (:func:`op_name`),
  one name in static graph and dygraph, ``*_grad`` for gradients. A node that launches no kernel
  keeps its name without ``Global_`` (``GradNodeAccumulation``).
* A kernel launch outside every op (the ``full`` that seeds dygraph's backward): an op named after
  its kernel.
* Everything else (Python bindings, the executor's job ranges, ``infer_meta``, kernel launches
  inside an op) is transparent: what runs inside it is filed as if it ran where it is. With
  ``nested``, the events inside an op are listed under it (``conv2d/infer_meta``,
  ``conv2d/kernel_launch``). An op inside an op is always nested under it, so nothing is counted
  twice.

Threads: the window's thread is the one its markers were made on. An op on another thread (the
executor's worker threads when it does not run serially) is filed inside the executor run on the
window's thread that was running when it started, else at the top level, and counted
(:attr:`PaddleSamples.other_threads`) so that the run's report says so.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..recorded import MARK

__all__ = ["EXECUTOR", "PaddleSamples", "inner_name", "op_name", "samples_of"]

EXECUTOR = "StandaloneExecutor::run"  # the static executor's run, as Paddle's tracer names it
OPERATOR = "Operator"
KERNEL_LAUNCHES = frozenset({"DygraphKernelLaunch", "StaticKernelLaunch"})
KERNEL_LAUNCH = " kernel launch"
GRAD_NODE = "Global_"  # a dygraph backward node; its inside is "Local_<node>"


def op_name(name: str) -> str:
    """The op's name as the report has it: ``pd_op.relu_`` and ``relu dygraph`` -> ``relu``,
    ``pd_op.batch_norm_grad`` -> ``batch_norm_grad``, ``momentum kernel launch`` -> ``momentum``;
    another dialect's prefix is kept (``cf.yield``)."""
    if name.startswith("pd_op."):
        name = name[len("pd_op."):]
    elif name.endswith(" dygraph"):
        name = name[:-len(" dygraph")]
    elif name.endswith(KERNEL_LAUNCH):
        name = name[:-len(KERNEL_LAUNCH)]
    elif name.startswith(GRAD_NODE):
        name = name[len(GRAD_NODE):]
    if name.endswith("_") and not name.endswith("__") and len(name) > 1:
        name = name[:-1]  # PIR's inplace variant: the same op
    return name


def inner_name(name: str) -> str:
    """An event inside an op, for ``nested``: ``conv2d infer_meta`` and
    ``PhiKernelInstruction::infermeta`` -> ``infer_meta``, ``conv2d kernel launch`` ->
    ``kernel_launch``."""
    if "::" in name:
        name = name.rsplit("::", 1)[1]
    elif " " in name:
        name = name.split(" ", 1)[1]
    name = name.replace(" ", "_")
    return "infer_meta" if name == "infermeta" else name


_KIND_NAMES: dict[int, str] = {}  # event type's value -> its name


def _kind(node: Any) -> str:
    """The name of an event's type (``Operator``): pybind's ``enum.name`` builds the enum's
    member table on every call (about 0.2 ms), so each type's name is looked up once. The cache
    is keyed by the type's value, never by the object ``node.type`` returns: that object refers
    to the event's memory, which Paddle frees and reuses with the profiler's result, so a kept
    one would change its value (and file a later window's ops under the wrong kind)."""
    kind = node.type
    value = kind.value
    name = _KIND_NAMES.get(value)
    if name is None:
        name = _KIND_NAMES[value] = kind.name
    return name


def _grad_node_name(name: str, children: list[Any]) -> str:
    """A dygraph backward node: the first kernel it launches (inside its ``Local_`` range), else
    its own name."""
    for inner in children:
        for event in [inner, *(inner.children_node if inner.name.startswith("Local_") else ())]:
            if event.name.endswith(KERNEL_LAUNCH) and _kind(event) in KERNEL_LAUNCHES:
                return op_name(event.name)
    return op_name(name)


@dataclass
class PaddleSamples:
    """What :func:`samples_of` read: the samples, the markers' starts, the window's thread, and
    the ops that ran on other threads (by name)."""

    samples: list[tuple[str, int, int, int]] = field(default_factory=list)
    mark_starts: list[int] = field(default_factory=list)
    main_thread: int | None = None
    other_threads: dict[str, int] = field(default_factory=dict)
    executor_runs: int = 0


def samples_of(trees: Mapping[int, Any], nested: bool = False) -> PaddleSamples:
    """The samples of the events in ``trees`` (thread id -> root event, as
    ``_ProfilerResult.get_data()`` gives them). Each event is read once: Paddle's pybind objects
    build their attributes (the list of children too) on every read."""
    out = PaddleSamples()
    by_thread: dict[int, tuple[PaddleSamples, list[tuple[int, int, str]]]] = {}
    for thread, root in trees.items():
        read, executors = PaddleSamples(), list[tuple[int, int, str]]()
        _walk(root.children_node, None, False, thread, nested, read, executors)
        by_thread[thread] = (read, executors)
        if read.mark_starts and out.main_thread is None:
            out.main_thread = thread
    main, executors = (by_thread.pop(out.main_thread) if out.main_thread is not None
                       else (PaddleSamples(), []))
    out.samples, out.mark_starts = main.samples, sorted(main.mark_starts)
    out.executor_runs = main.executor_runs
    executors.sort()
    starts = [start for start, _, _ in executors]
    for read, _ in by_thread.values():
        out.executor_runs += read.executor_runs
        for path, start, ns, tid in read.samples:
            if "/" not in path:
                out.other_threads[path] = out.other_threads.get(path, 0) + 1
            i = bisect.bisect_right(starts, start) - 1
            inside = i >= 0 and start <= executors[i][1]
            out.samples.append((f"{executors[i][2]}/{path}" if inside else path, start, ns, tid))
    return out


def _walk(events: Iterable[Any], path: str | None, in_op: bool, thread: int, nested: bool,
          out: PaddleSamples, executors: list[tuple[int, int, str]]) -> None:
    for event in events:
        name, kind, children = event.name, _kind(event), event.children_node
        if name == MARK:
            out.mark_starts.append(event.start_ns)
            continue
        if name == EXECUTOR:
            stat = EXECUTOR
            out.executor_runs += 1
        elif kind == OPERATOR:
            stat = _grad_node_name(name, children) if name.startswith(GRAD_NODE) else op_name(name)
        elif kind in KERNEL_LAUNCHES and not in_op:
            stat = op_name(name)
        elif nested and in_op and not name.startswith("Local_"):
            stat = inner_name(name)
        else:  # transparent
            _walk(children, path, in_op, thread, nested, out, executors)
            continue
        here = stat if path is None else f"{path}/{stat}"
        start, end = event.start_ns, event.end_ns
        out.samples.append((here, start, end - start, thread))
        if stat == EXECUTOR:
            executors.append((start, end, here))
        _walk(children, here, in_op or stat != EXECUTOR, thread, nested, out, executors)

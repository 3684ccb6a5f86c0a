"""The executor: runs a program's global block with feeds and fetches.

By default it reproduces the executor of the reference report, overheads
included, each timed under the report's name:

1. ``ProgramCloneTimer``: clone the caller's program (every run), then prepend
   one ``feed`` op per feed and append one ``fetch`` op per fetch.
2. ``ExecutorRunTimer``: the core run -
   ``CreateLocalScopeTimer`` (a kid scope holding a fresh holder for every
   temporary; persistables live in the outer scope), then for every op
   ``CreateOpTimer`` (a runnable op made from its description) and the op's
   own kernel stat, then ``DeleteLocalScopeTimer``. Fetch ops copy to the host,
   which synchronises the device inside the core run.

Each avoidable overhead can be switched off, so a suite can show its cost:
``use_program_cache=True`` (per run) clones and inserts feed/fetch ops once per
program version and feed/fetch signature; ``Executor(cache_ops=True)`` creates
the runnable ops once; ``Executor(reuse_local_scope=True)`` keeps the local
scope between runs. Results are identical either way, and the caller's program
is never modified. On a GPU place the core run has the place's device current,
so every op allocates and launches there (``CUDAPlace(1)`` included).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pytest_opperf import timers

from .backend import Place, array_module, device_scope, is_gpu_array
from .framework import Block, Program, Variable, default_main_program
from .registry import RuntimeOp, create_op
from .scope import Scope, global_scope

__all__ = ["Executor", "FeedError", "FetchError", "create_local_scope"]


class FeedError(ValueError):
    """A feed names an unknown variable or does not match its description."""


class FetchError(ValueError):
    """A fetch names an unknown variable."""


@dataclass
class _Prepared:
    """What the executor may keep for one program version and feed/fetch signature."""

    program: Program | None = None  # the clone with feed/fetch ops (program cache)
    ops: list[RuntimeOp] | None = None  # runnable ops (cache_ops)
    local_scopes: weakref.WeakKeyDictionary[Scope, Scope] = field(
        default_factory=weakref.WeakKeyDictionary)


class Executor:
    """Runs programs on a place.

    ``cache_ops`` and ``reuse_local_scope`` switch off two of the reference
    executor's per-run overheads (op creation, local scope creation and
    deletion); the third, the program clone, is ``run(use_program_cache=True)``.
    """

    def __init__(self, place: Place, *, cache_ops: bool = False,
                 reuse_local_scope: bool = False) -> None:
        self.place = place
        self.xp = array_module(place)  # fails here, with the reason, if the place is unusable
        self.cache_ops = cache_ops
        self.reuse_local_scope = reuse_local_scope
        self._prepared: weakref.WeakKeyDictionary[Program,
                                                  dict[tuple,
                                                       _Prepared]] = weakref.WeakKeyDictionary()

    def run(self, program: Program | None = None, feed: Mapping[str, Any] | None = None,
            fetch_list: Sequence[Variable | str] | None = None, feed_var_name: str = "feed",
            fetch_var_name: str = "fetch", scope: Scope | None = None, return_numpy: bool = True,
            use_program_cache: bool = False) -> list[Any]:
        """Run ``program`` (default: the default main program) and return the
        fetched values in ``fetch_list`` order: numpy arrays when ``return_numpy``,
        else arrays of the executor's place."""
        program = default_main_program() if program is None else program
        if not isinstance(program, Program):
            raise TypeError("Executor.run: program must be a Program, given "
                            f"{type(program).__name__}")
        scope = global_scope() if scope is None else scope
        feed = {} if feed is None else feed
        block = program.global_block()
        feed_names = list(feed)
        feed_values = [_check_feed(block, name, feed[name]) for name in feed_names]
        fetch_names = [_fetch_name(block, f) for f in (fetch_list or [])]

        prepared = None
        if use_program_cache or self.cache_ops or self.reuse_local_scope:
            key = (program.version, tuple(feed_names), tuple(fetch_names), feed_var_name,
                   fetch_var_name, return_numpy)
            per_program = self._prepared.setdefault(program, {})
            prepared = per_program.get(key)
            if prepared is None:
                per_program.clear()  # older versions of this program are stale
                prepared = per_program[key] = _Prepared()

        if prepared is not None and prepared.program is not None:
            run_program = prepared.program
        else:
            with timers.timer("ProgramCloneTimer"):
                run_program = program.clone()
            _add_feed_fetch(run_program.global_block(), feed_names, fetch_names, feed_var_name,
                            fetch_var_name, return_numpy)
            if use_program_cache and prepared is not None:
                prepared.program = run_program

        scope.var(feed_var_name).value = feed_values
        fetched: list[Any] = []
        scope.var(fetch_var_name).value = fetched
        with device_scope(self.place):  # every allocation, launch and event on the place's device
            self._run_block(run_program.global_block(), scope, prepared)
        return fetched

    def _run_block(self, block: Block, scope: Scope, prepared: _Prepared | None) -> None:
        """The core run (``ExecutorRunTimer``)."""
        table = timers.current()
        kept = prepared.local_scopes if prepared is not None and self.reuse_local_scope else None
        cached = prepared.ops if prepared is not None else None
        make_ops = cached is None
        ops: list[RuntimeOp] = [] if cached is None else cached
        with timers.timer("ExecutorRunTimer"):
            local = kept.get(scope) if kept is not None else None
            if local is None:
                with timers.timer("CreateLocalScopeTimer"):
                    local = create_local_scope(block, scope)
                if kept is not None:
                    kept[scope] = local
            # the op being created or run, for the error note (the loops' noqa: B007)
            i = -1
            try:
                if table is None:  # nothing records: no timing code in the op loop
                    if make_ops:
                        for i, desc in enumerate(block.ops):  # noqa: B007
                            op = create_op(desc, self.place, self.xp)
                            ops.append(op)
                            op.run(local)
                    else:
                        for i, op in enumerate(ops):  # noqa: B007
                            op.run(local)
                else:
                    create_timer = table.region("CreateOpTimer")
                    if make_ops:
                        for i, desc in enumerate(block.ops):  # noqa: B007
                            with create_timer:
                                op = create_op(desc, self.place, self.xp)
                            ops.append(op)
                            with table.region(op.type, kernel=True):
                                op.run(local)
                    else:
                        for i, op in enumerate(ops):  # noqa: B007
                            with table.region(op.type, kernel=True):
                                op.run(local)
            except BaseException as exc:
                if kept is not None:  # a failed run leaves no half-written scope for the next one
                    kept.pop(scope, None)
                    scope.delete_scope(local)
                _add_note(exc, f"while running op {op_desc_summary(block, i)}")
                raise
            finally:
                if kept is None and local.parent is scope:
                    with timers.timer("DeleteLocalScopeTimer"):
                        scope.delete_scope(local)
        if make_ops and prepared is not None and self.cache_ops:
            prepared.ops = ops


def create_local_scope(block: Block, scope: Scope) -> Scope:
    """A kid scope with holders for the block's temporaries (persistables outside)."""
    local = scope.new_scope()
    for name, var in block.vars.items():
        (scope if var.persistable else local).var(name)
    return local


def op_desc_summary(block: Block, index: int) -> str:
    if not 0 <= index < len(block.ops):
        return f"#{index} of block {block.idx}"
    op = block.ops[index]
    return f"#{index} {op.type} of block {block.idx} (inputs {op.inputs}, outputs {op.outputs})"


def _add_note(exc: BaseException, note: str) -> None:
    if hasattr(exc, "add_note"):  # Python 3.11+
        exc.add_note(note)


def _check_feed(block: Block, name: str, value: Any) -> Any:
    """``value`` as an array matching variable ``name``'s description, or an error."""
    var = block.find_var(name)
    if var is None:
        data = [v.name for v in block.vars.values()
                if not v.persistable and not any(v.name in op.output_arg_names for op in block.ops)]
        raise FeedError(f"feed: variable {name!r} is not in the program; its inputs are {data}")
    array = value if is_gpu_array(value) else np.asarray(value)
    if array.dtype.name != var.dtype:
        raise FeedError(f"feed {name!r}: expected dtype {var.dtype}, given {array.dtype.name}")
    if var.shape is not None:
        expected = list(var.shape)
        given = list(array.shape)
        if len(given) != len(expected) or any(e not in (-1, g)
                                              for e, g in zip(expected, given, strict=True)):
            raise FeedError(f"feed {name!r}: expected shape {expected} (-1: any size), given "
                            f"{given}")
    return array


def _fetch_name(block: Block, item: Variable | str) -> str:
    name = item.name if isinstance(item, Variable) else item
    if not isinstance(name, str):
        raise FetchError(f"fetch_list takes variables or names, given {item!r}")
    if block.find_var(name) is None:
        raise FetchError(f"fetch: variable {name!r} is not in the program")
    return name


def _add_feed_fetch(block: Block, feed_names: list[str], fetch_names: list[str], feed_var_name: str,
                    fetch_var_name: str, to_host: bool) -> None:
    """Prepend a ``feed`` op per feed and append a ``fetch`` op per fetch (a clone only)."""
    feed_var = block.create_var(feed_var_name, persistable=True, dtype="float32")
    for col, name in reversed(list(enumerate(feed_names))):
        block.prepend_op("feed", inputs={"X": [feed_var]}, outputs={"Out": [name]},
                         attrs={"col": col})
    fetch_var = block.create_var(fetch_var_name, persistable=True, dtype="float32")
    for col, name in enumerate(fetch_names):
        block.append_op("fetch", inputs={"X": [name]}, outputs={"Out": [fetch_var]},
                        attrs={"col": col, "to_host": to_host})

"""Tests from another place than each side's own commit: ``bisect --tests-from`` and
``--opperf-compare`` with ``--opperf-tests-from``.

By default each side of an A/B (and of every bisection step) runs the tests its own commit holds.
With a tests source, the test files of the selection are taken from one place (:class:`Source`:
the working tree, committed or not, or a revision) and written into each side's checkout at the
same place (:meth:`Staged.lay_out`), with the ``conftest.py`` files of their directories and the
``__init__.py`` files a checkout lacks; each side still imports the code under test from its own
checkout. A test file outside the repository goes to :data:`OUTSIDE_DIR` under the directory the
session was started in, in every checkout alike, so that the test ids (relative to the rootdir,
which the sides are given: ``--rootdir=.``) are the same on both sides. Each side's ini file is
its own commit's.

Which code a side measured is asked, not assumed: the top-level modules the staged files import
(:func:`imported_names`, read from their source) are looked up in each side process after its
collection (:func:`origins`, told by :data:`PROBE_ENV`), and :func:`judge` refuses a session where
a module of the project is imported from outside a side's checkout (site-packages, the working
tree) or from the same place on both sides, and one where a module is found on neither side. No
pytest import: errors are :class:`TestsFromError`, one line naming the input.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from .checkout import GIT_TIMEOUT_S

__all__ = ["OUTSIDE_DIR", "PLUGIN_PACKAGE", "PROBE_ENV", "Judgement", "Source", "Staged",
           "TestFile", "TestsFromError", "imported_names", "judge", "missing", "origin_of",
           "origins", "project_has", "resolve_source", "stage"]

WORKTREE, HEAD = "worktree", "head"
# where the test files from outside the repository go, under the directory the session started in
OUTSIDE_DIR = ".opperf-tests"
# the top-level modules a side looks up after its collection, comma-separated
PROBE_ENV = "OPPERF_AB_PROBE"
# this plugin's package: both sides run the controller's own (a conftest.py importing it is no
# code under test), so it is neither probed nor judged
PLUGIN_PACKAGE = __name__.partition(".")[0]
_SKIPPED_DIRS = ("__pycache__", ".git")


class TestsFromError(Exception):
    """The tests cannot be taken from where they were asked for; one line naming the input."""

    __test__ = False  # no test class, for pytest


@dataclass(frozen=True)
class Source:
    """Where the test files come from."""

    given: str  # as the user wrote it
    commit: str | None  # the full sha; None: the working tree
    label: str  # "the working tree" | "HEAD 1234abcd" | "REV 1234abcd (v1.2)"

    def to_dict(self) -> dict[str, str | None]:
        return {"given": self.given, "commit": self.commit, "label": self.label}


def _git(args: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True,
                              timeout=GIT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        raise TestsFromError(f"cannot run git in {cwd}: {exc}") from None


def _last(done: subprocess.CompletedProcess[bytes]) -> str:
    lines = done.stderr.decode(errors="replace").strip().splitlines()
    return (lines or [f"exit status {done.returncode}"])[-1]


def resolve_source(given: str, top: Path, head_is_worktree: bool = False) -> Source:
    """``worktree``, ``head`` (the HEAD commit; the working tree where ``head_is_worktree``: an
    A/B's head side is the working tree) or a revision of the repository at ``top``."""
    value = given.strip()
    if not value:
        raise TestsFromError("expected worktree, head or a git revision, got ''")
    if value == WORKTREE or (value == HEAD and head_is_worktree):
        return Source(value, None, "the working tree")
    rev = "HEAD" if value == HEAD else value
    done = _git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"], top)
    sha = done.stdout.decode().strip()
    if done.returncode != 0 or len(sha) != 40:
        raise TestsFromError(f"expected worktree, head or a revision of the repository {top}, "
                             f"got {given!r}")
    shown = "HEAD" if value == HEAD else "REV"
    return Source(value, sha, f"{shown} {sha[:10]}" + (f" ({value})" if value not in (HEAD, sha)
                                                          and not sha.startswith(value) else ""))


@dataclass(frozen=True)
class TestFile:
    """One file every side gets."""

    __test__ = False  # no test class, for pytest
    dest: str  # where, relative to a checkout's toplevel (posix)
    origin: str  # where it was taken from: a path, or REV:path
    data: bytes
    only_missing: bool = False  # an __init__.py: written only where the checkout has none
    outside: bool = False  # from outside the repository

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.dest, "from": self.origin, "outside": self.outside}


@dataclass
class Staged:
    """The files of a selection from one :class:`Source`, and the selection the sides get."""

    source: Source
    files: list[TestFile]
    args: list[str]  # the pytest arguments, paths relative to the directory started in
    imports: list[str] = field(default_factory=list)  # the top-level modules the files import

    def lay_out(self, checkout: Path) -> None:
        """Write the files into a side's checkout (its toplevel), over the commit's own."""
        for f in self.files:
            path = checkout / f.dest
            if f.only_missing and path.exists():
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.is_symlink():
                path.unlink()  # a link of the commit's: never write through it
            path.write_bytes(f.data)

    @property
    def tests(self) -> list[TestFile]:
        """The files of the selection itself (no conftest.py, no __init__.py added)."""
        return [f for f in self.files if PurePosixPath(f.dest).name not in ("conftest.py",)
                and not f.only_missing]

    def describe(self) -> str:
        """One line: which tests ran from where."""
        shown = [f.dest + (f" (from {f.origin})" if f.outside else "") for f in self.tests]
        more = f" and {len(shown) - 4} more" if len(shown) > 4 else ""
        extra = len(self.files) - len(self.tests)
        return (f"tests from {self.source.label} on both sides: {', '.join(shown[:4])}{more}"
                + (f" (+{extra} conftest.py/__init__.py)" if extra else "")
                + "; each side's code, ini file and other files are its commit's own")

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source.given, "commit": self.source.commit,
                "label": self.source.label, "files": [f.to_dict() for f in self.files]}


def _is_path(arg: str, invocation: Path, top: Path, source: Source) -> bool:
    path = arg.partition("::")[0]
    if not path or arg.startswith("-"):
        return False
    absolute = Path(os.path.abspath(Path(invocation, path)))
    if source.commit is None or not _inside(absolute, top):
        return absolute.exists()
    rel = absolute.relative_to(top).as_posix()
    return _git(["cat-file", "-e", f"{source.commit}:{rel}"], top).returncode == 0


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def _repo_files(rel: str, top: Path, source: Source) -> list[str]:
    """The files under ``rel`` (relative to ``top``) in the source, relative to ``top``."""
    if source.commit is None:
        done = _git(["ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", rel],
                    top)
        names = [n for n in done.stdout.decode().split("\0") if n]
        if done.returncode != 0:
            raise TestsFromError(f"git ls-files {rel}: {_last(done)}")
        return sorted(n for n in names if (top / n).is_file())
    done = _git(["ls-tree", "-r", "-z", "--name-only", source.commit, "--", rel], top)
    if done.returncode != 0:
        raise TestsFromError(f"git ls-tree {source.label} {rel}: {_last(done)}")
    return sorted(n for n in done.stdout.decode().split("\0") if n)


def _read(rel: str, top: Path, source: Source) -> bytes | None:
    if source.commit is None:
        path = top / rel
        return path.read_bytes() if path.is_file() else None
    done = _git(["cat-file", "blob", f"{source.commit}:{rel}"], top)
    return done.stdout if done.returncode == 0 else None


def _skipped(parts: Sequence[str]) -> bool:
    return any(p in _SKIPPED_DIRS for p in parts) or (bool(parts) and parts[-1].endswith(".pyc"))


def _disk_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    out = []
    for directory, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS and not d.startswith("."))
        out += [Path(directory, n) for n in sorted(names) if not n.endswith(".pyc")]
    return out


def _common_dir(paths: Sequence[Path]) -> Path:
    dirs = [p if p.is_dir() else p.parent for p in paths]
    return Path(os.path.commonpath([str(d) for d in dirs]))


def stage(args: Sequence[str], invocation: Path, top: Path, source: Source) -> Staged:
    """The files of the selection ``args`` (pytest arguments, paths relative to ``invocation``,
    a directory under ``top``, the repository's toplevel) as ``source`` has them, with the
    ``conftest.py`` (and ``__init__.py``) files of their directories; and ``args`` as the sides
    get them. A path outside the repository is read from disk, whatever the source."""
    invocation, top = invocation.resolve(), top.resolve()
    if not _inside(invocation, top):
        raise TestsFromError(f"the session started in {invocation}, outside the repository {top}")
    subdir = invocation.relative_to(top)
    inside: list[tuple[int, str, str]] = []  # (position in args, rel to top, the rest)
    outside: list[tuple[int, Path, str]] = []
    out_args = list(args)
    for i, arg in enumerate(args):
        if not _is_path(arg, invocation, top, source):
            continue
        path, sep, rest = arg.partition("::")
        absolute = Path(os.path.abspath(Path(invocation, path)))
        if _inside(absolute, top):
            inside.append((i, absolute.relative_to(top).as_posix(), sep + rest))
        else:
            outside.append((i, absolute, sep + rest))
    if not inside and not outside:
        raise TestsFromError(f"no test path in the selection {' '.join(args)!r} is in "
                             f"{source.label}")
    files: dict[str, TestFile] = {}

    def add(dest: str, origin: str, data: bytes | None, only_missing: bool = False,
            outside: bool = False) -> None:
        if data is not None and dest not in files:
            files[dest] = TestFile(dest, origin, data, only_missing, outside)

    where = "" if source.commit is None else f"{source.commit[:10]}:"
    for i, rel, rest in inside:
        names = _repo_files(rel, top, source)
        if not names:
            raise TestsFromError(f"{rel} holds no file in {source.label}")
        for name in names:
            if not _skipped(PurePosixPath(name).parts):
                add(name, where + name, _read(name, top, source))
        out_args[i] = os.path.relpath(top / rel, invocation) + rest
    for name in sorted(files):
        for directory in reversed(PurePosixPath(name).parents):
            for extra, missing in (("conftest.py", False), ("__init__.py", True)):
                rel = (directory / extra).as_posix()
                add(rel, where + rel, _read(rel, top, source), only_missing=missing)
    if outside:
        common = _common_dir([p for _, p, _ in outside])
        prefix = PurePosixPath(subdir.as_posix(), OUTSIDE_DIR)
        for i, absolute, rest in outside:
            for file in _disk_files(absolute):
                relative = file.relative_to(common)
                if relative.as_posix() == "__init__.py":
                    continue  # the common directory is no package in a checkout
                add((prefix / relative.as_posix()).as_posix(), str(file), file.read_bytes(),
                    outside=True)
                # the conftest.py files from the common directory down; the __init__.py files
                # below it (the common directory itself is no package in a checkout)
                for below in reversed(relative.parents):
                    for extra in ("conftest.py", "__init__.py"):
                        candidate = common / below / extra
                        if candidate.is_file() and (extra == "conftest.py" or below.parts):
                            dest = prefix / (below / extra).as_posix()
                            add(dest.as_posix(), str(candidate), candidate.read_bytes(),
                                outside=True)
            out_args[i] = os.path.relpath(Path(top, prefix, absolute.relative_to(common)),
                                          invocation) + rest
    ordered = [files[k] for k in sorted(files)]
    return Staged(source, ordered, out_args, imported_names(ordered))


def _module_names(files: Sequence[TestFile]) -> set[str]:
    """The names the staged files themselves go by (a test module, a helper, its directories)."""
    names: set[str] = set()
    for f in files:
        path = PurePosixPath(f.dest)
        names.update(path.parts[:-1])
        names.add(path.stem)
    return names


def imported_names(files: Sequence[TestFile]) -> list[str]:
    """The top-level modules the staged Python files import (absolute imports, at any depth),
    neither the standard library's, the staged files' own nor this plugin's
    (:data:`PLUGIN_PACKAGE`)."""
    found: set[str] = set()
    for f in files:
        if not f.dest.endswith(".py"):
            continue
        try:
            tree = ast.parse(f.data, filename=f.dest)
        except (SyntaxError, ValueError):
            continue  # its side reports it when collecting
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update(a.name.partition(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.partition(".")[0])
    own = _module_names(files)
    return sorted(n for n in found if n not in sys.stdlib_module_names and n != "__future__"
                  and n not in own and n != PLUGIN_PACKAGE)


# --- in the side process ------------------------------------------------------------------------


def origin_of(name: str) -> str | None:
    """Where the top-level module ``name`` is (imported, or as it would be): the real path of its
    package directory or file; None when it cannot be found."""
    module = sys.modules.get(name)
    file = getattr(module, "__file__", None) if module is not None else None
    locations: list[str] = list(getattr(module, "__path__", []) or []) if module else []
    if not isinstance(file, str) and not locations:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            return None
        file = spec.origin if spec.has_location else None
        locations = list(spec.submodule_search_locations or [])
    if isinstance(file, str):
        real = os.path.realpath(file)
        return os.path.dirname(real) if os.path.basename(real).startswith("__init__.") else real
    return os.path.realpath(locations[0]) if locations else None


def origins(environ: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """:func:`origin_of` each module :data:`PROBE_ENV` names (none when it is unset)."""
    names = (os.environ if environ is None else environ).get(PROBE_ENV, "")
    return {n: origin_of(n) for n in names.split(",") if n}


# --- in the controller's process ----------------------------------------------------------------


def project_has(root: Path, name: str) -> bool:
    """Whether the checkout ``root`` holds a top-level module ``name`` (at its top or in
    ``src/``)."""
    return any((d / name).is_dir() or (d / f"{name}.py").is_file() for d in (root, root / "src"))


@dataclass
class Judgement:
    """What :func:`judge` found: the refusal (one line; None: none) and where each side's
    project modules came from."""

    problem: str | None
    lines: list[str]
    imports: list[dict[str, str | None]]


def missing(found: Mapping[str, Mapping[str, Any]], labels: Mapping[str, str]) -> str | None:
    """The refusal of a selection that imports modules neither side has (``found``: each side's
    origins, name -> path or None), naming them; None when there are none."""
    sides = [dict(found.get(s) or {}) for s in ("base", "head")]
    names = sorted(n for n in set(sides[0]) | set(sides[1])
                   if sides[0].get(n) is None and sides[1].get(n) is None)
    if not names:
        return None
    return (f"the selection imports {', '.join(names)}, which neither side has (base "
            f"{labels['base']}, head {labels['head']})")


def judge(roots: Mapping[str, Path], found: Mapping[str, Mapping[str, Any]]) -> Judgement:
    """Check the origins each side (``base``, ``head``) reported (``found``: name -> path or
    None) against its checkout ``roots[side]``. A module neither side has is left out: an
    optional import, when both collected (else :func:`missing`)."""
    sides = ("base", "head")
    real = {s: Path(os.path.realpath(roots[s])) for s in sides}
    got = {s: {str(k): (str(v) if isinstance(v, str) else None)
               for k, v in dict(found.get(s) or {}).items()} for s in sides}
    names = sorted(n for n in set(got["base"]) | set(got["head"])
                   if got["base"].get(n) is not None or got["head"].get(n) is not None)

    def inside(side: str, path: str | None) -> bool:
        return path is not None and _inside(Path(path), real[side])

    project = [n for n in names if any(inside(s, got[s].get(n)) or project_has(real[s], n)
                                       for s in sides)]
    imports = [{"module": n, "base": got["base"].get(n), "head": got["head"].get(n)}
               for n in project]
    lines = [f"{n}: base imported it from {got['base'].get(n)}, head from {got['head'].get(n)}"
             for n in project]
    if not project:
        shown = ", ".join(f"{n} ({got['head'].get(n) or got['base'].get(n)})" for n in names)
        return Judgement(f"the selection's test files import nothing from either side's checkout "
                         f"({shown or 'no module'}): both sides would measure the same code",
                         lines, imports)
    for n in project:
        base, head = got["base"].get(n), got["head"].get(n)
        if base is not None and base == head:
            return Judgement(f"both sides import {n} from the same place, {base}: the code under "
                             "test must be each side's own", lines, imports)
        for s in sides:
            path = got[s].get(n)
            if path is not None and not inside(s, path):
                return Judgement(f"the {s} side imports {n} from {path}, not from its checkout "
                                 f"{real[s]} (a copy installed elsewhere would be measured; a "
                                 "src/ layout needs the ini's pythonpath = src)", lines, imports)
    return Judgement(None, lines, imports)

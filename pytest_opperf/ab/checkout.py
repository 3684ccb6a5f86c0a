"""The base side of an A/B session: a git revision as a temporary worktree, or a given checkout.

``--opperf-compare=REV`` makes ``git worktree add --detach <tmp>/base <rev>`` of the repository the
rootdir lives in; :meth:`Workspace.close` always removes it again (``git worktree remove --force``,
then ``git worktree prune``), and the controller calls it on every way out: the end of the session,
Ctrl-C, SIGTERM, SIGHUP, a crashed side; the directory is marked with its owner (:mod:`.reclaim`):
what a SIGKILL leaves, the next session reclaims. ``--opperf-compare=DIR`` uses a checkout as it
is. The workspace also holds the side logs and the import shim: a directory with only a
``pytest_opperf`` link to the head's package, put first on each side's ``PYTHONPATH``, so the
head's plugin drives a base older than A/B. No pytest import: errors are :class:`CompareError`
with a one-line message.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..results import is_sha
from .reclaim import GIT_TIMEOUT_S, mark

__all__ = ["Base", "CompareError", "PythonInfo", "Workspace", "check_python", "git_toplevel",
           "interpreter_note", "resolve_base", "shallow_hint", "this_python"]


class CompareError(Exception):
    """The base cannot be used; the message is one line naming the input."""


@dataclass(frozen=True)
class Base:
    """Where the base side comes from."""

    mode: str  # "rev" | "dir"
    given: str  # as the user wrote it
    label: str  # "REV abc1234 (origin/main)" | "DIR /path"
    commit: str | None = None  # the full sha for REV
    directory: Path | None = None  # the checkout for DIR
    toplevel: Path | None = None  # the head's git toplevel (REV)
    subdir: str = ""  # the rootdir relative to the toplevel


def _git(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=GIT_TIMEOUT_S, stdin=subprocess.DEVNULL)


def git_toplevel(path: Path) -> Path | None:
    try:
        done = _git(["rev-parse", "--show-toplevel"], path)
    except (OSError, subprocess.SubprocessError):
        return None
    out = done.stdout.strip()
    return Path(out).resolve() if done.returncode == 0 and out else None


def shallow_hint(toplevel: Path, history: bool = False) -> str:
    """When the repository is a shallow clone (actions/checkout's default depth 1), what to do
    to have the commits it lacks: a revision that does not resolve may simply not be fetched.
    ``history``: every commit between two is needed (a bisection), not one base."""
    try:
        done = _git(["rev-parse", "--is-shallow-repository"], toplevel)
    except (OSError, subprocess.SubprocessError):
        return ""
    if done.returncode != 0 or done.stdout.strip() != "true":
        return ""
    fetch = ("fetch them (with actions/checkout `fetch-depth: 0`, or `git fetch --unshallow`)")
    if history:
        return (f"; the repository is a shallow clone, which lacks older commits: a bisection "
                f"needs every commit from GOOD to BAD: {fetch}")
    return (f"; the repository is a shallow clone, which lacks older commits: {fetch}, or only "
            "the base: `git fetch --deepen=N` for HEAD~N, or `git fetch --depth=1 origin <branch "
            "or full sha>` and then `--opperf-compare=FETCH_HEAD`")


def resolve_base(given: str, rootdir: Path, invocation_dir: Path, required: list[str]) -> Base:
    """``given`` as an existing directory (relative to ``invocation_dir``) or a revision of the
    rootdir's repository. ``required`` are rootdir-relative paths a checkout must hold
    (the selected test paths, the ini file)."""
    if not given.strip():
        raise CompareError("expected a git revision or a directory, got ''")
    candidate = Path(invocation_dir, given)
    if candidate.is_dir():
        directory = candidate.resolve()
        if directory == rootdir.resolve():
            raise CompareError(f"{given!r} is the head's own rootdir {rootdir}, "
                               "expected another checkout")
        missing = [p for p in required if not (directory / p).exists()]
        if missing:
            raise CompareError(f"directory {directory} is no checkout of this project: it has no "
                               f"{', '.join(missing)} (the head's rootdir {rootdir} has)")
        return Base("dir", given, f"DIR {directory}", directory=directory)
    toplevel = git_toplevel(rootdir)
    if toplevel is None:
        raise CompareError(f"{given!r} is no directory, and the rootdir {rootdir} is in no git "
                           "repository to take a revision from")
    try:
        # --end-of-options: the value (perhaps from an ini file) is a revision, never an option
        done = _git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{given}^{{commit}}"],
                    toplevel)
    except (OSError, subprocess.SubprocessError) as exc:
        raise CompareError(f"cannot run git in {toplevel}: {exc}") from None
    sha = done.stdout.strip()
    if done.returncode != 0 or not is_sha(sha):
        raise CompareError(f"{given!r} is neither a directory nor a revision of the repository "
                           f"{toplevel}{shallow_hint(toplevel)}")
    subdir = rootdir.resolve().relative_to(toplevel).as_posix()
    label = f"REV {sha[:10]}" + (f" ({given})" if not sha.startswith(given) else "")
    return Base("rev", given, label, commit=sha, toplevel=toplevel,
                subdir="" if subdir == "." else subdir)


@dataclass(frozen=True)
class PythonInfo:
    executable: str
    version: str
    has_plugin_entry_point: bool  # pytest-opperf installed there (its pytest11 entry point)
    numpy: str | None = None  # the numpy installed there (not imported), or None

    def to_dict(self) -> dict[str, str | None]:
        return {"executable": self.executable, "python": self.version, "numpy": self.numpy}


def this_python() -> PythonInfo:
    """The interpreter this process runs (the head side's)."""
    from ..core.machine import package_version

    return PythonInfo(sys.executable, platform.python_version(), True, package_version("numpy"))


def interpreter_note(base: PythonInfo, head: PythonInfo) -> str | None:
    """A note when the base side runs another interpreter than the head (``--opperf-compare-
    python``): a difference may then be the interpreter's or numpy's, not the code's."""
    def versions(info: PythonInfo) -> str:
        return f"Python {info.version}, numpy {info.numpy or 'not installed'}"

    if (base.version, base.numpy) != (head.version, head.numpy):
        return (f"the base side runs another Python or numpy: base {versions(base)} "
                f"({base.executable}); head {versions(head)} ({head.executable}): a change may be "
                "theirs, not the code's")
    if os.path.realpath(base.executable) != os.path.realpath(head.executable):
        return (f"the base side runs another interpreter ({base.executable}; head "
                f"{head.executable}) with the same {versions(head)}")
    return None


_PROBE = (
    "import json, sys\n"
    "from importlib import metadata\n"
    "import pytest\n"
    "eps = metadata.entry_points()\n"
    "group = eps.select(group='pytest11') if hasattr(eps, 'select') else eps.get('pytest11', [])\n"
    "try:\n"
    "    numpy = metadata.version('numpy')\n"
    "except metadata.PackageNotFoundError:\n"
    "    numpy = None\n"
    "print(json.dumps({'version': sys.version.split()[0], 'pytest': pytest.__version__,\n"
    "                  'numpy': numpy, 'opperf': any(ep.name == 'opperf' for ep in group)}))\n"
)


def check_python(python: str, cwd: Path) -> PythonInfo:
    """Run ``python`` once: it must start, and import pytest."""
    try:
        done = subprocess.run([python, "-c", _PROBE], cwd=cwd, capture_output=True, text=True,
                              timeout=120, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        raise CompareError(f"interpreter {python} does not run: {exc}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise CompareError(f"interpreter {python} cannot import pytest: {last}")
    try:
        info = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise CompareError(f"interpreter {python} printed {done.stdout[:80]!r}, "
                           "expected its version") from None
    numpy = info.get("numpy")
    return PythonInfo(python, str(info["version"]), bool(info["opperf"]),
                      numpy if isinstance(numpy, str) else None)


@dataclass
class Workspace:
    """The temporary directory of one A/B session: the base worktree (REV), logs and the shim."""

    base: Base
    path: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="opperf-ab-")))
    worktree: Path | None = None
    closed: bool = False

    def __post_init__(self) -> None:
        if self.base.toplevel is not None:  # a killed session's worktree: the next one reclaims
            mark(self.path, self.base.toplevel)

    @property
    def shim(self) -> Path:
        return self.path / "shim"

    def log(self, side: str) -> Path:
        return self.path / f"{side}.log"

    def prepare(self, package_dir: Path, head_root: Path | None = None) -> Path:
        """Make the shim and (REV) the worktree; return the base side's root. The worktree's
        name is padded so that the base's root is as long as ``head_root`` (the head's) where
        the temporary directory allows: the two sides' working directories and ``PYTHONPATH``
        then take the same bytes, and so their environments (their size moves the stack and
        with it what a step costs: Mytkowicz et al., ASPLOS 2009)."""
        self.shim.mkdir(exist_ok=True)
        link = self.shim / "pytest_opperf"
        if not link.exists():
            link.symlink_to(package_dir.resolve(), target_is_directory=True)
        if self.base.mode == "dir":
            assert self.base.directory is not None
            return self.base.directory
        assert self.base.toplevel is not None and self.base.commit is not None
        target = self.path / "base"
        if head_root is not None:
            subdir = len(os.sep + self.base.subdir) if self.base.subdir else 0
            short = len(str(head_root)) - subdir - len(str(target))
            target = self.path / ("base" + "-" * max(0, short))
        done = _git(["worktree", "add", "--detach", "--end-of-options", str(target),
                     self.base.commit],
                    self.base.toplevel)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["?"])[-1]
            raise CompareError(f"git worktree add of {self.base.given!r} failed: {last}")
        self.worktree = target
        return target / self.base.subdir if self.base.subdir else target

    def close(self) -> list[str]:
        """Remove the worktree and the directory; idempotent. Returns problems (never raises)."""
        if self.closed:
            return []
        self.closed = True
        problems = []
        if self.worktree is not None and self.base.toplevel is not None:
            try:
                done = _git(["worktree", "remove", "--force", str(self.worktree)],
                            self.base.toplevel)
                if done.returncode != 0 and self.worktree.exists():
                    problems.append(f"git worktree remove {self.worktree}: {done.stderr.strip()}")
                _git(["worktree", "prune"], self.base.toplevel)
            except (OSError, subprocess.SubprocessError) as exc:
                problems.append(f"git worktree remove {self.worktree}: {exc}")
        shutil.rmtree(self.path, ignore_errors=True)
        if self.worktree is not None and self.base.toplevel is not None and self.worktree.exists():
            problems.append(f"worktree {self.worktree} is still there")
        return problems


def side_environment(shim: Path, root: Path, environ: dict[str, str] | None = None) -> dict[str,
                                                                                            str]:
    """The environment of a side: the shim, then the side's root, first on ``PYTHONPATH``."""
    env = dict(os.environ if environ is None else environ)
    parts = [str(shim), str(root)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env

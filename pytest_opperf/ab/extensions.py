"""The compiled extension modules each side has loaded, and what their differences mean (pure).

Each side process names, in its ``collected`` message (:mod:`.protocol`), the compiled extension
modules it has loaded by the end of collection (:func:`pytest_opperf.ab.side.loaded_extensions`:
modules whose ``__file__`` ends in one of ``importlib.machinery.EXTENSION_SUFFIXES``; the imports
of pytest, the plugin, the conftest files and the test modules), each an :class:`Extension`: its
path (relative to the side's checkout root when under it, else absolute) and a fingerprint of the
file's bytes, its size and sha256, hashed once per path and process (about 40 ms for numpy and
the standard library's 18 MB here).

The controller compares the two lists (:func:`compare`, by module name): a module whose bytes
differ, or that one side loads and the other does not, is a difference. A module both sides load
with other bytes from outside both checkouts (or from one side's checkout and outside the other's)
is the environment's, not the code's: an interpreter or numpy build that differs biases every
comparison of the session, and :func:`notes` says so first, naming the first few modules.
Extensions inside the checkouts that differ, and modules that one side's code imports and the
other's does not, are the change under test: an informational note. The same bytes under other
paths are no difference.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Check", "Extension", "compare", "notes", "parse"]

SHOWN = 3  # modules a note names; the rest are counted


@dataclass(frozen=True)
class Extension:
    """One loaded extension module: its name, its path (relative to the side's checkout root when
    ``in_checkout``, else absolute) and its file's size and sha256 (None: unreadable)."""

    module: str
    path: str
    in_checkout: bool
    size: int | None
    sha256: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"module": self.module, "path": self.path, "in_checkout": self.in_checkout,
                "size": self.size, "sha256": self.sha256}


def parse(items: Any) -> list[Extension] | None:
    """A side's ``extensions`` as sent (:meth:`Extension.to_dict` each); None when it sent none or
    they are malformed (a side that does not report them: nothing to check)."""
    if not isinstance(items, list):
        return None
    out = []
    for item in items:
        if not (isinstance(item, dict) and isinstance(item.get("module"), str)
                and isinstance(item.get("path"), str)
                and isinstance(item.get("in_checkout"), bool)
                and (item.get("size") is None or isinstance(item.get("size"), int))
                and (item.get("sha256") is None or isinstance(item.get("sha256"), str))):
            return None
        out.append(Extension(item["module"], item["path"], item["in_checkout"], item.get("size"),
                             item.get("sha256")))
    return out


@dataclass(frozen=True)
class Check:
    """The differences of the two sides' extensions, each ``(module, how)``: ``environment``,
    other bytes outside the checkouts (they bias the session); ``checkout``, the code's (other
    bytes inside both checkouts, or loaded by one side only: the change under test)."""

    environment: list[tuple[str, str]]
    checkout: list[tuple[str, str]]


def compare(base: Iterable[Extension], head: Iterable[Extension]) -> Check:
    """What differs between the two sides' loaded extensions, by module name (sorted): a module on
    one side only, or with other bytes (size or sha256). A module both sides load with other bytes
    is the environment's unless both load it from their checkouts; one that only one side loads is
    the code's (its imports changed: a new ``import csv`` loads ``_csv``), wherever it lies."""
    sides = {"base": {e.module: e for e in base}, "head": {e.module: e for e in head}}
    environment: list[tuple[str, str]] = []
    checkout: list[tuple[str, str]] = []
    for module in sorted(set(sides["base"]) | set(sides["head"])):
        b, h = sides["base"].get(module), sides["head"].get(module)
        if b is None or h is None:  # imported by one side's code only
            checkout.append((module, "on the base only" if h is None else "on the head only"))
        elif (b.size, b.sha256) == (h.size, h.sha256):
            continue
        elif b.in_checkout and h.in_checkout:
            checkout.append((module, "other bytes"))
        elif b.in_checkout or h.in_checkout:
            which = "base" if b.in_checkout else "head"
            environment.append((module, f"other bytes, from the {which}'s checkout only"))
        else:
            environment.append((module, "other bytes"))
    return Check(environment, checkout)


def _named(differences: Sequence[tuple[str, str]]) -> str:
    shown = [f"{module} ({how})" for module, how in differences[:SHOWN]]
    more = len(differences) - SHOWN
    return ", ".join(shown) + (f", +{more} more" if more > 0 else "")


def notes(check: Check) -> list[str]:
    """The notes of the A/B section: the environment's differences first (they bias every
    comparison of the session), then the checkouts' (the change under test); none when the
    sides' extensions are the same."""
    out = []
    if check.environment:
        out.append(f"the two sides load other compiled extensions from outside their checkouts: "
                   f"{_named(check.environment)}: an environment difference, not the code's, "
                   "that may bias every comparison of this session")
    if check.checkout:
        out.append(f"the two sides' code loads other compiled extensions (the change under test): "
                   f"{_named(check.checkout)}")
    return out

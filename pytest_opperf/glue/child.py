"""The one way the plugin starts pytest again: a child's options and environment.

A child pytest (an A/B side, the valgrind child of ``--opperf-instructions``) measures and hands
its runs back; it never writes the user's outputs, appends to the user's history or applies the
user's gate, whatever ``PYTEST_ADDOPTS``, ini files, ``addopts`` or a conftest say. Each option of
the plugin declares its child policy where it is declared (``pytest_opperf.glue.options.OPTIONS``
and ``FLAGS``):

* ``fixed``: the child gets the value its parent gives it (the parent's own, unless the launcher
  sets another), and nothing else: not the command line's, not an ini key's;
* ``stripped``: the child gets the option's default.

The parent's values travel in the child's environment (:data:`OPTIONS_ENV`, JSON), which the
child's :func:`pytest_opperf.plugin._settings` reads instead of its command line and ini file, and
also on the command line (:func:`argv_options`), for a base side running an earlier release of the
plugin that reads only its command line. The launcher's environment drops ``PYTEST_ADDOPTS`` and
``GITHUB_STEP_SUMMARY``. What the child does is its role's (:mod:`pytest_opperf.glue.roles`); what
it hands back is one envelope (:mod:`pytest_opperf.records.handback`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Literal

__all__ = ["OPTIONS_ENV", "POLICIES", "ChildError", "argv_options", "environment", "fixed_values",
           "parent_options", "policy_problems", "strip_opperf_args"]

Policy = Literal["fixed", "stripped"]
POLICIES: tuple[Policy, ...] = ("fixed", "stripped")
OPTIONS_ENV = "OPPERF_CHILD"  # set in a child: the JSON object of the options its parent fixed
_DROPPED_ENV = ("PYTEST_ADDOPTS", "GITHUB_STEP_SUMMARY")


class ChildError(Exception):
    """A child's environment says it is a child, but not in a form this release reads."""


def policy_problems(policies: Mapping[str, str], options: Iterable[str]) -> list[str]:
    """Each option without a policy, or with one that is not a known policy (one line each)."""
    problems = []
    for name in options:
        policy = policies.get(name)
        if policy is None:
            problems.append(f"--opperf-{name} declares no child policy")
        elif policy not in POLICIES:
            problems.append(f"--opperf-{name}: child policy {policy!r}, expected one of "
                            f"{'|'.join(POLICIES)}")
    return problems


def fixed_values(policies: Mapping[str, str], values: Mapping[str, str | None]) -> dict[str, str]:
    """The options a child gets: ``values`` (by option name, as on a command line) of the
    ``fixed`` options; a stripped option's value is refused, as a mistake of the launcher."""
    out = {}
    for name, value in values.items():
        if policies.get(name) != "fixed":
            raise ValueError(f"--opperf-{name} is {policies.get(name, 'undeclared')} for a child; "
                             "only fixed options are given to one")
        if value is not None:
            out[name] = value
    return out


def argv_options(fixed: Mapping[str, str], defaults: Mapping[str, str] | None = None
                 ) -> list[str]:
    """The fixed options as command-line arguments (``--opperf-NAME=VALUE``; flags bare), but
    those whose value is the one in ``defaults`` (an earlier release may not know them)."""
    args = []
    for name, value in fixed.items():
        if defaults is not None and defaults.get(name) == value:
            continue
        if value == "true":
            args.append(f"--opperf-{name}")
        elif value != "false":
            args.append(f"--opperf-{name}={value}")
    return args


def environment(fixed: Mapping[str, str], environ: Mapping[str, str] | None = None
                ) -> dict[str, str]:
    """A child's environment: ``environ`` (default: this process's) without the variables that
    would hand it the user's options or outputs, with its fixed options."""
    env = {k: v for k, v in (os.environ if environ is None else environ).items()
           if k not in _DROPPED_ENV}
    env[OPTIONS_ENV] = json.dumps(dict(fixed), sort_keys=True)
    return env


def parent_options(environ: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """In a child: the options its parent fixed (by option name); None in any other process."""
    raw = (os.environ if environ is None else environ).get(OPTIONS_ENV)
    if raw is None:
        return None
    try:
        fixed = json.loads(raw)
    except ValueError as exc:
        raise ChildError(f"${OPTIONS_ENV} is not JSON: {exc}") from None
    if not isinstance(fixed, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                              for k, v in fixed.items()):
        raise ChildError(f"${OPTIONS_ENV} is not an object of option names to strings: "
                         f"{raw[:80]!r}")
    return fixed


def strip_opperf_args(args: Iterable[str], takes_value: Iterable[str]) -> list[str]:
    """``args`` without ``--opperf`` and every ``--opperf-*`` option (with its value, for the
    options in ``takes_value``, given by name): a child's opperf options come from its parent."""
    valued = {f"--opperf-{name}" for name in takes_value}
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        head, eq, _ = arg.partition("=")
        if arg == "--opperf" or head.startswith("--opperf-"):
            skip = head in valued and not eq
            continue
        out.append(arg)
    return out

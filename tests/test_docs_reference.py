"""The reference pages and the code name the same things.

Each pytest option and ini key, each thresholds key, each subcommand of ``python -m
pytest_opperf`` and its options, each hook and each warning class is read from its one
declaration (``pytest --help``, :data:`TABLES`, the command-line parser, the hook
specifications) and must have its row or heading in ``docs/reference/``; a row there that
names something the code does not have fails too."""

from __future__ import annotations

import argparse
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_opperf import cli, hookspec
from pytest_opperf.comparison.thresholds import TABLES, table_keys

REFERENCE = Path(__file__).resolve().parent.parent / "docs" / "reference"


def page(name: str) -> str:
    return (REFERENCE / name).read_text("utf-8")


def sections(text: str) -> dict[str, str]:
    """Each ``## `title` `` heading's text, up to the next such heading."""
    parts = re.split(r"^## `([^`]+)`.*$", text, flags=re.M)
    return {title: body for title, body in zip(parts[1::2], parts[2::2], strict=True)}


def first_cells(text: str) -> list[str]:
    """The code spans of each table row's first cell (header rows have none)."""
    cells = []
    for line in text.splitlines():
        if line.startswith("| "):
            cells += re.findall(r"`([^`]+)`", line.split("|")[1])
    return cells


@pytest.fixture(scope="module")
def pytest_help(tmp_path_factory) -> str:
    # from an empty directory: the options come from the installed plugin, not a conftest
    done = subprocess.run([sys.executable, "-m", "pytest", "--help"], capture_output=True,
                          text=True, cwd=tmp_path_factory.mktemp("empty"), timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_option_and_ini_key_is_in_the_options_page_and_no_other(pytest_help):
    options = set(re.findall(r"^\s+(--opperf(?:-[a-z0-9-]+)?)", pytest_help, re.M))
    ini_keys = set(re.findall(r"^\s+(opperf_[a-z0-9_]+) \(", pytest_help, re.M))
    assert len(options) > 20 and len(ini_keys) > 20, "pytest --help lists no opperf options"
    rows = [line for line in page("options.md").splitlines()
            if re.match(r"\| (`--opperf|\(ini only\))", line)]
    documented_options = {re.findall(r"`([^`]+)`", row)[0] for row in rows
                          if row.startswith("| `")}
    documented_ini = {re.findall(r"`(opperf_[a-z0-9_]+)`", row)[0] for row in rows}
    assert options - documented_options == set(), "options without a row"
    assert documented_options - options == set(), "rows of options that do not exist"
    assert ini_keys - documented_ini == set(), "ini keys without a row"
    assert documented_ini - ini_keys == set(), "rows of ini keys that do not exist"


def test_every_thresholds_key_is_in_its_tables_section_and_no_other():
    documented = sections(page("thresholds.md"))
    for table in TABLES:
        heading = f"[[{table}]]" if table in ("limit", "compare.override") else f"[{table}]"
        assert heading in documented, f"no section for {heading}"
        cells = {key.strip() for cell in first_cells(documented[heading])
                 for key in cell.split(",")}
        keys = table_keys(table)
        assert set(keys) - cells == set(), f"{heading}: keys without a row"
        assert cells - set(keys) == set(), f"{heading}: rows of keys that do not exist"
        for name, key in keys.items():
            row = next(line for line in documented[heading].splitlines()
                       if line.startswith("| ") and f"`{name}`" in line.split("|")[1])
            inherited = table == "compare.override"  # unset: the [compare] value
            if key.default is not None and not isinstance(key.default, str) and not inherited:
                assert f"| {key.default:g} |" in row, f"{heading} {name}: default {key.default}"


def subcommands() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in cli._parser()._actions
                  if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_subcommand_and_its_options_are_in_the_cli_page_and_no_other():
    documented = sections(page("cli.md"))
    commands = subcommands()
    assert len(commands) >= 8
    headings = {title for title in documented if not title.startswith("-")}
    assert set(commands) - headings == set(), "subcommands without a section"
    assert headings - set(commands) == set(), "sections of subcommands that do not exist"
    for name, parser in commands.items():
        flags = {flag for action in parser._actions for flag in action.option_strings
                 if flag.startswith("--") and flag != "--help"}
        rows = {cell.split()[0] for cell in first_cells(documented[name])}
        assert flags - rows == set(), f"{name}: options without a row"
        assert rows - flags == set(), f"{name}: rows of options that do not exist"


def test_every_hook_and_warning_class_is_in_the_api_page():
    api = page("api.md")
    hooks = [name for name, _ in inspect.getmembers(hookspec, inspect.isfunction)
             if name.startswith("pytest_opperf_")]
    warnings = [name for name, value in vars(hookspec).items()
                if isinstance(value, type) and issubclass(value, Warning)
                and value.__module__ == hookspec.__name__]
    assert len(hooks) >= 4 and len(warnings) >= 5
    for hook in hooks:
        assert f"`{hook}(" in api, hook
    for warning in warnings:
        assert f"`{warning}`" in api or f"`pytest_opperf.hookspec.{warning}`" in api, warning


def test_the_checks_see_a_missing_row():
    text = "## `a`\n\n| option | meaning |\n|---|---|\n| `--x N` | x |\n\n## `b`\n\ntext\n"
    assert sections(text) == {"a": "\n\n| option | meaning |\n|---|---|\n| `--x N` | x |\n\n",
                              "b": "\n\ntext\n"}
    assert first_cells(sections(text)["a"]) == ["--x N"]

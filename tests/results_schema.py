"""The published JSON Schema of results files, as a validator for the tests."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator

SCHEMA: dict[str, Any] = json.loads(
    resources.files("pytest_opperf").joinpath("schema", "opperf-1.schema.json").read_text("utf-8"))
VALIDATOR = Draft202012Validator(SCHEMA)


def problems(doc: Any) -> list[str]:
    """Where and why ``doc`` does not validate (empty: it does)."""
    return [f"{e.json_path}: {e.message}" for e in VALIDATOR.iter_errors(doc)]


def assert_valid(doc: Any) -> None:
    found = problems(doc)
    assert not found, "\n".join(found[:20])

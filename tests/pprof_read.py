"""Reading a differential profile back in the tests: each function's net bytecodes."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

from pytest_opperf.explain.profile import profile_class


def read_profile(path: Path, profile: Any = None) -> Any:
    """The profile message of the gzipped ``path``, parsed into ``profile`` (default: a new
    message of our schema; pass one of pprof's own to read it with that)."""
    profile = profile_class()() if profile is None else profile
    profile.ParseFromString(gzip.decompress(path.read_bytes()))
    return profile


def leaf_names(profile: Any) -> dict[int, str]:
    """Location id -> the name of its (leaf) function."""
    strings = list(profile.string_table)
    names = {f.id: strings[f.name] for f in profile.function}
    return {loc.id: names[loc.line[0].function_id] for loc in profile.location}


def net_bytecodes(profile: Any) -> dict[str, int]:
    """Each function's bytecodes summed over its samples: head minus base (the base negated)."""
    leaf = leaf_names(profile)
    out: dict[str, int] = {}
    for sample in profile.sample:
        name = leaf[sample.location_id[0]]
        out[name] = out.get(name, 0) + sample.value[0]
    return out

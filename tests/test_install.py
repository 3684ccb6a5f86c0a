"""The extras resolve to what the code needs: the ``gpu`` extra can only give a
CuPy with the CUDA libraries (its ``ctk`` extra, CuPy >= 14.0) and a numpy
that CuPy 14 accepts (>= 2.0), in pyproject.toml and in the installed metadata."""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).parent.parent

# Facts of CuPy's own packaging (cupy-cuda12x on PyPI): the ctk extra first
# appears in 14.0; 13.6, the last 13.x, has none (pip then warns and installs
# CuPy without CUDA libraries). cupy-cuda12x 14.2.0 requires numpy<2.6,>=2.0.
CTK_FIRST = "14.0"
WITHOUT_CTK = ("13.3", "13.6.0")
CUPY14_NUMPY = SpecifierSet(">=2.0")
NUMPY_1 = ("1.24.4", "1.26.4")


def _gpu_requirements(lines: list[str]) -> dict[str, Requirement]:
    """The requirements that apply with the ``gpu`` extra, by name (markers evaluated)."""
    reqs = {}
    for line in lines:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate({"extra": "gpu"}):
            reqs.setdefault(req.name, []).append(req)
    return {name: _merged(rs) for name, rs in reqs.items()}


def _merged(reqs: list[Requirement]) -> Requirement:
    merged = Requirement(reqs[0].name)
    merged.extras = set().union(*(r.extras for r in reqs))
    merged.specifier = SpecifierSet(",".join(str(r.specifier) for r in reqs if str(r.specifier)))
    return merged


def _check(reqs: dict[str, Requirement]) -> None:
    cupy = reqs["cupy-cuda12x"]
    assert "ctk" in cupy.extras, "the gpu extra must ask for cupy's ctk extra (the CUDA libraries)"
    assert not any(cupy.specifier.contains(v) for v in WITHOUT_CTK), \
        f"cupy {cupy.specifier} admits a CuPy without the ctk extra"
    assert cupy.specifier.contains(CTK_FIRST) or cupy.specifier.contains("14.2.0")
    numpy = reqs["numpy"]
    assert not any(numpy.specifier.contains(v) for v in NUMPY_1), \
        f"numpy {numpy.specifier} with the gpu extra admits numpy 1.x, which CuPy 14 refuses"
    assert numpy.specifier.contains("2.0.0") and CUPY14_NUMPY.contains("2.0.0")


def _pyproject_lines() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for extra, deps in project["optional-dependencies"].items():
        lines += [
            f"{d}; extra == '{extra}'" if ";" not in d else f"{d} and extra == '{extra}'"
            for d in deps
        ]
    return lines


def test_the_gpu_extra_and_the_numpy_floor_agree_in_pyproject():
    _check(_gpu_requirements(_pyproject_lines()))


def test_the_installed_metadata_says_the_same():
    try:
        lines = metadata.requires("pytest-opperf") or []
    except metadata.PackageNotFoundError:
        pytest.skip("pytest-opperf is not installed")
    assert "gpu" in (metadata.metadata("pytest-opperf").get_all("Provides-Extra") or [])
    # a stale editable install fails here: pip install -e '.[test]' again
    _check(_gpu_requirements(lines))


def test_the_check_catches_the_old_extra():
    old = ["numpy>=1.24", "cupy-cuda12x[ctk]>=13.3; extra == 'gpu'"]
    with pytest.raises(AssertionError, match="admits a CuPy without the ctk extra"):
        _check(_gpu_requirements(old))
    no_numpy_floor = ["numpy>=1.24", "cupy-cuda12x[ctk]>=14.0; extra == 'gpu'"]
    with pytest.raises(AssertionError, match="admits numpy 1.x"):
        _check(_gpu_requirements(no_numpy_floor))


def test_the_torch_extra_states_a_range_and_ci_pins_the_release_it_tests():
    """Installing pytest-opperf[torch] must keep a user's own torch: the extra states the
    releases supported; the exact release CI tests is pinned in .ci/run alone."""
    import re

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (torch,) = [Requirement(d) for d in project["optional-dependencies"]["torch"]]
    assert torch.name == "torch"
    assert not [s for s in torch.specifier if s.operator in ("==", "===")], torch
    pinned = re.findall(r"pip install[^\n]*\btorch==(\S+)", (ROOT / ".ci" / "run").read_text())
    assert len(pinned) == 1, pinned
    assert torch.specifier.contains(pinned[0])
    assert torch.specifier.contains("2.7.0") and not torch.specifier.contains("2.6.0")

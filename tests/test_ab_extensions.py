"""The check that both sides load the same compiled extensions: what a side reports, the pure
comparison, and the notes of the A/B section."""

from __future__ import annotations

import hashlib
import importlib.machinery
import types

import pytest

from pytest_opperf.ab import extensions, side
from pytest_opperf.ab.extensions import Extension
from tests.test_ab_controller import controller, run_session

SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def ext(module: str, sha: str = "aa", inside: bool = False, path: str | None = None) -> Extension:
    where = path or (f"pkg/{module}{SUFFIX}" if inside else f"/env/{module}{SUFFIX}")
    return Extension(module, where, inside, 10, sha)


def test_other_bytes_outside_the_checkouts_are_the_environments_the_rest_the_codes():
    base = [ext("_json"), ext("numpy._core._umath", "b1"), ext("_only_base"),
            ext("rf._ops", "k1", inside=True), ext("rf._new", inside=True),
            ext("_same_bytes", path="/env-a/_same_bytes.so"), ext("mixed", inside=True)]
    head = [ext("_json"), ext("numpy._core._umath", "b2"), ext("_only_head"),
            ext("rf._ops", "k2", inside=True), ext("_same_bytes", path="/env-b/_same_bytes.so"),
            ext("mixed", "m2")]
    check = extensions.compare(base, head)
    # the same bytes under another path are no difference; in both checkouts or imported by
    # one side only, the change's
    assert check.checkout == [("_only_base", "on the base only"),
                              ("_only_head", "on the head only"),
                              ("rf._new", "on the base only"), ("rf._ops", "other bytes")]
    assert check.environment == [("mixed", "other bytes, from the base's checkout only"),
                                 ("numpy._core._umath", "other bytes")]
    assert extensions.compare(base, base) == extensions.Check([], [])


def test_the_environments_differences_come_first_and_name_the_first_few():
    check = extensions.Check([(f"_m{i}", "other bytes") for i in range(5)],
                             [("rf._ops", "other bytes")])
    loud, informational = extensions.notes(check)
    assert loud.startswith("the two sides load other compiled extensions from outside their "
                           "checkouts: _m0 (other bytes), _m1 (other bytes), _m2 (other bytes), "
                           "+2 more: an environment difference, not the code's")
    assert informational == ("the two sides' code loads other compiled extensions (the change "
                             "under test): rf._ops (other bytes)")
    assert extensions.notes(extensions.Check([], [])) == []


def test_a_side_names_its_extensions_by_checkout_path_and_hashes_each_file_once(tmp_path,
                                                                                 monkeypatch):
    monkeypatch.setattr(side, "_FINGERPRINTS", {})
    root, elsewhere = tmp_path / "checkout", tmp_path / "env"
    (root / "rf").mkdir(parents=True)
    elsewhere.mkdir()
    inside, outside = root / "rf" / f"_ops{SUFFIX}", elsewhere / f"_lib{SUFFIX}"
    inside.write_bytes(b"compiled in the checkout")
    outside.write_bytes(b"installed elsewhere")
    modules = {"rf._ops": types.SimpleNamespace(__file__=str(inside)),
               "_lib": types.SimpleNamespace(__file__=str(outside)),
               "rf.pure": types.SimpleNamespace(__file__=str(root / "rf" / "pure.py")),
               "builtin": types.SimpleNamespace()}
    got = side.loaded_extensions(root, modules)
    assert got == [
        Extension("_lib", str(outside.resolve()), False, 19,
                  hashlib.sha256(b"installed elsewhere").hexdigest()),
        Extension("rf._ops", f"rf/_ops{SUFFIX}", True, 24,
                  hashlib.sha256(b"compiled in the checkout").hexdigest())]
    outside.write_bytes(b"changed after it was hashed")
    assert side.loaded_extensions(root, modules) == got  # hashed once per path and process
    assert extensions.parse([e.to_dict() for e in got]) == got  # what the controller reads


def test_a_real_side_reports_the_extensions_it_loaded(tmp_path):
    pytest.importorskip("numpy")
    got = {e.module: e for e in side.loaded_extensions(tmp_path)}
    assert any(name.startswith("numpy.") for name in got)
    assert all(not e.in_checkout and e.sha256 and e.size for e in got.values())


@pytest.mark.parametrize("items", [None, "x", [{"module": "m"}], [{"module": "m", "path": "p",
                                                                    "in_checkout": "no",
                                                                    "size": 1, "sha256": "a"}]])
def test_a_side_that_reports_no_usable_list_is_not_checked(items):
    assert extensions.parse(items) is None


@pytest.mark.parametrize(("head", "loud", "informational"), [
    ([ext("_json").to_dict(), ext("numpy._umath", "b2").to_dict()], True, False),
    ([ext("_json").to_dict(), ext("numpy._umath").to_dict(),
      ext("rf._ops", inside=True).to_dict()], False, True),
    ([ext("_json").to_dict(), ext("numpy._umath").to_dict()], False, False),
])
def test_the_note_appears_when_the_sides_extensions_differ(tmp_path, head, loud, informational):
    base = [ext("_json").to_dict(), ext("numpy._umath").to_dict()]
    c = controller(tmp_path, {"base": 1.0, "head": 2.0}, {"base": ["t::a"], "head": ["t::a"]},
                   extensions={"base": base, "head": head})
    result = run_session(c)
    said = [n for n in result.notes if "compiled extensions" in n]
    assert len(said) == loud + informational
    if loud:  # first, and a warning (the session shows it in red too)
        assert result.notes[0].startswith("the two sides load other compiled extensions from "
                                          "outside their checkouts: numpy._umath (other bytes)")
        assert c.warnings == [result.notes[0]]
    else:
        assert c.warnings == []
    if informational:
        assert said[-1] == ("the two sides' code loads other compiled extensions (the change "
                            "under test): rf._ops (on the head only)")

"""Tests of the scope tree."""

from __future__ import annotations

import pytest

import reference_framework as rf


def test_find_or_create_locally_and_find_through_parents():
    root = rf.Scope()
    w = root.var("w")
    w.value = 1
    assert root.var("w") is w
    kid = root.new_scope()
    grandkid = kid.new_scope()
    assert grandkid.find_var("w") is w
    assert grandkid.find_local_var("w") is None
    shadow = kid.var("w")
    assert shadow is not w and grandkid.find_var("w") is shadow
    assert root.find_var("nothing") is None and "w" in grandkid and "nothing" not in grandkid


def test_delete_scope_and_drop_kids():
    root = rf.Scope()
    a, b = root.new_scope(), root.new_scope()
    a.var("t").value = [1, 2]
    a.new_scope().var("u")
    assert root.kids() == [a, b]
    root.delete_scope(a)
    assert root.kids() == [b]
    assert a.local_var_names() == [] and a.kids() == [] and a.parent is None
    with pytest.raises(ValueError, match="not a kid"):
        root.delete_scope(a)
    root.new_scope()
    root.drop_kids()
    assert root.kids() == []


def test_scope_guard():
    outer = rf.global_scope()
    mine = rf.Scope()
    with rf.scope_guard(mine):
        assert rf.global_scope() is mine
    assert rf.global_scope() is outer

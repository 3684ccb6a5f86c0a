"""Fitting text and tables to a terminal width (pure)."""

from pytest_opperf.reports.layout import fit, listing, middle, run_group, table, wrap


def test_fit_and_middle_mark_the_cut():
    assert fit("abcdefghij", 10) == "abcdefghij"
    assert fit("abcdefghijk", 10) == "abcdefg..."
    assert middle("suites/test_x.py::t[long]", 13) == "suite...long]"
    assert len(middle("x" * 50, 20)) == 20


def test_wrap_indents_continuation_lines_and_keeps_blank_lines():
    assert wrap("note: one two three four", 14) == ["note: one two", "  three four"]
    assert wrap("", 10) == [""]
    assert all(len(line) <= 12 for line in wrap("a" * 30 + " b", 12))


def test_listing_caps_the_items():
    ids = [f"t[{i}]" for i in range(160)]
    assert listing(ids) == "t[0], t[1], t[2], t[3], t[4] ... and 155 more"
    assert listing(ids[:2]) == "t[0], t[1]"


def test_run_group_is_a_glob_of_the_test_or_module():
    assert run_group("s/t.py::test_op[conv2d-N8-k3]") == ("s/t.py::test_op[*]", "conv2d-N8-k3")
    assert run_group("s/test_executor.py::test_clone") == ("s/test_executor.py::*", "test_clone")
    assert run_group("bare") == ("", "bare")


ROWS = [["conv2d_grad", "1302.84", "38.7%"], ["  GemmTimer", "877.51", ""],
        ["relu", "43.43", "1.3%"]]
HEAD, ALIGN = ["name", "total", "share"], ("left", "right", "right")


def test_table_untouched_when_it_fits():
    lines = table(ROWS, HEAD, ALIGN, 100, ["", "heading"])
    assert [line.split() for line in lines] == [
        HEAD, ["conv2d_grad", "1302.84", "38.7%"], ["heading"], ["GemmTimer", "877.51"],
        ["relu", "43.43", "1.3%"]]
    assert lines[3].startswith("  GemmTimer")


def test_table_puts_a_name_too_wide_on_its_own_line():
    wide = max(len(line) for line in table(ROWS, HEAD, ALIGN, 100))
    lines = table(ROWS, HEAD, ALIGN, wide - 5)
    assert all(len(line) <= wide - 5 for line in lines)
    assert lines[1:4] == ["conv2d_grad", "      1302.84  38.7%", "  GemmTimer"]
    assert lines[5].split() == ["relu", "43.43", "1.3%"]  # a short name stays on its row

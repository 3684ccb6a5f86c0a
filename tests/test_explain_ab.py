"""Why it got slower, end to end: an A/B session (``--opperf-compare=HEAD``) whose head adds a
loop to the helper ``busy`` of its e2e test explains the regression by that helper, with its
changed lines and the command that reruns it, in the report and the results JSON, and writes
the differential profile beside the results."""

from __future__ import annotations

import gzip
import json

from pytest_opperf.explain.profile import profile_class
from tests.ab_suites import make_repo, suite
from tests.results_schema import assert_valid

pytest_plugins = ["pytester"]

COUNTED = "run.counting_pass(lambda: busy(N))"  # the counting pass, after the window
BODY = "    x = 0\n"
LOOP = "    x = 0\n    for i in range(2 * n):  # the head's added work\n        x += i\n"


def test_an_ab_session_names_the_helper_that_does_more_work(pytester):
    base = suite(n=2000, after=COUNTED)
    head = base.replace(BODY, LOOP, 1)
    make_repo(pytester.path, {"test_s.py": base}, {"test_s.py": head})
    busy = base.splitlines().index("def busy(n):") + 1
    result = pytester.runpytest_subprocess("--opperf", "--opperf-compare-timeout=60", "-p",
                                           "no:cacheprovider", "--opperf-compare=HEAD",
                                           "--opperf-json=out.json", "test_s.py::test_e2e")
    out = result.stdout.str()
    assert result.ret == 1 and "FAIL test_s.py::test_e2e examples_per_sec" in out, out
    assert "why it got slower (work counts per step, head - base):" in out, out
    lines = out.splitlines()
    at = next(i for i, x in enumerate(lines) if x.strip() == "test_e2e examples_per_sec")
    assert lines[at + 1].strip().startswith("more work: the step does more work per step")
    assert lines[at + 2].strip().endswith(f"bytecodes in busy (test_s.py:{busy})"), lines[at + 2]
    assert f"changed lines: test_s.py:{busy + 2}-{busy + 3}" in out
    assert "rerun: python -m pytest test_s.py::test_e2e --opperf --opperf-compare=HEAD" in out
    data = json.loads((pytester.path / "out.json").read_text())
    assert_valid(data)
    decision = next(d for d in data["compare"]["decisions"] if d["metric"] == "examples_per_sec")
    assert decision["explain"]["class"] == "more work"
    assert decision["explain"]["functions"][0]["name"] == "busy"
    profile = profile_class()()
    profile.ParseFromString(gzip.decompress((pytester.path / "explain.pb.gz").read_bytes()))
    assert len(profile.sample) > 0
    assert (pytester.path / "explain-bytecodes.folded").read_text().count("busy (test_s.py:") == 1

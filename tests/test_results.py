"""Results JSON: round trip, refusal of unknown schemas and malformed files, atomic writes."""

import json
import os
import stat
import subprocess
from dataclasses import replace

import pytest

from pytest_opperf.core.machine import commit_info, machine_info, same_hardware
from pytest_opperf.device import DeviceInfo
from pytest_opperf.records.atomic import write_json_atomic
from pytest_opperf.records.checks import results_from_dict
from pytest_opperf.records.reader import read_results
from pytest_opperf.results import (
    SCHEMA,
    ResultsError,
    StatResult,
    baseline_file,
    write_results,
)
from tests.opperf_factories import e2e_run, results


def test_round_trip_keeps_every_field(tmp_path):
    run = e2e_run(stats={"conv2d": [1.0, 2.0], "Im2ColTimer": [0.5, 0.25]})
    run.stats = [replace(run.stats[0], flops=1e9), replace(run.stats[1], parent="conv2d")]
    run.notes.append("a note")
    rs = results(run)
    path = tmp_path / "r.json"
    write_results(path, rs)
    data = json.loads(path.read_text())
    assert data["schema"] == SCHEMA
    assert {
        "id",
        "kind",
        "config",
        "device",
        "timing",
        "wall_s",
        "examples",
        "batches",
        "examples_per_sec",
        "sec_per_batch",
        "python_share",
        "stats",
        "counts",
    } <= set(data["runs"][0])
    assert "flops" in data["runs"][0]["stats"][0] and "flops" not in data["runs"][0]["stats"][1]
    back = read_results(path)
    assert back.runs[0].to_dict() == run.to_dict()  # samples come back packed, array('d')
    assert list(back.runs[0].stats[0].samples_ms) == [1.0, 2.0]
    assert back.machine == rs.machine


def test_trace_stays_out_of_files_unless_asked():
    run = e2e_run()
    run.trace = {"step": 2, "dur_ns": 5, "events": []}
    assert "trace" not in run.to_dict()
    assert run.to_dict(with_trace=True)["trace"]["step"] == 2
    assert results_from_dict(results(run).to_dict(with_trace=True)).runs[0].trace == run.trace


@pytest.mark.parametrize("text, message", [
    ("{not json", "not valid JSON"),
    ('{"schema": "opperf/9", "runs": []}', "unknown results schema 'opperf/9'"),
    ('{"runs": []}', "unknown results schema None"),
    ("[]", "top level is not an object"),
    ('{"schema": "opperf/1"}', "runs is missing"),
    ('{"schema": "opperf/1", "runs": [{"id": "a", "kind": "nope"}]}', "kind must be one of"),
    ('{"schema": "opperf/1", "runs": [{"id": "a", "kind": "e2e", "wall_s": "1"}]}', "wall_s"),
])
def test_reader_refuses_with_one_line(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ResultsError) as info:
        read_results(path)
    assert message in str(info.value)
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)


def test_reader_refuses_bad_stat(tmp_path):
    data = results(e2e_run()).to_dict()
    data["runs"][0]["stats"][0]["count"] = 1.5
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ResultsError, match=r"\('conv2d'\)\.count"):
        read_results(path)


def test_reader_missing_file_and_directory(tmp_path):
    with pytest.raises(ResultsError, match="no such file"):
        read_results(tmp_path / "absent.json")
    with pytest.raises(ResultsError, match="is a directory"):
        read_results(tmp_path)


def test_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "base.json"
    write_json_atomic(path, {"old": True})

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        write_json_atomic(path, {"new": True})
    assert json.loads(path.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["base.json"]


def test_unserialisable_value_keeps_the_old_file(tmp_path):
    path = tmp_path / "base.json"
    write_json_atomic(path, {"old": True})
    with pytest.raises(ValueError):
        write_json_atomic(path, {"x": float("nan")})
    assert json.loads(path.read_text()) == {"old": True}
    assert len(list(tmp_path.iterdir())) == 1


def test_machine_info_has_the_facts():
    info = machine_info(DeviceInfo(name="cuda:0 (X)", is_gpu=True, device_class="x", gpu_model="X",
                                   driver="1", cuda="13"))
    assert info["cores"] == os.cpu_count()
    assert info["cpu"]
    assert info["numpy"]  # installed, so its version is known without importing it
    assert info["gpu"] == {"model": "X", "driver": "1", "cuda": "13"}
    assert info["device_class"] == "x"
    assert machine_info()["gpu"] is None


def test_commit_info_in_a_repository(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "f").write_text("1")
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    subprocess.run(["git", "-C", str(tmp_path), "add", "f"], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "commit", "-qm", "x"], check=True, env=env)
    info = commit_info(tmp_path)
    assert len(info["sha"]) == 40 and info["dirty"] is False
    (tmp_path / "f").write_text("2")
    assert commit_info(tmp_path)["dirty"] is True


def test_commit_info_without_git(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no git executable
    assert commit_info(tmp_path) is None


def test_same_hardware():
    a = {"cpu": "A", "device_class": "cpu", "gpu": None}
    assert same_hardware(a, dict(a)) is None
    assert "cpu 'A' vs 'B'" in same_hardware(a, {**a, "cpu": "B"})
    assert same_hardware(a, {}) is None  # unknown is not different
    g = {"device_class": "h200", "gpu": {"model": "H200"}}
    assert "gpu" in same_hardware(g, {"device_class": "h200", "gpu": {"model": "H100"}})


def test_baseline_file_name(tmp_path):
    assert baseline_file(tmp_path, "nvidia-h200", "full") == tmp_path / "nvidia-h200-full.json"


def test_written_files_get_the_umask_mode_not_a_private_one(tmp_path):
    from pytest_opperf.records.atomic import write_text_atomic

    umask = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "base.json", "{}\n")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "base.json").stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["base.json"]


def test_samples_are_stored_to_five_significant_digits():
    d = StatResult(
        "relu", None, 2, 0.3, 0.15, 0.1, 0.2, samples_ms=[0.123456789, 12345.6789]
    ).to_dict()
    assert d["samples_ms"] == [0.12346, 12346.0]


def test_reading_a_file_of_samples_takes_a_small_multiple_of_its_size(tmp_path):
    """Samples are packed as array('d') while the file is parsed: 8 bytes each, where lists
    of floats took 32 (a 200 MB file took 1.2 GB to read, 6x; now 2x)."""
    import tracemalloc
    from array import array

    from tests.opperf_factories import e2e_run

    steps = 1000
    runs = [e2e_run(run_id=f"suite.py::test_{i}",
                    stats={f"op{j}": [0.5 + (i * 7 + j * 13 + k) % 97 / 100 for k in range(steps)]
                           for j in range(40)})
            for i in range(3)]
    path = tmp_path / "big.json"
    write_results(path, results(*runs))
    size = path.stat().st_size
    tracemalloc.start()
    try:
        back = read_results(path)
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(back.runs[0].stats[0].samples_ms, array)
    assert back.runs[2].stat("op39").samples_ms[999] == runs[2].stat("op39").samples_ms[999]
    assert kept < 2 * size and peak < 3 * size, (kept / size, peak / size)


@pytest.mark.parametrize("samples", [[1, 2.0], [True, 1.0], [1e999], [-1.0, 2.0], ["1.0"]])
def test_samples_that_are_not_floats_still_meet_the_checks(tmp_path, samples):
    run = e2e_run(stats={"conv2d": [1.0, 2.0]})
    doc = results(run).to_dict()
    doc["runs"][0]["stats"][0]["samples_ms"] = samples
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc).replace("Infinity", "1e999"))
    if samples == [1, 2.0]:  # whole numbers are numbers
        assert list(read_results(path).runs[0].stats[0].samples_ms) == [1.0, 2.0]
        return
    with pytest.raises(ResultsError, match="samples_ms is not a list of finite numbers >= 0"):
        read_results(path)


def test_compare_and_the_baseline_gate_look_each_run_up_once():
    """Linear in the number of runs: a lookup by id per run, not a scan of the baseline
    (100k runs took 266 s). Counted as comparisons of run ids, not timed."""
    comparisons = 0

    class Id(str):
        __hash__ = str.__hash__

        def __eq__(self, other):
            nonlocal comparisons
            comparisons += 1
            return str.__eq__(self, other)

    n = 300
    base = results(*[e2e_run(run_id=Id(f"suite.py::test_{i}")) for i in range(n)])
    new = results(*[e2e_run(run_id=Id(f"suite.py::test_{i}")) for i in range(n)])
    from pytest_opperf.comparison.gate import evaluate

    verdict = evaluate(new, None, base, "base.json")
    assert verdict.passed and verdict.checks >= n
    assert comparisons < 5 * n, comparisons

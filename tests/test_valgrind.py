"""Tests of instruction counting under callgrind: client requests natively, the dump parser on real
and malformed files, the parent's command line and errors, and steps counted end to end.

The end-to-end tests run tiny Python programs under valgrind (a few seconds each) and skip when
valgrind is not installed or client requests cannot be issued on this machine."""

from __future__ import annotations

import re
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pytest_opperf.workcounts import callgrind_dumps, valgrind, valgrind_run
from pytest_opperf.workcounts.callgrind import Callgrind
from pytest_opperf.workcounts.callgrind_dumps import CallgrindFormatError
from pytest_opperf.workcounts.valgrind import (
    CALLGRIND_DUMP_STATS,
    CALLGRIND_DUMP_STATS_AT,
    CALLGRIND_START_INSTRUMENTATION,
    CALLGRIND_STOP_INSTRUMENTATION,
    CALLGRIND_TOGGLE_COLLECT,
    CALLGRIND_ZERO_STATS,
    RUNNING_ON_VALGRIND,
    ValgrindError,
)

requests_here = pytest.mark.skipif(valgrind.client_request_problem() is not None,
                                   reason=str(valgrind.client_request_problem()))
needs_valgrind = pytest.mark.skipif(valgrind_run.problem() is not None,
                                    reason=str(valgrind_run.problem()))


def test_the_module_imports_no_pytest():
    # the child imports it in the middle of a test run, and the plugin's purity rule holds
    code = ("import sys, pytest_opperf.workcounts.valgrind, pytest_opperf.workcounts.callgrind, "
            "pytest_opperf.workcounts.callgrind_dumps, pytest_opperf.workcounts.valgrind_run\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('pytest', '_pytest', "
            "'numpy', 'reference_framework'))\n"
            "assert not bad, bad\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# --- client requests ---------------------------------------------------------------------------

def test_request_codes_are_valgrind_h_and_callgrind_h():
    # valgrind.h: VG_USERREQ__RUNNING_ON_VALGRIND = 0x1001; callgrind.h: the 'C','T' tool base
    # (0x43 << 24 | 0x54 << 16) then DUMP_STATS, ZERO_STATS, TOGGLE_COLLECT, DUMP_STATS_AT,
    # START_INSTRUMENTATION, STOP_INSTRUMENTATION in that order
    assert RUNNING_ON_VALGRIND == 0x1001
    assert [CALLGRIND_DUMP_STATS, CALLGRIND_ZERO_STATS, CALLGRIND_TOGGLE_COLLECT,
            CALLGRIND_DUMP_STATS_AT, CALLGRIND_START_INSTRUMENTATION,
            CALLGRIND_STOP_INSTRUMENTATION] == [0x43540000, 0x43540001, 0x43540002, 0x43540003,
                                                0x43540004, 0x43540005]


@pytest.mark.skipif(not Path("/usr/include/valgrind/callgrind.h").exists(),
                    reason="valgrind's headers are not installed")
def test_request_order_matches_the_installed_callgrind_h():
    header = Path("/usr/include/valgrind/callgrind.h").read_text()
    enum = re.search(r"enum\s*\{(.*?)\}\s*Vg_CallgrindClientRequest", header, re.S)
    assert enum is not None
    names = re.findall(r"VG_USERREQ__(\w+)", enum.group(1))
    assert names == ["DUMP_STATS", "ZERO_STATS", "TOGGLE_COLLECT", "DUMP_STATS_AT",
                     "START_INSTRUMENTATION", "STOP_INSTRUMENTATION"]
    assert "VG_USERREQ_TOOL_BASE('C','T')" in enum.group(1)


@requests_here
@pytest.mark.parametrize("default", [0, 7, 2**64 - 1])
def test_natively_a_request_returns_its_default(default):
    assert valgrind.client_request(RUNNING_ON_VALGRIND, default=default) == default
    assert valgrind.client_request(CALLGRIND_ZERO_STATS, 1, 2, 3, 4, 5, default=default) == default
    assert valgrind.running_on_valgrind() == 0
    assert not Callgrind().running()


@requests_here
def test_a_request_argument_must_be_a_word():
    with pytest.raises(ValueError, match="unsigned 64-bit"):
        valgrind.client_request(RUNNING_ON_VALGRIND, -1)
    with pytest.raises(ValueError, match="unsigned 64-bit"):
        valgrind.client_request(RUNNING_ON_VALGRIND, default=2**64)


@pytest.fixture
def fresh_requests(monkeypatch):
    """The module builds its request function once per process: forget it for this test."""
    monkeypatch.setattr(valgrind, "_request_built", False)
    monkeypatch.setattr(valgrind, "_request_fn", None)
    monkeypatch.setattr(valgrind, "_request_problem", None)


@pytest.mark.parametrize("system, machine", [("linux", "aarch64"), ("darwin", "x86_64"),
                                             ("win32", "AMD64")])
def test_another_platform_is_refused_with_a_message(fresh_requests, monkeypatch, system, machine):
    monkeypatch.setattr(valgrind.sys, "platform", system)
    monkeypatch.setattr(valgrind.platform, "machine", lambda: machine)
    message = valgrind.client_request_problem()
    assert message is not None and "x86_64 Linux" in message and machine in message
    with pytest.raises(ValgrindError, match="x86_64 Linux"):
        valgrind.client_request(RUNNING_ON_VALGRIND)
    assert valgrind.running_on_valgrind() == 0
    assert valgrind_run.problem() == message
    with pytest.raises(ValgrindError, match="not running under valgrind.*x86_64 Linux"):
        Callgrind().start_pass()


@requests_here
def test_refused_executable_memory_is_a_message(fresh_requests, monkeypatch):
    real_cdll = valgrind.ctypes.CDLL

    class NoExec:
        """The C library, but mprotect fails as under a policy that forbids executable pages."""

        def __init__(self, *args, **kwargs):
            self._libc = real_cdll(*args, **kwargs)
            self.mmap = self._libc.mmap

            def mprotect(*_args):
                valgrind.ctypes.set_errno(13)  # EACCES
                return -1

            self.mprotect = mprotect

    monkeypatch.setattr(valgrind.ctypes, "CDLL", NoExec)
    message = valgrind.client_request_problem()
    assert message is not None and "executable memory is refused" in message
    assert "Permission denied" in message
    with pytest.raises(ValgrindError, match="executable memory"):
        valgrind.client_request(RUNNING_ON_VALGRIND)


@requests_here
def test_callgrind_natively_refuses_to_start_a_pass():
    cg = Callgrind()
    with pytest.raises(ValgrindError, match="not running under valgrind"):
        cg.start_pass()
    with pytest.raises(RuntimeError, match="no pass is open"):
        cg.begin_step()
    with pytest.raises(RuntimeError, match="no step was begun"):
        cg.end_step("A")
    with pytest.raises(RuntimeError, match="no pass is open"):
        cg.end_pass()


@requests_here
def test_step_labels_that_a_dump_cannot_carry_are_refused(monkeypatch):
    # a pass opened natively (the requests are no-ops), to reach end_step's checks
    monkeypatch.setattr(Callgrind, "running", lambda self: True)
    cg = Callgrind()
    cg.start_pass()
    for bad in ["", " A", "A ", "A\nB", "A  B", "é", "x" * 201]:
        cg.begin_step()
        with pytest.raises(ValueError, match="step label"):
            cg.end_step(bad)
    cg.begin_step()
    cg.end_step("train_step[3] bs=32")
    cg.begin_step()
    with pytest.raises(ValueError, match="already used"):
        cg.end_step("train_step[3] bs=32")
    cg.end_pass()


# --- the parser --------------------------------------------------------------------------------

# A dump callgrind 3.19 wrote for a step labelled "A" (Callgrind.end_step), its cost lines cut to
# a few and its trailing blanks dropped: the parser reads the header and the totals, never sums the
# lines (the end-to-end tests parse whole files).
REAL_STEP_DUMP = """\
# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 21015
cmd:  /work/.venv/bin/python /tmp/prog.py 10000 100000
part: 2


desc: I1 cache:
desc: D1 cache:
desc: LL cache:

desc: Timerange: Basic block 35968 - 2619894
desc: Trigger: Client Request: A

positions: line
events: Ir
summary: 4129589


ob=(21) /usr/lib/x86_64-linux-gnu/libffi.so.8.1.2
fl=(2) ???
fn=(838) 0x0000000000006250
0 60
cfn=(784) 0x00000000000061b0
calls=4 0
0 79

totals: 4129589
"""

# The dump callgrind writes at exit: after ZERO_STATS its summary wraps below zero (a callgrind
# quirk), so only step dumps are held to summary == totals.
REAL_EXIT_DUMP = """\
# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 21015
cmd:  /work/.venv/bin/python /tmp/prog.py 10000 100000
part: 5


desc: I1 cache:
desc: D1 cache:
desc: LL cache:

desc: Timerange: Basic block 12147511 - 12152167
desc: Trigger: Program termination

positions: line
events: Ir
summary: 18446744073697131610


totals: 0
"""


def test_a_real_step_dump_parses():
    dump = callgrind_dumps.parse_dump(REAL_STEP_DUMP, "callgrind.out.21015.2")
    assert dump.part == 2
    assert dump.label == "A"
    assert dump.trigger == "Client Request: A"
    assert dump.events == ("Ir",)
    assert dump.totals == (4129589,) and dump.summary == (4129589,)
    assert dump.count("Ir") == 4129589
    with pytest.raises(CallgrindFormatError, match="no event 'Dr'"):
        dump.count("Dr")


def test_the_exit_dump_is_no_step():
    dump = callgrind_dumps.parse_dump(REAL_EXIT_DUMP)
    assert dump.label is None and dump.trigger == "Program termination"
    assert dump.totals == (0,)


def test_counts_follow_the_events_line_and_missing_trailing_counts_are_zero():
    text = REAL_STEP_DUMP.replace("events: Ir", "events: Ir Dr Dw").replace(
        "totals: 4129589", "totals: 4129589 1000").replace("summary: 4129589",
                                                           "summary: 4129589 1000 0")
    dump = callgrind_dumps.parse_dump(text)
    assert dump.totals == (4129589, 1000, 0) == dump.summary
    assert dump.count("Dr") == 1000


def test_summary_stands_in_for_missing_totals_but_not_in_a_step(tmp_path):
    dump = callgrind_dumps.parse_dump(REAL_STEP_DUMP.replace("totals: 4129589\n", ""))
    assert dump.totals is None and dump.count() == 4129589
    # a step's dump always has both: one without its totals was cut short
    write_dumps(tmp_path, 1, {2: REAL_STEP_DUMP.replace("totals: 4129589\n", "")})
    with pytest.raises(CallgrindFormatError, match="step 'A' has no 'totals:' line"):
        callgrind_dumps.read_step_counts(tmp_path, 1)


@pytest.mark.parametrize("text, why", [
    ("", "first line"),
    ("version: 1\nevents: Ir\ntotals: 5\n", "first line"),
    (REAL_STEP_DUMP.replace("events: Ir\n", ""), "no 'events:' line"),
    (REAL_STEP_DUMP.replace("events: Ir", "events:"), "no 'events:' line"),
    (REAL_STEP_DUMP.replace("totals: 4129589", "totals: 41295x9"), "not a list of counts"),
    (REAL_STEP_DUMP.replace("totals: 4129589", "totals: -5"), "not a list of counts"),
    (REAL_STEP_DUMP.replace("totals: 4129589", "totals: 1 2"), "2 counts for 1 events"),
    (REAL_STEP_DUMP + "totals: 7\n", "2 'totals:' lines"),
    (REAL_STEP_DUMP.replace("version: 1", "version: 2"), "version '2'"),
    (REAL_STEP_DUMP.replace("part: 2", "part: two"), "'part: two' is not a number"),
    # a file cut short while callgrind wrote it
    (REAL_STEP_DUMP[:REAL_STEP_DUMP.index("summary:")], "neither a 'totals:' nor a 'summary:'"),
])
def test_malformed_dumps_are_refused_with_the_reason(text, why):
    with pytest.raises(CallgrindFormatError, match=re.escape(why)) as info:
        callgrind_dumps.parse_dump(text, "out/callgrind.out.1.2")
    assert str(info.value).startswith("out/callgrind.out.1.2: not a callgrind output file")
    assert "\n" not in str(info.value)


def write_dumps(directory: Path, pid: int, parts: dict[int, str]) -> None:
    for part, text in parts.items():
        (directory / f"callgrind.out.{pid}.{part}").write_text(text)


def step_dump(label: str, count: int, part: int, summary: int | None = None) -> str:
    return (REAL_STEP_DUMP.replace("Client Request: A", f"Client Request: {label}")
            .replace("part: 2", f"part: {part}")
            .replace("summary: 4129589", f"summary: {count if summary is None else summary}")
            .replace("totals: 4129589", f"totals: {count}"))


def test_step_counts_are_read_in_part_order_for_one_process(tmp_path):
    # part 10 after part 9 (numbers, not names, order the steps); another process's dumps and the
    # exit dump are not steps of this one
    write_dumps(tmp_path, 21015, {10: step_dump("s10", 100, 10), 9: step_dump("s9", 90, 9),
                                  11: REAL_EXIT_DUMP})
    write_dumps(tmp_path, 999, {1: step_dump("other", 5, 1)})
    (tmp_path / "callgrind.out.21015").write_text(REAL_EXIT_DUMP)
    (tmp_path / "valgrind.21015.log").write_text("not a dump")
    counts = callgrind_dumps.read_step_counts(tmp_path, 21015)
    assert list(counts.items()) == [("s9", 90), ("s10", 100)]
    assert callgrind_dumps.read_step_counts(tmp_path) == {"other": 5, "s9": 90, "s10": 100}


def test_a_step_dumped_twice_or_inconsistent_is_refused(tmp_path):
    write_dumps(tmp_path, 1, {1: step_dump("A", 10, 1), 2: step_dump("A", 12, 2)})
    with pytest.raises(CallgrindFormatError, match="step 'A' is dumped twice"):
        callgrind_dumps.read_step_counts(tmp_path, 1)
    write_dumps(tmp_path, 2, {1: step_dump("B", 10, 1, summary=11)})
    with pytest.raises(CallgrindFormatError, match="'summary:' .11,. and 'totals:' .10,. disagree"):
        callgrind_dumps.read_step_counts(tmp_path, 2)
    write_dumps(tmp_path, 3, {1: "garbage\n"})
    with pytest.raises(CallgrindFormatError, match=r"callgrind\.out\.3\.1: not a callgrind"):
        callgrind_dumps.read_step_counts(tmp_path, 3)


# --- the parent's command line and environment -------------------------------------------------

@requests_here
def test_the_command_line_counts_nothing_until_asked(tmp_path):
    cmd = valgrind_run.command([sys.executable, "prog.py", "--n", "3"], tmp_path)
    assert cmd[:2] == ["valgrind", "--tool=callgrind"]
    for option in ["--instr-atstart=no", "--collect-atstart=no", "--cache-sim=no",
                   "--branch-sim=no", "--trace-children=no",
                   f"--callgrind-out-file={tmp_path.resolve()}/callgrind.out.%p",
                   f"--log-file={tmp_path.resolve()}/valgrind.%p.log"]:
        assert option in cmd
    assert cmd[-4:] == [sys.executable, "prog.py", "--n", "3"]


def test_a_script_or_missing_program_is_refused(tmp_path):
    shim = tmp_path / "python3"
    shim.write_text("#!/bin/sh\nexec python3 \"$@\"\n")
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(ValgrindError, match="is a script, not a program.*sys.executable"):
        valgrind_run.command([str(shim), "-c", "pass"], tmp_path)
    with pytest.raises(ValgrindError, match="not found"):
        valgrind_run.command([str(tmp_path / "no-such-python")], tmp_path)
    with pytest.raises(ValueError, match="argv is empty"):
        valgrind_run.command([], tmp_path)


def test_the_child_environment_is_deterministic():
    env = valgrind_run.child_env({"PATH": "/bin", "PYTHONHASHSEED": "random",
                              "PYTHONMALLOC": "malloc", "OMP_NUM_THREADS": "8"})
    assert env["PATH"] == "/bin"
    assert env["PYTHONHASHSEED"] == "0"
    assert env["PYTHONMALLOC"] == "pymalloc"
    assert env["OMP_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "1"
    assert valgrind_run.child_env({"PYTHONHASHSEED": "123"})["PYTHONHASHSEED"] == "123"


def test_counted_on_names_the_cpu_model_and_valgrind(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\n"
                       "model name\t: AMD EPYC  7R13 Processor\nflags\t: fpu\n")
    described = valgrind_run.counted_on(str(cpuinfo))
    assert described.startswith("AMD EPYC 7R13 Processor, ")
    if valgrind_run.shutil.which("valgrind"):
        assert re.fullmatch(r"AMD EPYC 7R13 Processor, valgrind-\d+\.\d+\.\d+\S*", described)
    monkeypatch.setenv("PATH", str(tmp_path))  # no valgrind to ask
    assert valgrind_run.counted_on(str(tmp_path / "none")) == "unknown CPU, no valgrind"


def test_no_valgrind_on_path_is_a_message(monkeypatch, tmp_path):
    monkeypatch.setattr(valgrind_run.shutil, "which", lambda name: None)
    if valgrind.platform_problem() is None:
        assert valgrind_run.problem() == ("valgrind is not on PATH "
                                      "(install it: apt-get install valgrind)")
    with pytest.raises(ValgrindError) as info:
        valgrind_run.run_counted([sys.executable, "-c", "pass"], tmp_path, timeout_s=5)
    assert str(info.value) == valgrind_run.problem()


# --- end to end under valgrind -----------------------------------------------------------------

STEPS_PROGRAM = textwrap.dedent("""\
    import sys
    import threading
    from pytest_opperf.workcounts.callgrind import Callgrind

    n, outside = int(sys.argv[1]), int(sys.argv[2])

    def loop(k):
        s = 0
        for i in range(k):
            s += i
        return s

    def elsewhere(k):  # work outside the steps, in a function of its own
        return sum([i * i for i in range(k)])

    elsewhere(outside)
    cg = Callgrind()
    print("running", cg.running())
    cg.start_pass()
    elsewhere(outside)
    cg.begin_step()
    cg.end_step("empty")
    cg.begin_step()
    loop(n)
    cg.end_step("A")
    elsewhere(outside)
    cg.begin_step()
    loop(2 * n)
    cg.end_step("B")
    cg.begin_step()
    worker = threading.Thread(target=loop, args=(n,))
    worker.start()
    worker.join()
    cg.end_step("A_on_a_thread")
    cg.end_pass()
    elsewhere(outside)
""")

N = 5000  # step A: about 2 M instructions, 0.1 s under instrumentation


@pytest.fixture(scope="module")
def steps_program(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("valgrind") / "steps.py"
    path.write_text(STEPS_PROGRAM)
    return path


def count(program: Path, out: Path, *args: object) -> dict[str, int]:
    started = time.perf_counter()
    counts = valgrind_run.run_counted([sys.executable, str(program), *map(str, args)], out,
                                  timeout_s=60)
    assert time.perf_counter() - started < 30
    return counts


@pytest.fixture(scope="module")
def baseline(steps_program, tmp_path_factory) -> tuple[dict[str, int], Path]:
    out = tmp_path_factory.mktemp("baseline")
    return count(steps_program, out, N, 0), out


@needs_valgrind
def test_steps_are_counted_in_proportion_to_their_work(baseline):
    counts, out = baseline
    assert list(counts) == ["empty", "A", "B", "A_on_a_thread"]
    assert (out / "child.out").read_text() == "running True\n"
    # the loop's own cost: N iterations of a Python for loop are some hundreds of instructions each
    assert 100 * N < counts["A"] < 2000 * N
    # an empty step holds only the requests' own call and return: a few thousand instructions
    assert counts["empty"] < 20_000
    ratio = (counts["B"] - counts["empty"]) / (counts["A"] - counts["empty"])
    assert ratio == pytest.approx(2.0, rel=0.03)


@needs_valgrind
def test_work_on_other_threads_is_not_counted(baseline):
    # callgrind's requests zero, collect and dump the calling thread only: the step counts the
    # thread's start and join, not the loop it ran
    counts, _ = baseline
    assert counts["A_on_a_thread"] < counts["A"] / 4


@needs_valgrind
def test_two_runs_count_the_same(baseline, steps_program, tmp_path):
    first, _ = baseline
    second = count(steps_program, tmp_path, N, 0)
    assert second.keys() == first.keys()
    for label in ("A", "B"):
        # measured: equal, or a few tens of instructions apart (1e-6); 1e-4 leaves room
        assert second[label] == pytest.approx(first[label], rel=1e-4)


@needs_valgrind
def test_work_outside_the_steps_is_not_counted(baseline, steps_program, tmp_path):
    first, _ = baseline
    # 10 N squares before the pass, inside the pass between steps and after it: several times a
    # step's work, so counting any of it would move A or B by far more than the tolerance
    with_outside = count(steps_program, tmp_path, N, 10 * N)
    for label in ("A", "B"):
        assert with_outside[label] == pytest.approx(first[label], rel=1e-3)


def program(tmp_path: Path, source: str) -> Path:
    path = tmp_path / "child.py"
    path.write_text(textwrap.dedent(source))
    return path


@needs_valgrind
def test_a_directory_with_earlier_dumps_is_refused(tmp_path):
    write_dumps(tmp_path, 1, {1: step_dump("A", 10, 1)})
    with pytest.raises(ValgrindError, match="already holds callgrind dumps"):
        valgrind_run.run_counted([sys.executable, "-c", "pass"], tmp_path, timeout_s=5)


@needs_valgrind
def test_a_hanging_child_is_killed_at_the_timeout(tmp_path):
    child = program(tmp_path, "import time\ntime.sleep(60)\n")
    started = time.perf_counter()
    with pytest.raises(ValgrindError, match=r"child.py under valgrind ran past 1 s and was killed"):
        valgrind_run.run_counted([sys.executable, str(child)], tmp_path / "out", timeout_s=1)
    assert time.perf_counter() - started < 10


@needs_valgrind
def test_a_crashing_child_is_one_line(tmp_path):
    child = program(tmp_path, """\
        import os, signal, sys
        print("about to crash", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGSEGV)
    """)
    with pytest.raises(ValgrindError) as info:
        valgrind_run.run_counted([sys.executable, str(child)], tmp_path / "out", timeout_s=30)
    message = str(info.value)
    assert message == "python child.py under valgrind died of SIGSEGV: about to crash".replace(
        "python", Path(sys.executable).name)


@needs_valgrind
def test_a_silent_crash_says_what_valgrind_saw(tmp_path):
    child = program(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    with pytest.raises(ValgrindError, match=r"died of SIGSEGV: Process terminating with default "
                                            r"action of signal 11 \(SIGSEGV\)$"):
        valgrind_run.run_counted([sys.executable, str(child)], tmp_path / "out", timeout_s=30)


@needs_valgrind
def test_a_failing_child_says_its_status_and_last_line(tmp_path):
    child = program(tmp_path, "raise SystemExit('the test failed: loss is nan')\n")
    with pytest.raises(ValgrindError, match=r"exited with status 1: the test failed: loss is nan$"):
        valgrind_run.run_counted([sys.executable, str(child)], tmp_path / "out", timeout_s=30)


@needs_valgrind
def test_a_child_with_no_counting_pass_is_an_error(tmp_path):
    child = program(tmp_path, "print('no pass')\n")
    with pytest.raises(ValgrindError, match="dumped no step"):
        valgrind_run.run_counted([sys.executable, str(child)], tmp_path / "out", timeout_s=30)

"""The kissing verifier and the sandbox: exact checks, specific messages, and bad programs as results."""

import importlib.util
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from alignment.kissing.sandbox import SandboxLimits, run_untrusted
from alignment.kissing.verifier import closest_pair, evaluate_program, verify_points

ROOT = Path(__file__).resolve().parents[1]
FAST = SandboxLimits(timeout_s=5.0, memory_bytes=1024**3)


def d11_roots() -> list[list[int]]:
    points = []
    for i, j in itertools.combinations(range(11), 2):
        for si, sj in itertools.product((1, -1), repeat=2):
            v = [0] * 11
            v[i], v[j] = si, sj
            points.append(v)
    return points


def test_valid_set_scores_its_size():
    m = verify_points(d11_roots())
    assert (m.num_points, m.dimension, m.validity, m.score) == (220, 11, 1.0, 220.0)
    assert (m.min_squared_distance, m.max_squared_norm) == (2, 2)


def test_failure_names_the_closest_pair_and_the_numbers():
    axes = [[2 * s if k == i else 0 for k in range(11)] for i in range(11) for s in (1, -1)]
    m = verify_points(axes)
    assert (m.validity, m.score, m.min_squared_distance, m.max_squared_norm) == (1.0, 22.0, 8, 4)
    m = verify_points(axes[:17] + [[2, 1] + [0] * 9] + axes[17:])  # next to 2e_0 (point 0), norm 5
    assert m.validity == 0.0 and m.score == 0.0 and m.num_points == 23
    assert m.message == "Minimum squared distance 1 < maximum squared norm 5"  # the course evaluator's words
    assert m.closest_pair == (0, 17)


@pytest.mark.parametrize(
    "value, message",
    [
        ([[1] * 11, [0] * 11], "Set contains 0 vector or is empty."),
        ([[1] * 11, [2] * 11, [1] * 11], "Minimum squared distance 0 < maximum squared norm 44"),
        ([[1] * 11], "Need at least 2 points."),
        (
            [1] * 11,
            "`points` is one vector of 11 numbers, not a list of vectors (a run_code() that returns a list "
            "gives its first item: return (points,))",
        ),
        ([[1] * 11, [1] * 12], "point 1 has 12 coordinates; expected 11"),
        ([[1] * 11, [1] * 10 + [1.5]], "point 1, coordinate 10 is 1.5 (float); coordinates must be integers"),
        ([[1] * 11, [True] + [0] * 10], "point 1, coordinate 0 is True (bool); coordinates must be integers"),
        ([[1] * 11, "abc"], "point 1 is a str, not a list of 11 integers"),
        ({"a": 1}, "`points` must be a list of 11-dimensional integer vectors, got dict"),
        ([], "Set contains 0 vector or is empty."),
    ],
)
def test_each_kind_of_invalid_set_has_its_own_message(value, message):
    m = verify_points(value)
    assert m.validity == 0.0 and m.score == 0.0
    assert m.message == message


def test_huge_integers_are_exact_beyond_int64_or_refused_clearly():
    big = 2**40  # squared norms near 2^80: past int64, exact with Python integers
    valid = [[big * s if k == i else 0 for k in range(11)] for i in range(11) for s in (1, -1)]
    assert verify_points(valid).score == 22.0
    near = valid + [[big + 1] + [0] * 10]
    m = verify_points(near)
    assert m.message == f"Minimum squared distance 1 < maximum squared norm {(big + 1) ** 2}"
    assert m.closest_pair == (0, 22)
    m = verify_points([[10**200] + [0] * 10, [1] * 11])
    assert m.validity == 0.0 and "point 0 has a coordinate of 201 digits" in m.message


def test_chunked_scan_agrees_with_brute_force(monkeypatch):
    rng = np.random.default_rng(1)
    x = rng.integers(-50, 50, size=(700, 11))
    d = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    d[np.tril_indices(700)] = 10**9
    i, j = np.unravel_index(np.argmin(d), d.shape)
    monkeypatch.setattr("alignment.kissing.verifier.CHUNK_ENTRIES", 700 * 37)  # many uneven chunks
    assert closest_pair(x) == (int(d[i, j]), int(i), int(j))


@pytest.mark.parametrize(
    "source, expected",
    [
        ("while True:\n    pass\n", "timed out after 2 s"),
        ("x = bytearray(100 * 10**9)\n", "MemoryError"),
        ("import numpy as np\nx = np.ones(100 * 10**9 // 8)\n", "MemoryError"),
        ("import socket\nsocket.create_connection(('127.0.0.1', 80), timeout=1)\n", "network access"),
        ("import urllib.request\nurllib.request.urlopen('http://example.com', timeout=1)\n", "network access"),
        ("import subprocess\nsubprocess.run(['true'])\n", "subprocess.Popen is not allowed"),
        ("import os\nos.system('true')\n", "os.system is not allowed"),
        ("import ctypes\nctypes.CDLL(None)\n", "ctypes.dlopen is not allowed"),
        ("points = [[1] * 11]\nraise ValueError('boom')\n", "ValueError: boom (program.py line 2)"),
        ("import sys\nsys.exit(3)\n", "exit(3)"),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", "killed (signal 9)"),
        ("x = 1\n", "defines none of run_code(), get_centers() or a global `points`"),
        ("points = [[10**5000] * 11]\n", "cannot be sent back as JSON"),
        ("points = object()\n", "cannot be sent back as JSON"),
        ("import os\nwhile True:\n    os.write(1, b'x' * 65536)\n", "more than"),
    ],
)
def test_bad_programs_are_results_not_crashes(source, expected):
    m = evaluate_program(source, SandboxLimits(timeout_s=2.0, memory_bytes=1024**3, max_output_bytes=65536))
    assert m.validity == 0.0 and m.score == 0.0
    assert m.message.startswith("program failed: ") and expected in m.message, m.message


def test_writes_outside_the_folder_are_refused_and_inside_allowed(tmp_path):
    target = tmp_path / "escape.txt"
    outside = f"open({str(target)!r}, 'w').write('x')\n"
    result = run_untrusted(outside, "points", FAST)
    assert "outside the working folder" in result.error and not target.exists()
    removal = tmp_path / "keep.txt"
    removal.write_text("kept")
    result = run_untrusted(f"import os\nos.remove({str(removal)!r})\n", "points", FAST)
    assert "outside the working folder" in result.error and removal.read_text() == "kept"
    inside = "open('note.txt', 'w').write('12')\npoints = [[int(open('note.txt').read())] + [0] * 10]\n"
    assert run_untrusted(inside, "points", FAST).value == [[12] + [0] * 10]


def test_non_utf8_output_and_prints_do_not_break_the_result():
    source = "import os\nos.write(1, b'\\xff\\xfe\\x00 junk\\n')\nprint('hello')\npoints = [[2] + [0] * 10]\n"
    result = run_untrusted(source, "points", FAST)
    assert result.ok and result.value == [[2] + [0] * 10]
    assert result.output == "hello\n"


def test_a_program_that_writes_bytes_to_stdout_is_scored_as_any_other():
    """sys.stdout.buffer (and sys.stderr.buffer) take bytes, decoded as UTF-8 into the same bounded output: a valid
    program is never rejected for how it prints; the bound holds for bytes as for text."""
    source = (
        "import sys\n"
        "sys.stdout.buffer.write('caf\u00e9 '.encode()[:4])\n"  # a character split across two writes
        "sys.stdout.buffer.write('caf\u00e9 '.encode()[4:])\n"
        "sys.stdout.buffer.flush()\n"
        "print('then text', flush=True)\n"
        "sys.stderr.buffer.write(b'\\xff!\\n')\n"
        "points = [[2] + [0] * 10]\n"
    )
    result = run_untrusted(source, "points", FAST)
    assert result.ok and result.value == [[2] + [0] * 10]
    assert result.output == "caf\u00e9 then text\n\ufffd!\n"
    flood = "import sys\nfor _ in range(1000):\n    sys.stdout.buffer.write(b'x' * 1000)\npoints = [[2] + [0] * 10]\n"
    limits = SandboxLimits(timeout_s=5.0, memory_bytes=1024**3, max_output_bytes=4096)
    result = run_untrusted(flood, "points", limits)
    assert result.ok and result.output == "x" * 4096


def test_environment_is_scrubbed_and_protections_recorded(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "secret-123")
    source = "import os, tempfile\npoints = [sorted(os.environ), os.getcwd()]\n"
    result = run_untrusted(source, "points", FAST)
    names, cwd = result.value
    assert "OPENAI_API_KEY" not in names and "secret" not in json.dumps(result.value)
    assert Path(cwd).name.startswith("sandbox-") and not Path(cwd).exists()  # thrown away afterwards
    p = result.protections
    assert p["audit_hook"] and p["memory_bytes"] == FAST.memory_bytes and p["wall_clock_s"] == FAST.timeout_s
    assert isinstance(p["network_namespace"], bool) and isinstance(p["unprivileged_user"], bool)


def test_numpy_points_and_numpy_ints_are_accepted():
    source = "import numpy as np\npoints = 2 * np.eye(11, dtype=np.int64)\n"
    m = evaluate_program(source, FAST)
    assert (m.validity, m.score, m.num_points) == (1.0, 11.0, 11)


def test_float_and_ragged_and_twelve_dimensional_programs():
    cases = {
        "points = [[1.5] * 11]\n": "point 0, coordinate 0 is 1.5 (float); coordinates must be integers",
        "points = [[1] * 11, [1] * 5]\n": "point 1 has 5 coordinates; expected 11",
        "points = [[1] * 12]\n": "point 0 has 12 coordinates; expected 11",
    }
    for source, message in cases.items():
        assert evaluate_program(source, FAST).message == message


def evaluator(program: str) -> tuple[int, dict]:
    out = subprocess.run(
        [sys.executable, "data/kissing_number/evaluator.py", program],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return out.returncode, json.loads(out.stdout)


def test_evaluator_cli_scores_the_handouts_starter_and_the_projects_582():
    code, metrics = evaluator("data/kissing_number/program.py")  # the handout's simple starter: +-2 e_i
    assert code == 0 and (metrics["num_points"], metrics["validity"], metrics["score"]) == (22, 1.0, 22.0)
    assert (
        metrics["entry"] == "run_code()[0]"
        and metrics["message"] == "Verified: dimension=11, kissing lower bound >= 22"
    )
    best = json.loads((ROOT / "data/kissing_number/results/search-code/best.json").read_text())
    code, metrics = evaluator("data/kissing_number/results/search-code/program.py")
    assert code == 0 and metrics["validity"] == 1.0 and metrics["score"] == best["score"] == 582
    assert metrics["combined_score"] == pytest.approx(582 / 593)  # the course's normalisation


# Hand-written programs in every form the course's evaluator takes, with the verdict it gives: (validity, size or
# message). A run_code() returning a list gives its first item, one vector, which both evaluators refuse.
COURSE_FORMS = {
    "run_code returns (points, d)": (
        "import numpy as np\ndef run_code():\n    e = 2 * np.eye(11, dtype=np.int64)\n"
        "    return np.vstack([e, -e]), 11\n",
        (1.0, 22),
    ),
    "run_code returns an int32 array": (
        "import numpy as np\ndef run_code():\n    return 2 * np.eye(11, dtype=np.int32)\n",
        (1.0, 11),
    ),
    "run_code returns None, then points": (
        "def run_code():\n    return None\npoints = [[2] + [0] * 10, [0, 2] + [0] * 9]\n",
        (1.0, 2),
    ),
    "get_centers gives lists of numpy ints": (
        "import numpy as np\ndef get_centers():\n"
        "    return [[np.int64(2 * (k == i)) for k in range(11)] for i in range(3)]\n",
        (1.0, 3),
    ),
    "points as a float array of integers": (
        "import numpy as np\npoints = np.zeros((2, 11))\npoints[0, 0] = points[1, 1] = 2\n",
        (1.0, 2),
    ),
    "points too close": (
        "points = ((6, 2) + (0,) * 9, (0, 2) + (0,) * 9)\n",
        (0.0, "Minimum squared distance 36 < maximum squared norm 40"),
    ),
    "run_code returns a list of vectors": (
        "def run_code():\n    return [[2] + [0] * 10, [0, 2] + [0] * 9]\n",
        (0.0, "one vector"),
    ),
    "nothing defined": ("x = 1\n", (0.0, "defines none of run_code(), get_centers() or a global `points`")),
}


@pytest.mark.parametrize("name", list(COURSE_FORMS))
def test_programs_in_the_course_evaluators_forms(name):
    source, (validity, expected) = COURSE_FORMS[name]
    m = evaluate_program(source, FAST)
    assert m.validity == validity, m.message
    if validity:
        assert m.num_points == m.score == expected
    else:
        assert expected in m.message and m.score == 0


def test_the_course_evaluator_gives_the_same_verdicts(tmp_path, capsys):
    """The course's own evaluator (from a checkout of linhaowei1/NLPDL-2025Fall in $PKU_HW3_REPO) as the oracle."""
    course = Path(os.environ.get("PKU_HW3_REPO", "")) / "hw3_posttrain/data/kissing_number/evaluator.py"
    if not os.environ.get("PKU_HW3_REPO") or not course.is_file():
        pytest.skip("set $PKU_HW3_REPO to a checkout of linhaowei1/NLPDL-2025Fall to run the course's evaluator")
    spec = importlib.util.spec_from_file_location("course_kissing_evaluator", course)
    oracle = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(oracle)
    for name, (source, (validity, expected)) in COURSE_FORMS.items():
        program = tmp_path / f"{len(name)}_{abs(hash(name))}.py"
        program.write_text(source)
        capsys.readouterr()
        theirs = oracle.evaluate(str(program))
        printed = capsys.readouterr().out
        assert theirs["validity"] == validity, name
        if validity:
            assert theirs["num_points"] == expected, name
        elif expected.startswith("Minimum"):
            assert f"Verification failed: {expected}" in printed, name

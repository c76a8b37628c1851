"""README.md as a new user meets it, on a machine without a GPU: its Python blocks run as written, every
`carm-advise` command in it is run (with fewer trials where its options allow) or checked for what it does without
a GPU, its synopses name only options that exist, its multi-machine PostgreSQL recipe works against a real
server, CI runs exactly its two commands, and its text speaks of the product, not of how it was made.

Only the public API (carm_advisor, the carm-advise command) and carm_advisor.tune.storage are used.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _cli import run_cli
from _gpu import gpu_present

REPO_ROOT = Path(__file__).resolve().parents[1]
README = REPO_ROOT / "README.md"
TEXT = README.read_text()
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
INSTALL = ('python3 -m venv .venv && .venv/bin/pip install -e ".[tensorflow,dev]" && .venv/bin/carm-advise analyze '
           "vgg16 --batch-size 64 --json vgg16.json --plot vgg16-carm.png")
TESTS = ".venv/bin/python -m pytest -q -n auto --maxprocesses 4 --dist loadfile"


def blocks(lang: str | None = None) -> list[tuple[str, int]]:
    """(code, line number of its first line) of each fenced block, of one language if given."""
    return [(m.group(2), TEXT[:m.start()].count("\n") + 2) for m in FENCE.finditer(TEXT)
            if lang is None or m.group(1) == lang]


def section(title: str) -> str:
    """From the heading `title` to the next heading of its level or above (a `#` inside a code block is none)."""
    lines = TEXT.splitlines(keepends=True)
    start = lines.index(title + "\n")
    level, fenced, end = len(title) - len(title.lstrip("#")), False, len(lines)
    for i in range(start + 1, len(lines)):
        fenced ^= lines[i].startswith("```")
        heading = re.match(r"(#+) ", lines[i])
        if not fenced and heading and len(heading.group(1)) <= level:
            end = i
            break
    return "".join(lines[start:end])


def _logical_lines(code: str) -> list[str]:
    """Lines with `\\` continuations and indented continuations (the synopses) joined."""
    out: list[str] = []
    for raw in code.splitlines():
        if out and (out[-1].endswith("\\") or (raw[:1].isspace() and raw.strip())):
            out[-1] = out[-1].rstrip("\\").rstrip() + " " + raw.strip()
        elif raw.strip():
            out.append(raw.rstrip())
    return out


def readme_commands() -> list[str]:
    """Every carm-advise command of README.md's shell blocks, from `carm-advise` on (an environment variable
    set before it kept), `.venv/bin/` and comments dropped, `[options]` kept as written."""
    found = []
    for code, _ in blocks(""):
        for line in _logical_lines(code):
            if line.lstrip().startswith("#"):
                continue
            match = re.search(r"((?:[A-Z_]+=\S+ )*)(?:\.venv/bin/)?carm-advise\b(.*)", line.split(" #")[0])
            if not match:
                continue
            env = match.group(1).strip() if "$" not in match.group(1) else ""   # not the loop's CUDA_VISIBLE_DEVICES=$g
            rest = re.split(r" &(?: |$)| && ", match.group(2))[0].strip()
            found.append(" ".join(part for part in (env, "carm-advise", rest) if part))
    return found


# Every carm-advise command in README.md, and how these tests cover it.
SYNOPSES = {
    "analyze": "carm-advise analyze MODEL [--batch-size N]",
    "ceilings": "carm-advise ceilings [--json PATH]",
    "build-kernels": "carm-advise build-kernels [--arch sm_90a] [--force]",
    "tune": "carm-advise tune MODEL --objective {",
    "worker": "carm-advise worker --storage URL --study NAME",
}
MAIN_JOB = "carm-advise analyze vgg16 --batch-size 64 --json vgg16.json --plot vgg16-carm.png"
SHORTHAND = "carm-advise vgg16 --objective gflops_per_watt"
JOURNAL_GPUS = "carm-advise tune vgg16 --objective gflops_per_watt --trials 32 --gpus 0,1,2,3 --storage journal:vgg16.log"
PG_TUNE = ("carm-advise tune vgg16 --objective gflops_per_watt --trials 64 --gpus 0,1,2,3 "
           "--storage postgresql://postgres:carm@dbhost:5432/carm --study vgg16-ee")
PG_WORKER = "carm-advise worker --storage postgresql://postgres:carm@dbhost:5432/carm --study vgg16-ee"
BUILD = "carm-advise build-kernels"
CEILINGS = "carm-advise ceilings --json roofs.json --plot roofs.png [--verify-counters]"
TORCH_ANALYZE = ("KERAS_BACKEND=torch carm-advise analyze vgg16 --batch-size 64 --precision mixed_bfloat16 "
                 "--layout channels_first --json vgg16.json --plot vgg16.png [--counters] [--training-step]")
# What needs GPUs to run as written: skipped on a GPU machine with this reason (it measures for minutes);
# without a GPU what it does there is checked instead.
NEEDS_GPU = {
    JOURNAL_GPUS: "measures on GPUs 0-3, one worker process each: run it by hand",
    CEILINGS: "measures this GPU's roofs (a minute): run it by hand",
}
COVERED = {
    MAIN_JOB: "test_the_main_job",
    SHORTHAND: "test_the_tune_shorthand",
    JOURNAL_GPUS: "test_several_gpus_on_one_machine (needs GPUs 0-3; predicted on 2 worker processes without)",
    PG_TUNE: "test_the_postgresql_recipe",
    PG_WORKER: "test_the_postgresql_recipe",
    BUILD: "test_build_kernels (needs nvcc, not a GPU)",
    CEILINGS: "test_ceilings (needs a GPU; one-line error without)",
    TORCH_ANALYZE: "test_analyze_on_torch (measures on a GPU, predicts without)",
}


def _synopsis(cmd: str) -> str | None:
    return next((name for name, start in SYNOPSES.items() if cmd.startswith(start)), None)


def test_every_carm_advise_command_in_the_readme_is_covered():
    commands = readme_commands()
    uncovered = [c for c in commands if c not in COVERED and _synopsis(c) is None]
    assert not uncovered, f"README.md commands no test covers (add them to COVERED): {uncovered}"
    assert set(COVERED) <= set(commands), f"no longer in README.md: {set(COVERED) - set(commands)}"
    assert {_synopsis(c) for c in commands} - {None} == set(SYNOPSES)




@pytest.mark.parametrize("name", sorted(SYNOPSES))
def test_a_synopsis_names_only_options_its_command_has(name, capsys):
    lines = [c for c in readme_commands() if _synopsis(c) == name]
    assert lines
    code, out, _ = run_cli(capsys, name, "--help")
    assert code == 0
    for line in lines:
        for option in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", line):
            assert re.search(rf"(?<![\w-]){re.escape(option)}\b", out), f"{option} of README's `{line}` is not in " \
                                                                       f"`carm-advise {name} --help`"


def _args(cmd: str) -> list[str]:
    """A README command as argv, without `carm-advise` and its `[optional]` options."""
    return shlex.split(re.sub(r"\[[^\]]*\]", "", cmd))[1:]


def test_the_main_job(tmp_path, monkeypatch, capsys):
    """The install line's analyze; without a GPU it prints what "What it prints" shows (150 columns wide)."""
    assert INSTALL.endswith(MAIN_JOB.replace("carm-advise", ".venv/bin/carm-advise"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "150")
    code, out, err = run_cli(capsys, *_args(MAIN_JOB))
    assert code == 0, err
    report = json.loads((tmp_path / "vgg16.json").read_text())
    assert "batch 64" in out and report["totals"]["flops_per_sample"] > 0
    assert (tmp_path / "vgg16-carm.png").read_bytes()[:4] == b"\x89PNG"
    if gpu_present():
        return
    assert report["device"]["source"] == "profile" and "PREDICTED" in out
    (shown,) = [block for block, _ in blocks("") if block.startswith("╭")]
    printed = [line.rstrip() for line in out.splitlines()]
    at = 0
    for line in (ln.rstrip() for ln in shown.splitlines()):
        if line.strip() in ("", "..."):
            continue
        prefix = line[:-4] if line.endswith(" ...") else None
        found = next((i for i in range(at, len(printed))
                      if (printed[i].startswith(prefix) if prefix else printed[i] == line)), None)
        assert found is not None, f"README's 'What it prints' shows a line the command does not print: {line!r}"
        at = found + 1


def test_the_tune_shorthand(tmp_path, monkeypatch, capsys):
    if gpu_present():
        pytest.skip("on a GPU the shorthand measures 30 trials")
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, *_args(SHORTHAND), "--trials", "3")
    assert code == 0, err
    assert "PREDICTED" in out and (tmp_path / "carm-tune-vgg16.db").is_file()


def test_several_gpus_on_one_machine(tmp_path, monkeypatch, capsys):
    """Without GPUs the README's several-GPU command is refused in one line before any storage exists: naming GPUs
    asks for trials measured on them, and none can be here."""
    if gpu_present():
        pytest.skip(NEEDS_GPU[JOURNAL_GPUS])
    args = _args(JOURNAL_GPUS)
    assert args[args.index("--gpus") + 1] == "0,1,2,3" and args[args.index("--trials") + 1] == "32"
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, *args, "--json", "result.json")
    assert code == 2
    (line,) = [text for text in err.splitlines() if text.strip()]
    assert "--gpus 0,1,2,3: no NVIDIA GPU is visible here" in line and "drop --gpus" in line
    assert list(tmp_path.iterdir()) == []       # no journal, no result file


def test_build_kernels(tmp_path, capsys):
    """No GPU is needed to compile, only nvcc: with it the kernels build (sm_90a alone here, an option the README
    shows; tests/test_kernels.py built them into the same cache), without it one line says what is missing."""
    code, out, err = run_cli(capsys, *_args(BUILD), "--arch", "sm_90a")
    if code == 2:   # no nvcc on PATH, in $CUDA_HOME or from a pip wheel
        assert shutil.which("nvcc") is None and len(err.strip().splitlines()) == 1 and "nvcc not found" in err, err
        return
    assert code == 0, err
    assert "libcarm_bench" in out and os.environ["CARM_ADVISOR_CACHE"] in out


def test_ceilings(tmp_path, monkeypatch, capsys):
    if gpu_present():
        pytest.skip(NEEDS_GPU[CEILINGS])
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, *_args(CEILINGS))
    assert code == 2
    assert err.startswith("carm-advise: error: no NVIDIA GPU") and len(err.strip().splitlines()) == 1
    assert "--show" in err and not list(tmp_path.iterdir())


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_analyze_on_torch(tmp_path):
    env_var, *rest = shlex.split(re.sub(r"\[[^\]]*\]", "", TORCH_ANALYZE))
    name, value = env_var.split("=")
    done = subprocess.run([sys.executable, "-m", "carm_advisor.cli", *rest[1:]], cwd=tmp_path,
                          env={**os.environ, name: value, "PYTHONPATH": str(REPO_ROOT), "COLUMNS": "160"},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "vgg16.json").read_text())
    assert "backend torch" in done.stdout and "precision mixed_bfloat16" in done.stdout
    assert "layout channels_first" in done.stdout
    assert (tmp_path / "vgg16.png").read_bytes()[:4] == b"\x89PNG"
    if not gpu_present():
        assert report["device"]["source"] == "profile" and "PREDICTED" in done.stdout


# ---- the Python blocks ----------------------------------------------------------------------------


def test_the_python_blocks_run_as_written_and_their_comments_hold(tmp_path, monkeypatch):
    """Run in order in one namespace, in an empty directory, as a reader pastes them into one Python prompt."""
    import carm_advisor as advisor

    code_blocks = blocks("python")
    assert len(code_blocks) == 2
    monkeypatch.chdir(tmp_path)
    ns: dict = {"__name__": "__readme__"}
    for code, line in code_blocks:
        exec(compile(code, f"{README}:{line}", "exec"), ns)

    assert (tmp_path / "vgg16-carm.png").is_file() and json.loads((tmp_path / "vgg16.json").read_text())
    # the two-tensor model: both shapes given, the totals are complete; without them, a lower bound that says so
    assert not [w for w in ns["report_2in"].warnings if "lower bound" in w]
    alone = advisor.analyze(ns["two_input_model"], batch_size=64)
    assert [w for w in alone.warnings if "lower bound" in w]
    # the keras_hub backbone on 128 tokens: every layer costed, a 768 -> 3072 feed-forward Dense of 8 x 128 tokens
    # (2 FLOPs per multiply-add, a bias per output) among them
    bert = {r.name: r for r in ns["report_bert"].layers}
    assert all(r.known for r in bert.values())
    assert bert["transformer_layer_0/feedforward_output_dense"].flops == 2 * 8 * 128 * 3072 * 768 + 8 * 128 * 768
    assert ns["rows"]

    result = ns["result"]
    assert (tmp_path / "vgg16-tune.json").is_file() and list((tmp_path / "plots").glob("*.png"))
    installed = {b: importlib.util.find_spec(b) is not None for b in ("torch", "jax")}
    if gpu_present():
        return
    # calibrated values (torch, jax, tensorflow XLA) against a CARM-bound tensorflow graph baseline
    assert result.gain() is None and result.gain_note
    assert "import keras" in result.best.keras_code()
    for backend, here in installed.items():
        gain = result.default_gain(backend)
        assert (gain is not None and gain > 1) if here else gain is None, (backend, gain)


# ---- the multi-machine recipe on a real PostgreSQL server ------------------------------------------


def test_the_postgresql_recipe(tmp_path, monkeypatch, capsys):
    """The recipe as written (the psycopg2-binary driver, the postgresql:// URL, machine A's tune and machine B's
    worker) against a throwaway server on this machine, predicted (no GPU; 6 trials): machine A's study stops at
    its --timeout (one trial) with fewer trials than its target, a worker process joins it by URL and name and runs the rest,
    and the same tune command with a larger --trials resumes it without evaluating a trial twice."""
    from _postgres import ServerUnavailable, postgres_server

    recipe = section("### On several GPUs and machines")
    assert "pip install psycopg2-binary" in recipe
    import psycopg2  # noqa: F401  (the driver the recipe installs; the dev extra has it)

    def local(cmd: str, host: str, port: int) -> list[str]:
        args = _args(cmd.replace("dbhost:5432", f"{host}:{port}"))
        if "--gpus" in args:   # machine A's own GPUs: none here
            del args[args.index("--gpus"):args.index("--gpus") + 2]
        return args

    monkeypatch.chdir(tmp_path)
    with contextlib.ExitStack() as stack:
        try:
            host, port = stack.enter_context(postgres_server())
        except ServerUnavailable as exc:
            pytest.skip(f"no PostgreSQL server could be started here: {exc}")
        tune = local(PG_TUNE, host, port)
        tune[tune.index("--trials") + 1] = "6"
        code, out, err = run_cli(capsys, *tune, "--predict", "--timeout", "0.01", "--json", "a.json")
        assert code == 0, err
        first = json.loads((tmp_path / "a.json").read_text())
        assert first["source"] == "predicted" and first["study"]["name"] == "vgg16-ee"
        assert first["study"]["storage"].startswith("postgresql://postgres:carm@")
        started = len(first["trials"])
        assert 1 <= started < 6, "the study was to stop at its --timeout with trials left for the worker"

        worker = subprocess.run([sys.executable, "-m", "carm_advisor.cli", *local(PG_WORKER, host, port)],
                                cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                                capture_output=True, text=True, timeout=600)
        assert worker.returncode == 0, worker.stderr[-2000:]
        joined = re.search(r"worker done: (\d+) trials of study 'vgg16-ee'", worker.stdout)
        assert joined and int(joined.group(1)) >= 6 - started, worker.stdout[-2000:]

        tune[tune.index("--trials") + 1] = "8"
        code, out, err = run_cli(capsys, *tune, "--predict", "--json", "b.json")
        assert code == 0, err
        final = json.loads((tmp_path / "b.json").read_text())
        numbers = [t["number"] for t in final["trials"]]
        assert len(numbers) == len(set(numbers)) >= 8
        assert sum(t["state"] == "RUNNING" for t in final["trials"]) == 0


def test_a_postgresql_url_takes_the_installed_driver():
    """SQLAlchemy 2.1 reads postgresql:// as psycopg (3); with psycopg2-binary alone installed that failed with
    'needs a database driver that is not installed'. The URL now names the driver that imports."""
    from carm_advisor.tune.storage import with_installed_driver

    url = "postgresql://postgres:carm@dbhost:5432/carm"
    chosen = with_installed_driver(url)
    if importlib.util.find_spec("psycopg") is not None:
        assert chosen == "postgresql+psycopg://postgres:carm@dbhost:5432/carm"
    elif importlib.util.find_spec("psycopg2") is not None:
        assert chosen == "postgresql+psycopg2://postgres:carm@dbhost:5432/carm"
    for kept in ("postgresql+psycopg2://u@h/db", "sqlite:///x.db", "mysql://u@h/db"):
        assert with_installed_driver(kept) == kept


# ---- what CI runs, what the dev extra holds, what the text says ------------------------------------


def test_ci_runs_exactly_the_readmes_two_commands():
    shell = [b for b, _ in blocks("")]
    assert INSTALL + "\n" in shell and TESTS + "\n" in shell
    ci = (REPO_ROOT / ".ci" / "run").read_text().splitlines()
    commands = [ln for ln in ci if ln.strip() and not ln.startswith("#") and not ln.startswith(("set ", "cd "))]
    assert commands == [INSTALL, TESTS]


def test_the_dev_extra_holds_what_the_tests_need():
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0].lower(): req for req in extras["dev"]}
    assert {"pytest", "pytest-timeout", "torch", "jax", "psycopg2-binary", "pgserver", "keras-hub"} <= set(names)
    assert names["torch"] == "torch==2.13.0" and names["jax"] == "jax==0.10.2"


def _outside_layout() -> str:
    """The README without its Layout section (written elsewhere)."""
    return TEXT.replace(section("## Layout"), "")


def test_the_text_speaks_of_the_product_not_of_how_it_was_made():
    text = _outside_layout()
    assert "CARM_ADVISOR_CACHE" in text   # where the cache is, and how to move it
    for pattern in (r"\bsessions?\b", r"\brules? [A-Z0-9]{1,3}\b", r"\bissue \d+", r"\bissues? #\d+", r"\bhelpers?\b",
                    r"\blent\b", r"(?<![\w-])-s\d+\b", r"\bsessions\.md\b"):
        hits = [m.group(0) for m in re.finditer(pattern, text, re.IGNORECASE)]
        assert not hits, f"README.md (outside Layout) says {hits!r}"


def test_links_point_at_files_that_exist_or_are_being_written():
    text = _outside_layout()
    links = set(re.findall(r"\]\(([^)#:]+)\)", text))
    assert {"docs/measurements.md", "docs/design/power_model.md", "docs/design/calibration.md"} <= links
    assert not {"docs/sessions.md", "docs/power_model.md"} & links
    missing = [p for p in links - {"docs/measurements.md", "docs/design/power_model.md", "docs/design/calibration.md"}
               if not (REPO_ROOT / p).exists()]
    assert not missing

"""The command line run in the test's own process, and the one-line error every bad input must give."""

from __future__ import annotations

from carm_advisor.cli import main


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `carm-advise ARGV`, argparse's own exits (--help, usage errors) included."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, err, fragment):
    """Exit 2 and exactly one line on stderr, starting "carm-advise: error:" and naming `fragment`; no traceback."""
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("carm-advise: error:")
    assert fragment in lines[0]
    assert "Traceback" not in err

"""carm-advise, the command line (carm_advisor.cli.main:main)."""

from carm_advisor.cli.main import build_parser, main, tune_shorthand  # noqa: F401

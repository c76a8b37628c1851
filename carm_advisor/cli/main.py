"""carm-advise: the command line. Bad input -> one line on stderr and exit code 2, never a traceback.

One module per subcommand (analyze, ceilings and build-kernels, tune and worker), each adding its parser and
running it; Keras and the backends are imported only once a subcommand needs them, so `--help` is instant.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys

from carm_advisor.cli import analyze, ceilings, tune
from carm_advisor.cli.common import EXIT_INTERNAL, EXIT_USAGE, SUBCOMMANDS, Parser, fail
from carm_advisor.errors import CarmError


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="carm-advise", description="Cache-Aware Roofline advice for Keras models on NVIDIA Tensor Cores.")
    sub = parser.add_subparsers(dest="command", parser_class=Parser)

    analyze.add_parser(sub)
    ceilings.add_parser(sub)
    tune.add_parser(sub)
    tune.add_worker_parser(sub)
    ceilings.add_build_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # TensorFlow's start-up chatter is not our output
    parser = build_parser()
    given = sys.argv[1:] if argv is None else list(argv)
    expanded = tune_shorthand(given)
    args = parser.parse_args(expanded)
    args.shorthand = expanded != given   # `carm-advise MODEL ...` for `carm-advise tune MODEL ...`
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return {"analyze": analyze.run, "ceilings": ceilings.run, "build-kernels": ceilings.run_build, "tune": tune.run,
                "worker": tune.run_worker}[args.command](args)
    except CarmError as exc:
        fail(str(exc))
        return EXIT_USAGE
    except (ValueError, OSError) as exc:
        fail(f"{type(exc).__name__}: {exc}")
        return EXIT_USAGE
    except KeyboardInterrupt as exc:   # a study says where it is and what it keeps (tune.study.StudyInterrupted)
        fail("interrupted" + (f": {exc}" if str(exc) else ""))
        return 130
    except Exception as exc:  # a bug of ours: still one line, with a way to see the traceback
        if os.environ.get("CARM_ADVISOR_DEBUG"):
            raise
        fail(f"internal error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} "
              "(set CARM_ADVISOR_DEBUG=1 for the traceback)")
        return EXIT_INTERNAL




def tune_shorthand(argv: list[str]) -> list[str]:
    """`carm-advise MODEL [tune options]` means `carm-advise tune MODEL [tune options]`.

    Whenever the first argument is neither a subcommand nor an option (`carm-advise`, `--help` and the
    subcommands stay as they are); a near miss of a subcommand (`analyse`) stays too, for argparse to
    name the choices."""
    if not argv or argv[0] in SUBCOMMANDS or argv[0].startswith("-"):
        return argv
    first = argv[0]
    if (not os.path.exists(first) and not any(c in first for c in "./:")
            and difflib.get_close_matches(first.lower(), SUBCOMMANDS, n=1, cutoff=0.75)):
        return argv
    return ["tune", *argv]


if __name__ == "__main__":
    sys.exit(main())

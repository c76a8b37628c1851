"""What every subcommand shares: exit codes, the one-line argparse error, argument types, and the one-line
error every failure becomes."""

from __future__ import annotations

import argparse
import sys

from carm_advisor.errors import MappingError

EXIT_USAGE = 2
EXIT_INTERNAL = 1
SUBCOMMANDS = ("analyze", "ceilings", "build-kernels", "tune", "worker")


class Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse prints usage + message over several lines; we print one
        sys.stderr.write(f"carm-advise: error: {message} (see carm-advise {self.prog.split()[-1] if ' ' in self.prog else ''} --help)\n".replace("  ", " "))
        sys.exit(EXIT_USAGE)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, received: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, received: {text!r}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, received: {text!r}") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, received: {text!r}")
    return value


def int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like 32,64,128, received: {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers like 32,64,128, received: {text!r}")
    return values


def benchmark_names(text: str) -> tuple[str, ...]:
    """`a, b,c` -> ('a', 'b', 'c'): the argparse type of --exclude (here and in benchmarks/)."""
    return tuple(x.strip() for x in text.split(",") if x.strip())


def input_shape(text: str) -> tuple[str | None, tuple[int, ...], str | None]:
    """`--input-shape [NAME=]DIMS[:DTYPE]` -> (name or None, dims without the batch, dtype or None). DIMS: comma
    separated positive sizes (224,224,3; 128); none for one value per sample (a diffusion model's timestep)."""
    name, eq, rest = text.partition("=")
    if not eq:
        name, rest = None, text
    elif not name.strip() or any(ch.isspace() or ch in ",:" for ch in name.strip()):
        raise argparse.ArgumentTypeError(f"expected NAME=DIMS with NAME an input of the model (or an argument of "
                                         f"its call()), received: {text!r}")
    dims_text, colon, dtype = rest.partition(":")
    try:
        dims = tuple(int(t) for t in dims_text.split(",")) if dims_text.strip() else ()
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an input shape without the batch like 224,224,3 or 128 (then "
                                         f":int32 for integer ids), received: {text!r}") from None
    if any(d < 1 for d in dims):
        raise argparse.ArgumentTypeError(f"expected positive dimensions, received: {text!r}")
    if colon and not dtype.strip().isalnum():
        raise argparse.ArgumentTypeError(f"expected a dtype after ':' (int32, float32, ...), received: {text!r}")
    return (name.strip() if name else None), dims, (dtype.strip() if colon else None)


def add_input_shape_flags(parser) -> None:
    """--input-shape (repeatable), and --call-shape, its former name, kept as a hidden alias."""
    parser.add_argument("--input-shape", dest="input_shape", type=input_shape, action="append",
                        metavar="[NAME=]DIMS[:DTYPE]",
                        help="the model's input shapes without the batch, one flag per input, in order or by name "
                             "(:int32 for integer ids): a keras.applications image size (160,160,3); a model whose "
                             "inputs have unknown sizes (keras_hub BERT: token_ids=128:int32 ..., or one 128 for all "
                             "of them); a subclassed model's call() arguments (image=224,224,3 tokens=77:int32)")
    parser.add_argument("--call-shape", dest="input_shape", type=input_shape, action="append",
                        help=argparse.SUPPRESS)


def input_shapes_of(given: list[tuple[str | None, tuple[int, ...], str | None]] | None):
    """The --input-shape flags as input_shapes: a list in order, or {name: shape} when named (all or none); a
    dtype makes a keras.Input of it (integer ids stay integers). None where none were given."""
    if not given:
        return None
    named = [n is not None for n, _, _ in given]
    if any(named) and not all(named):
        raise MappingError("--input-shape: name every input (NAME=DIMS) or none of them, not some")

    def shape(dims, dtype):
        if dtype is None:
            return (None, *dims)
        import keras

        try:
            return keras.Input(dims, dtype=keras.backend.standardize_dtype(dtype))
        except ValueError:
            raise MappingError(f"--input-shape: expected a dtype after ':' (int32, float32, ...), received: "
                               f"{dtype!r}") from None

    if all(named):
        names = [n for n, _, _ in given]
        if len(set(names)) < len(names):
            raise MappingError(f"--input-shape: an input given twice: {', '.join(names)}")
        return {n: shape(d, t) for n, d, t in given}
    return [shape(d, t) for _, d, t in given]


def fail(message: str) -> None:
    sys.stderr.write("carm-advise: error: " + " ".join(message.split()) + "\n")


def import_keras_quietly(lean: bool = False) -> None:
    from carm_advisor.models.keras_import import import_keras  # seconds: only once a subcommand needs Keras

    import_keras(lean=lean)   # loads the backend once, quietly; a missing backend is a one-line error

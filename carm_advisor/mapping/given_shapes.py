"""The shapes a subclassed model's call() is traced on: given ones (``call_shapes``) or the build shapes Keras recorded.

(The one entry for every kind of model, Functional ones included, is ``mapping.input_shapes.shaped_model``.)

A subclassed model has no graph; the walker traces its call() on KerasTensors. Keras records the shapes the model
was built with (``_build_shapes_dict``), but for a ``call(self, a, b)`` of several tensor arguments only the
first one's. ``call_shapes`` gives the others: checked here against call()'s signature, held in a context
variable for the walker, and carried as JSON to a child process that reloads the model (``given_shapes_json``,
``call_shapes_json``). ``call_arguments`` is what whole-model measurement calls such a model on: the same
arguments the mapping traces.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import json
from dataclasses import dataclass

import keras

from carm_advisor.errors import MappingError
from carm_advisor.mapping.symbolic import checked_batch_size, is_graph_model, is_shape, tensor_spec


@dataclass(frozen=True)
class GivenShapes:
    """Call-argument shapes given for a subclassed model (``call_shapes``): checked, batch first."""

    args: tuple          # passed by position (positional-only arguments, ``*args``, or the list form)
    kwargs: dict         # passed by name
    text: str            # as the user wrote them, for messages


_CALL_SHAPES: contextvars.ContextVar[dict[int, GivenShapes]] = contextvars.ContextVar("carm_call_shapes", default={})


def given_for(model) -> GivenShapes | None:
    """The call shapes given for ``model`` in this context (``call_shapes``); None where none were given."""
    return _CALL_SHAPES.get().get(id(model))


def _call_parameters(model, with_training: bool = False) -> list[inspect.Parameter]:
    try:
        return [p for p in inspect.signature(model.call).parameters.values() if with_training or p.name != "training"]
    except (TypeError, ValueError):
        return []


def _tensor_parameters(model) -> list[inspect.Parameter]:
    """The named call() parameters a tensor is passed to by position or in order: not ``training``, ``mask``,
    ``*args`` or ``**kwargs``."""
    return [p for p in _call_parameters(model)
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "mask"]


def _takes_var_positional(model) -> bool:
    return any(p.kind == p.VAR_POSITIONAL for p in _call_parameters(model))


@dataclass(frozen=True)
class TypedShape:
    """A shape given with its dtype (a keras.Input / KerasTensor, an array): integer ids stay integers."""

    shape: tuple
    dtype: str


def checked_shape(shape, where: str):
    """A shape (batch first, any value there), a tensor spec (``keras.Input(shape=(77,), dtype="int32")``: shape
    and dtype), or a list/tuple/dict structure of them; else MappingError."""
    if hasattr(shape, "shape") and hasattr(shape, "dtype") and not isinstance(shape, (tuple, list, dict)):
        checked = checked_shape(tuple(shape.shape), where)
        return TypedShape(checked, keras.backend.standardize_dtype(shape.dtype))
    if is_shape(shape) and len(shape) >= 1:
        if any(d is None for d in tuple(shape)[1:]):
            raise MappingError(f"Expected {where} with known dimensions besides the batch, received: {tuple(shape)}")
        if any(d is not None and d < 1 for d in shape):
            raise MappingError(f"Expected {where} with positive dimensions, received: {tuple(shape)}")
        return tuple(None if d is None else int(d) for d in shape)
    if isinstance(shape, dict) and shape:
        return {k: checked_shape(v, f"{where}[{k!r}]") for k, v in shape.items()}
    if isinstance(shape, (list, tuple)) and shape and not is_shape(shape):
        return type(shape)(checked_shape(v, f"{where}[{i}]") for i, v in enumerate(shape))
    raise MappingError(f"Expected {where} to be a shape such as (None, 32) (batch first) or a list/dict of "
                       f"shapes, received: {shape!r}")


def _given_shapes(model, shapes) -> GivenShapes:
    cls = type(model).__name__
    named = _tensor_parameters(model)
    names = [p.name for p in named]
    if isinstance(shapes, dict):
        takes = {p.name: p for p in _call_parameters(model)
                 if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}   # a mask may be given by name
        unknown = [k for k in shapes if k not in takes]
        if unknown:
            raise MappingError(f"Expected input_shapes keys among the tensor arguments of {cls}.call() "
                               f"({', '.join(takes) or 'none'}), received: {', '.join(map(str, unknown))}")
        positional_only = [n for n, p in takes.items() if p.kind == p.POSITIONAL_ONLY]
        given_first = [n for n in positional_only if n in shapes]
        if given_first != positional_only[:len(given_first)]:
            raise MappingError(f"Expected input_shapes for the positional-only arguments of {cls}.call() in order "
                               f"from the first ({', '.join(positional_only)}), received: {', '.join(given_first)}")
        args = tuple(checked_shape(shapes[n], f"input_shapes[{n!r}]") for n in given_first)
        kwargs = {k: checked_shape(v, f"input_shapes[{k!r}]") for k, v in shapes.items() if k not in given_first}
        return GivenShapes(args, kwargs, repr(shapes))
    if not (isinstance(shapes, (list, tuple)) and shapes and not is_shape(shapes)):
        raise MappingError("Expected input_shapes as a list of shapes, one per tensor argument of call(), or "
                           f"{{argument name: shape}}, received: {shapes!r}")
    if _takes_var_positional(model):   # call(self, *xs) or call(self, x, *rest): every shape by position
        return GivenShapes(tuple(checked_shape(v, f"input_shapes[{i}]") for i, v in enumerate(shapes)), {},
                           repr(list(shapes)))
    if len(shapes) > len(named):
        raise MappingError(f"Expected at most {len(named)} input shape(s), one per tensor argument of "
                           f"{cls}.call() ({', '.join(names)}), received: {len(shapes)} (an "
                           "argument taking a list of tensors takes a list of shapes: [[(None, 4), (None, 6)]])")
    # By position while call()'s parameters run on without one skipped (mask, training); by name after it.
    by_position = 0
    for p in _call_parameters(model, with_training=True):
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) or p.name in ("mask", "training"):
            break
        by_position += 1
    checked = [checked_shape(v, f"input_shapes[{names[i]!r}]") for i, v in enumerate(shapes)]
    if any(p.kind == p.POSITIONAL_ONLY for p in named[by_position:len(checked)]):
        raise MappingError(f"Expected no positional-only argument of {cls}.call() after its mask or training "
                           f"argument, received: {', '.join(names)}")
    return GivenShapes(tuple(checked[:by_position]),
                       {p.name: v for p, v in zip(named[by_position:], checked[by_position:])},
                       repr(list(shapes)))


def tagged(value):
    if isinstance(value, TypedShape):
        return {"shape": list(value.shape), "dtype": value.dtype}
    if isinstance(value, dict):
        return {"dict": {k: tagged(v) for k, v in value.items()}}
    if isinstance(value, (list, tuple)) and not is_shape(value):
        return {"tuple" if isinstance(value, tuple) else "list": [tagged(v) for v in value]}
    return {"shape": list(value)}


def untagged(value):
    if "dict" in value:
        return {k: untagged(v) for k, v in value["dict"].items()}
    if "list" in value or "tuple" in value:
        items = [untagged(v) for v in value.get("list", value.get("tuple"))]
        return items if "list" in value else tuple(items)
    shape = tuple(value["shape"])
    return TypedShape(shape, value["dtype"]) if "dtype" in value else shape


@contextlib.contextmanager
def bound_to_model(var: contextvars.ContextVar, model, value):
    """Within the block, ``var`` (a context variable holding {id(model): value}) holds ``value`` for ``model``."""
    token = var.set({**var.get(), id(model): value})
    try:
        yield
    finally:
        var.reset(token)


def _given_in_context(model, given: GivenShapes):
    """The walker traces ``model`` on ``given`` within the block (call_shapes, call_shapes_json)."""
    return bound_to_model(_CALL_SHAPES, model, given)


def given_shapes_json(model) -> str | None:
    """The call shapes given for ``model`` in this context (``call_shapes``) as JSON, for a child process that
    reloads the model (``call_shapes_json``); None where none were given."""
    given = given_for(model)
    if given is None:
        return None
    return json.dumps({"args": [tagged(a) for a in given.args],
                       "kwargs": {k: tagged(v) for k, v in given.kwargs.items()}, "text": given.text})


@contextlib.contextmanager
def call_shapes_json(model, text: str | None):
    """``call_shapes`` for a model reloaded in another process, from ``given_shapes_json``'s text (None: none)."""
    if text is None:
        yield
        return
    doc = json.loads(text)
    given = GivenShapes(tuple(untagged(a) for a in doc["args"]),
                        {k: untagged(v) for k, v in doc["kwargs"].items()}, doc["text"])
    with _given_in_context(model, given):
        yield


def build_on_given_shapes(model) -> None:
    """Build a reloaded copy's sublayers by one symbolic call on the shapes given (``call_shapes_json``): Keras
    rebuilds a subclassed model from its first argument's shape only, which leaves a call() of several tensors
    unbuilt. For throwaway copies (the Nsight Compute child): the call adds graph nodes and builds weights."""
    given = given_for(model)
    if given is None or all(s.built for s in model._flatten_layers(include_self=False, recursive=True)):
        return
    args, kwargs = given_arguments(given, model.compute_dtype, 1)
    model(*args, **kwargs)


def call_arguments(model, batch_size: int) -> tuple[list, dict] | None:
    """What whole-model measurement calls a subclassed ``model`` on, as KerasTensors at ``batch_size``
    (positional, keyword): the arguments the mapping traces its call() on (the shapes given in ``call_shapes``,
    else the build shapes Keras recorded); None where Keras recorded none. A call() that takes more tensors than
    Keras recorded, with no shapes given, is a MappingError saying to pass input_shapes."""
    specs = call_specs(model, checked_batch_size(batch_size))
    required = [p for p in _tensor_parameters(model) if p.default is inspect.Parameter.empty]
    if specs is not None and id(model) not in _CALL_SHAPES.get() and len(specs[0]) < len(required):
        # Keras recorded fewer tensors than call() needs (its first argument's only): optional ones may stay out
        raise MappingError(f"Expected the inputs of subclassed model '{model.name}'"
                           + shapes_hint(model, None, specs[0]))
    return None if specs is None else _plain(specs)


def _plain(node):
    """Keras' tracked dicts and lists (build shapes come in them) as plain ones: jax.jit takes no other."""
    if isinstance(node, dict):
        return {k: _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    if isinstance(node, tuple):
        return tuple(_plain(v) for v in node)
    return node


@contextlib.contextmanager
def call_shapes(model, shapes):
    """Within it the walker traces subclassed ``model``'s call() on ``shapes`` instead of the build shapes
    Keras recorded (for a ``call(self, a, b)`` Keras records only ``a``'s). ``shapes``: one shape per tensor
    argument of call(), in order (every one by position where call() takes ``*args``), or {argument name: shape}
    (a ``mask`` argument only so); a shape is batch first (any batch value: the mapping's batch replaces it), and
    an argument taking a list or dict of tensors takes a list or dict of shapes. None: nothing changes. A
    Functional or Sequential model (whose inputs are known) is a MappingError, as are a name call() does not
    take, more shapes than it takes tensors, or a shape with an unknown dimension besides the batch."""
    if shapes is None:
        yield
        return
    if is_graph_model(model):
        name = getattr(model, "name", type(model).__name__)
        raise MappingError(f"call_shapes is for subclassed models; model '{name}' is a {type(model).__name__} "
                           "model (mapping.input_shapes.shaped_model takes its input shapes)")
    with _given_in_context(model, _given_shapes(model, shapes)):
        yield


def specs_of(shapes, dtype, batch_size: int):
    """A shape, or a structure of shapes, as KerasTensors of ``dtype`` with the batch set to ``batch_size``."""
    def to_spec(shape):
        shape = tuple(shape)
        return tensor_spec((batch_size,) + shape[1:] if shape else shape, dtype)

    return to_spec(shapes) if is_shape(shapes) else keras.tree.map_shape_structure(to_spec, shapes)


def build_specs(layer, batch_size: int):
    """The arguments a built layer was built (first called) with, as KerasTensors at ``batch_size``:
    (list of per-argument structures, their names); None where Keras recorded no build shapes."""
    shapes_dict = getattr(layer, "_build_shapes_dict", None)
    if not layer.built or not shapes_dict:
        return None
    structs = [specs_of(v, layer.compute_dtype, batch_size) for v in shapes_dict.values()]
    names = [k[: -len("_shape")] if k.endswith("_shape") else k for k in shapes_dict]
    return structs, names


def given_arguments(given: GivenShapes, dtype, batch_size: int) -> tuple[list, dict]:
    """The positional and keyword arguments of a call() on the shapes given, as KerasTensors."""
    return ([_given_specs(a, dtype, batch_size) for a in given.args],
            {k: _given_specs(v, dtype, batch_size) for k, v in given.kwargs.items()})


def _given_specs(given, dtype, batch_size: int):
    """Checked given shapes (``checked_shape``) as KerasTensors at ``batch_size``: a typed one at its dtype, a
    bare shape at ``dtype`` (the model's compute dtype)."""
    if isinstance(given, TypedShape):
        return specs_of(given.shape, given.dtype, batch_size)
    if isinstance(given, dict):
        return {k: _given_specs(v, dtype, batch_size) for k, v in given.items()}
    if isinstance(given, (list, tuple)) and not is_shape(given):
        return type(given)(_given_specs(v, dtype, batch_size) for v in given)
    return specs_of(given, dtype, batch_size)


def call_specs(model, batch_size: int) -> tuple[list, dict] | None:
    """The arguments subclassed ``model``'s call() is traced on, as KerasTensors at ``batch_size``: the shapes
    given (``call_shapes``), else the build shapes Keras recorded; None where it recorded none."""
    given = given_for(model)
    if given is not None:
        return given_arguments(given, model.compute_dtype, batch_size)
    built = build_specs(model, batch_size)
    if built is None:
        return None
    structs, _ = built
    if _takes_var_positional(model) and not _tensor_parameters(model) and len(structs) == 1 \
            and isinstance(structs[0], (list, tuple)):
        structs = list(structs[0])   # call(self, *xs): Keras records the tuple of their shapes as one
    return structs, {}


def shapes_hint(model, given, structs) -> str:
    """Where call() takes more tensors than Keras recorded build shapes for: how to give them."""
    if given is not None or (len(_tensor_parameters(model)) <= len(structs) and not _takes_var_positional(model)):
        return ""
    names = ", ".join(("*" if p.kind == p.VAR_POSITIONAL else "") + p.name for p in _call_parameters(model)
                      if p.kind != p.VAR_KEYWORD and p.name != "mask")
    return (f"; Keras recorded the shape of the first argument only: pass input_shapes for ({names}) "
            "(carm-advise: an --input-shape for each)")


def call_identity(model, shapes) -> str:
    """The call shapes as the walker reads them, for a study's fingerprint: shapes and dtypes, not the batch (the
    configuration's replaces it) nor the names of the keras.Input tensors given (new in every process). The same
    shapes given by position and by name read apart."""
    def unbatched(node):
        if isinstance(node, dict):
            return {k: (([None] + v[1:]) if k == "shape" and v else unbatched(v)) for k, v in node.items()}
        if isinstance(node, list):
            return [unbatched(v) for v in node]
        return node

    with call_shapes(model, shapes):
        doc = json.loads(given_shapes_json(model))
    return json.dumps(unbatched({"args": doc["args"], "kwargs": doc["kwargs"]}), sort_keys=True)

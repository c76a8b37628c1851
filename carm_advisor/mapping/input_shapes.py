"""The input shapes a user gives for any Keras model (``input_shapes=``; ``carm-advise --input-shape``).

One form for every kind of model: a list of batch-first shapes in order, or {name: shape}; a ``keras.Input`` (or
anything with a shape and a dtype) in place of a shape keeps its dtype (integer token ids stay integers).

- A Functional or Sequential model: one shape per input of ``model.inputs`` in order, by input name (a dict input's
  key, its ``keras.Input`` name), or one unnamed shape that every input with an unknown dimension takes (keras_hub's
  BERT: ``token_ids``, ``segment_ids`` and ``padding_mask`` are all ``(None, None)`` int32, so one ``(None, 128)``
  gives all three 128 tokens; where no input has one, every input takes it). A shape must agree with the input's
  rank and known dimensions, a dtype with its dtype. The model is then mapped and measured as its own graph on
  inputs of those shapes: ``keras.models.clone_model(model, input_tensors=..., clone_function=lambda layer:
  layer)``, the same layers and weights (nothing copied) called on concrete ``keras.Input``s; the nodes this adds to
  the user's layers are removed when ``shaped_model`` ends. A model with an unknown dimension besides the batch and
  no shapes given is one MappingError naming those inputs and the flag to pass, with an example from their names and
  dtypes.
- A subclassed model: its call() arguments (``given_shapes.call_shapes``).
- A keras.applications name (tune, the CLI): one unnamed shape, its image size, which the model is built at
  (``image_shape``).

Shapes travel to other processes (the tuner's trial worker, --verify's child, a joining worker) as JSON:
``shapes_json`` / ``shapes_from_json``; ``portable_shapes(model)`` is the JSON of the shapes a model is analysed on
in this context.
"""

from __future__ import annotations

import contextlib
import contextvars
import json

import keras

from carm_advisor.errors import MappingError
from carm_advisor.mapping.given_shapes import (
    TypedShape,
    bound_to_model,
    call_identity,
    call_shapes,
    checked_shape,
    tagged,
    untagged,
)
from carm_advisor.mapping.symbolic import graph_nodes_restored, is_graph_model, is_shape

FLAG = "--input-shape"
EXAMPLE_LENGTH = 128   # the length an example flag gives an unknown dimension

_PORTABLE: contextvars.ContextVar[dict[int, str]] = contextvars.ContextVar("carm_input_shapes", default={})


def normalized(shapes):
    """``shapes`` checked without a model: a list of checked shapes in order or {name: checked shape}, each a
    batch-first tuple, a TypedShape, or a list/dict structure of them (a subclassed call() argument taking
    several tensors); None for None. A bare shape, an empty list or a bad shape is a MappingError."""
    if shapes is None:
        return None
    if isinstance(shapes, dict) and shapes:
        bad = [k for k in shapes if not isinstance(k, str) or not k]
        if bad:
            raise MappingError(f"Expected input_shapes names as text, received: {', '.join(map(repr, bad))}")
        return {k: checked_shape(v, f"input_shapes[{k!r}]") for k, v in shapes.items()}
    if isinstance(shapes, (list, tuple)) and shapes and not is_shape(shapes):
        return [checked_shape(v, f"input_shapes[{i}]") for i, v in enumerate(shapes)]
    raise MappingError("Expected input_shapes as a list of shapes in order (batch first: [(None, 128)]) or "
                       f"{{input name: shape}}, received: {shapes!r}")


def shapes_json(shapes) -> str | None:
    """``shapes`` (any form ``normalized`` takes) as JSON for another process; None for None."""
    checked = normalized(shapes)
    if checked is None:
        return None
    if isinstance(checked, dict):
        return json.dumps({"names": {k: tagged(v) for k, v in checked.items()}})
    return json.dumps({"order": [tagged(v) for v in checked]})


def shapes_from_json(text: str | None):
    """``shapes_json``'s text back as ``normalized`` shapes; None for None."""
    if text is None:
        return None
    doc = json.loads(text)
    if "names" in doc:
        return {k: untagged(v) for k, v in doc["names"].items()}
    return [untagged(v) for v in doc["order"]]


def image_shape(shapes, name: str) -> tuple[int, ...] | None:
    """The image size a keras.applications model ``name`` is built at: the one unnamed shape given, without the
    batch (H,W,C, or C,H,W in the channels_first layout); None for None; else a MappingError."""
    checked = normalized(shapes)
    if checked is None:
        return None
    one = checked[0] if isinstance(checked, list) and len(checked) == 1 else None
    if isinstance(one, TypedShape) and "float" in one.dtype:
        one = one.shape
    if not (isinstance(one, tuple) and is_shape(one) and len(one) >= 2):
        raise MappingError(f"{FLAG} of the keras.applications model {name} is one unnamed image size without a dtype, "
                           f"e.g. {FLAG} 160,160,3; received: {_flags(checked)}")
    return tuple(int(d) for d in one[1:])


# ---- Functional and Sequential models ---------------------------------------------------------------


def _graph_inputs(model) -> list:
    """A graph model's input tensors, flat, in model.inputs order."""
    return list(model.inputs or [])


def _input_names(model, inputs: list) -> list[list[str]]:
    """Each input's names, the one messages use first: a dict input's key, its keras.Input (InputLayer) name, the
    KerasTensor's own name."""
    keys: list = [None] * len(inputs)
    struct = getattr(model, "_inputs_struct", None) if not isinstance(model, keras.Sequential) else None
    if isinstance(struct, dict):
        flat_keys = keras.tree.flatten({k: k for k in struct})
        if len(flat_keys) == len(inputs):
            keys = flat_keys
    names = []
    for key, tensor in zip(keys, inputs):
        history = getattr(tensor, "_keras_history", None)
        layer = getattr(getattr(history, "operation", None), "name", None)
        names.append(list(dict.fromkeys(n for n in (key, layer, getattr(tensor, "name", None)) if n)))
    return names


def _unknown(tensor) -> bool:
    return any(d is None for d in tuple(tensor.shape)[1:])


def _dims_text(dims) -> str:
    return ",".join(str(EXAMPLE_LENGTH if d is None else d) for d in dims)


def _open_inputs(model, skip=()) -> list[tuple[str, object]]:
    """(name, tensor) of each input with an unknown dimension besides the batch, those of ``skip`` left out."""
    inputs = _graph_inputs(model)
    names = _input_names(model, inputs)
    return [(names[i][0], t) for i, t in enumerate(inputs) if _unknown(t) and i not in skip]


def _example(open_) -> str:
    """The inputs named with their shapes and dtypes, and the flags that give them (all of one shape: one flag)."""
    said = ", ".join(f"{n} {tuple(t.shape)} {t.dtype}" for n, t in open_)
    example = " ".join(f"{FLAG} {n}={_dims_text(tuple(t.shape)[1:])}:{t.dtype}" for n, t in open_)
    if len(open_) > 1 and len({(tuple(t.shape)[1:], str(t.dtype)) for _, t in open_}) == 1:
        example += f" (or one unnamed {FLAG} {_dims_text(tuple(open_[0][1].shape)[1:])} for all of them)"
    return f"{said}; give them with {FLAG} [NAME=]DIMS[:DTYPE] (input_shapes= in Python), e.g. {example}"


def missing_shapes_message(model) -> str:
    """One line: which inputs of a graph model have an unknown dimension besides the batch, and the flags (and the
    input_shapes=) that give them, with an example from their names and dtypes."""
    return (f"Expected input shapes for model '{model.name}', whose inputs of unknown size besides the batch are "
            + _example(_open_inputs(model)))


def _flag(name: str | None, given) -> str:
    """A checked shape as the flag that gives it."""
    dims = given.shape[1:] if isinstance(given, TypedShape) else given[1:] if is_shape(given) else None
    text = repr(given) if dims is None else ",".join(map(str, dims))
    if isinstance(given, TypedShape):
        text += f":{given.dtype}"
    return f"{FLAG} {name + '=' if name else ''}{text}"


def _flags(checked) -> str:
    if isinstance(checked, dict):
        return " ".join(_flag(k, v) for k, v in checked.items())
    return " ".join(_flag(None, v) for v in checked)


def _agreed(model, name: str, tensor, given, said: str):
    """The input ``tensor`` on the checked shape ``given`` (``said``: the flag as given): a KerasTensor at the
    input's batch (None, or the one it fixes) and dtype; a MappingError where it does not agree with the input's
    known dimensions or dtype."""
    if isinstance(given, TypedShape):
        shape, dtype = given.shape, given.dtype
    elif isinstance(given, tuple) and is_shape(given):
        shape, dtype = given, None
    else:
        raise MappingError(f"Expected one shape for input {name} of model '{model.name}', received: {given!r}")
    own = tuple(tensor.shape)
    dims = tuple(shape[1:])
    if len(dims) != len(own) - 1 or any(k is not None and k != d for k, d in zip(own[1:], dims)):
        raise MappingError(f"{said} does not agree with input {name} of model '{model.name}', of shape {own} (batch "
                           f"first, None: any size): give its {len(own) - 1} dimension(s) besides the batch, keeping "
                           "the known ones")
    if dtype is not None and keras.backend.standardize_dtype(dtype) != keras.backend.standardize_dtype(tensor.dtype):
        raise MappingError(f"{said} does not agree with input {name} of model '{model.name}', of dtype "
                           f"{tensor.dtype}")
    return keras.KerasTensor((own[0], *dims), dtype=tensor.dtype)


def graph_input_specs(model, shapes) -> list:
    """A Functional or Sequential model's inputs on the shapes given (``normalized`` or any form it takes): one
    KerasTensor per model.inputs, in order; its own inputs where none are given and every dimension
    besides the batch is known; else a MappingError (missing_shapes_message, or what does not agree)."""
    inputs = _graph_inputs(model)
    checked = normalized(shapes)
    if checked is None:
        if any(_unknown(t) for t in inputs):
            raise MappingError(missing_shapes_message(model))
        return inputs
    names = _input_names(model, inputs)
    listed = ", ".join(n[0] for n in names)
    if isinstance(checked, dict):
        index = {alias: i for i, aliases in enumerate(names) for alias in aliases}
        strange = [k for k in checked if k not in index]
        if strange:
            raise MappingError(f"Expected input names of model '{model.name}' ({listed}), received: "
                               f"{', '.join(strange)}")
        given = {index[k]: (k, v) for k, v in checked.items()}
        if len(given) < len(checked):
            raise MappingError(f"Expected each input of model '{model.name}' once ({listed}), received: "
                               f"{', '.join(checked)}")
        missing = _open_inputs(model, skip=given)
        if missing:
            raise MappingError(f"Expected a shape for every input of model '{model.name}' of unknown size besides the "
                               f"batch; none given for {_example(missing)}")
        return [_agreed(model, names[i][0], t, given[i][1], _flag(given[i][0], given[i][1])) if i in given else t
                for i, t in enumerate(inputs)]
    if len(checked) == 1 and len(inputs) > 1:   # one shape for every input of unknown size (all where none is)
        takes = [i for i, t in enumerate(inputs) if _unknown(t)] or list(range(len(inputs)))
        return [_agreed(model, names[i][0], t, checked[0], _flag(None, checked[0])) if i in takes else t
                for i, t in enumerate(inputs)]
    if len(checked) != len(inputs):
        raise MappingError(f"Expected {len(inputs)} input shape(s), one per input of model '{model.name}' in order "
                           f"({listed}), or by name (NAME=DIMS), received: {len(checked)}")
    return [_agreed(model, names[i][0], t, v, _flag(None, v)) for i, (t, v) in enumerate(zip(inputs, checked))]


def _nodes_removed_after(model):
    """Remove, at the end of the block, the graph nodes added in it to ``model``'s layers and operations."""
    ops = {id(op): op for op in model._flatten_layers(include_self=True, recursive=True)}
    stack = [model]
    while stack:   # the graph's own operations (keras.ops nodes), nested models' included
        for op in getattr(stack.pop(), "operations", None) or []:
            if id(op) not in ops:
                ops[id(op)] = op
            if is_graph_model(op):
                stack.append(op)
    return graph_nodes_restored(ops.values())


def _on_inputs(model, specs: list):
    """``model``'s graph on new keras.Inputs of ``specs``' shapes: the same layers (clone_function returns each
    as it is), a Functional (Sequential) of the model's name."""
    inputs = _graph_inputs(model)
    names = _input_names(model, inputs)
    fresh = [keras.Input(batch_shape=tuple(s.shape), dtype=s.dtype, name=n[0]) for s, n in zip(specs, names)]
    if isinstance(model, keras.Sequential):
        structure = fresh[0]
    else:
        structure = keras.tree.pack_sequence_as(model.input, fresh)
    return keras.models.clone_model(model, input_tensors=structure, clone_function=lambda layer: layer)


@contextlib.contextmanager
def shaped_model(model, shapes):
    """The model to map and measure on ``shapes`` (any form ``normalized`` takes; None: none given), within the
    block: a graph model whose inputs the shapes change, as its graph on concrete inputs (its own layers); a
    graph model they leave as it is (or with every dimension known), itself; a subclassed one, itself, its call()
    traced on the shapes (given_shapes.call_shapes). A graph model with an unknown dimension besides the batch
    and no shapes is a MappingError (missing_shapes_message). ``portable_shapes`` of the yielded model gives the
    shapes to another process."""
    text = shapes_json(shapes)
    if not is_graph_model(model):
        with call_shapes(model, shapes_from_json(text)), _portable(model, text):
            yield model
        return
    specs = graph_input_specs(model, shapes_from_json(text))
    inputs = _graph_inputs(model)
    if all(tuple(s.shape) == tuple(t.shape) for s, t in zip(specs, inputs)):
        with _portable(model, text):
            yield model
        return
    with _nodes_removed_after(model):
        view = _on_inputs(model, specs)
        with _portable(view, text):
            yield view


def _portable(model, text: str | None):
    """Within the block, ``model``'s shapes as shapes_json text (portable_shapes); nothing where none were given."""
    return contextlib.nullcontext() if text is None else bound_to_model(_PORTABLE, model, text)


def portable_shapes(model) -> str | None:
    """The shapes ``model`` is analysed on in this context (shaped_model) as ``shapes_json`` text; None where
    none were given."""
    return _PORTABLE.get().get(id(model))


def shapes_identity(model, shapes) -> str:
    """What a study's fingerprint knows the shapes by: a graph model's input shapes and dtypes by input name once
    resolved (the same whether given in order, by name or as one shape for all), a subclassed model's call
    shapes as its call() reads them (given_shapes.call_identity); never the batch."""
    if not is_graph_model(model):
        return call_identity(model, normalized(shapes))
    specs = graph_input_specs(model, shapes)
    names = [n[0] for n in _input_names(model, _graph_inputs(model))]
    return json.dumps({"inputs": {n: [list(s.shape[1:]), str(s.dtype)] for n, s in zip(names, specs)}},
                      sort_keys=True)

"""Walk a Keras 3 model's graph and list every layer call with concrete shapes, without executing it.

Shapes come from Keras' own symbolic machinery: the KerasTensors recorded on each layer's inbound
nodes, and, where those hold unknown dimensions (a nested model built for ``(None, None, 3)`` inputs
and called on 224x224 images), from ``compute_output_spec`` on concrete KerasTensors. Nothing is run
on a device and no backend tensor is created by the walk itself.

- One :class:`LayerCall` per call of a layer: a layer shared by two calls yields ``name`` and ``name#1``.
- Nested Functional and Sequential models are walked, their layers named ``outer/inner``; the models
  themselves are never leaves. ``InputLayer`` yields nothing.
- The batch dimension becomes ``batch_size``: the leading ``None``, and also a batch the model fixes
  (``keras.Input((256,), batch_size=3)``): the model's inputs get the requested batch and every shape
  after them is inferred from those, so the figures are for the batch asked for.
- ``keras.ops`` calls on KerasTensors inside a functional graph (``ops.add``, ``ops.multiply``, as
  MobileNetV3 and ConvNeXt use) are operations, not layers; they are yielded like layers, their
  ``layer`` being the ``keras.Operation``.
- An output dimension a layer's ``compute_output_shape`` leaves unknown though its inputs are concrete
  (``EinsumDense("abc,cd->abd", output_shape=(None, 7))``) is resolved by tracing that layer's
  ``call`` on the concrete inputs (``keras.src.backend.compute_output_spec``; nothing is executed).
- Each LayerCall names the call argument of each input (``input_names``: MultiHeadAttention's query,
  value, key and masks) and which inputs are one tensor passed twice (``input_same_as``).
- Subclassed models have no graph: their ``call()`` is traced once on ``keras.KerasTensor`` inputs of
  the shapes recorded when the model was built (``_build_shapes_dict``, batch set to ``batch_size``),
  which records every sublayer call and every ``keras.ops`` call as a graph node, exactly as the
  functional API does; that graph is walked like a functional one (call order, a layer called twice
  yields ``name`` and ``name#1``, ops are yielded). The nodes the trace adds to the sublayers are removed
  afterwards. Keras' own layers are leaves; a user layer made of sublayers with no cost model of its own
  is opened the same way, in subclassed and functional models alike.
- A ``call()`` that cannot run on KerasTensors (backend-native ``tf.*`` / ``torch.*`` code, Python
  branches on tensor values), or a model Keras recorded no input shapes for (a ``call(self, a, b)`` of
  several tensor arguments: Keras records the first only, unless they are given with ``call_shapes`` /
  ``input_shapes=``), falls back to the built sublayers in attribute order with their build
  shapes, and warns (RuntimeWarning) that ops outside the layers are not counted: the totals are a
  lower bound. A weight-free layer (Dropout, Flatten, pooling) without build shapes, and a sublayer never
  built (called only in a branch the model was not built through), are skipped there and named in that
  warning; a built layer with weights but no build shapes is a :class:`MappingError`. Shapes given for
  call() are a promise: where they do not trace the whole model, that is a :class:`MappingError`.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import json
import numbers
import re
import warnings
from dataclasses import dataclass
from typing import Iterator

import keras
from keras.src.utils.naming import to_snake_case

from carm_advisor.errors import MappingError
from carm_advisor.mapping.registry import lookup
from carm_advisor.mapping.types import LayerCall
from carm_advisor.units import named_list


def _functional_class():
    from keras.src.models.functional import Functional

    return Functional


def _is_graph_model(op) -> bool:
    """Keras' own Functional / Sequential containers: walked, never costed."""
    return isinstance(op, (_functional_class(), keras.Sequential))


@dataclass(frozen=True)
class _GivenShapes:
    """Call-argument shapes given for a subclassed model (``call_shapes``): checked, batch first."""

    args: tuple          # passed by position (positional-only arguments, ``*args``, or the list form)
    kwargs: dict         # passed by name
    text: str            # as the user wrote them, for messages


_CALL_SHAPES: contextvars.ContextVar[dict[int, _GivenShapes]] = contextvars.ContextVar("carm_call_shapes", default={})


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
class _TypedShape:
    """A shape given with its dtype (a keras.Input / KerasTensor, an array): integer ids stay integers."""

    shape: tuple
    dtype: str


def _checked_shape(shape, where: str):
    """A shape (batch first, any value there), a tensor spec (``keras.Input(shape=(77,), dtype="int32")``: shape
    and dtype), or a list/tuple/dict structure of them; else MappingError."""
    if hasattr(shape, "shape") and hasattr(shape, "dtype") and not isinstance(shape, (tuple, list, dict)):
        checked = _checked_shape(tuple(shape.shape), where)
        return _TypedShape(checked, keras.backend.standardize_dtype(shape.dtype))
    if _is_shape(shape) and len(shape) >= 1:
        if any(d is None for d in tuple(shape)[1:]):
            raise MappingError(f"Expected {where} with known dimensions besides the batch, received: {tuple(shape)}")
        if any(d is not None and d < 1 for d in shape):
            raise MappingError(f"Expected {where} with positive dimensions, received: {tuple(shape)}")
        return tuple(None if d is None else int(d) for d in shape)
    if isinstance(shape, dict) and shape:
        return {k: _checked_shape(v, f"{where}[{k!r}]") for k, v in shape.items()}
    if isinstance(shape, (list, tuple)) and shape and not _is_shape(shape):
        return type(shape)(_checked_shape(v, f"{where}[{i}]") for i, v in enumerate(shape))
    raise MappingError(f"Expected {where} to be a shape such as (None, 32) (batch first) or a list/dict of "
                       f"shapes, received: {shape!r}")


def _given_shapes(model, shapes) -> _GivenShapes:
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
        args = tuple(_checked_shape(shapes[n], f"input_shapes[{n!r}]") for n in given_first)
        kwargs = {k: _checked_shape(v, f"input_shapes[{k!r}]") for k, v in shapes.items() if k not in given_first}
        return _GivenShapes(args, kwargs, repr(shapes))
    if not (isinstance(shapes, (list, tuple)) and shapes and not _is_shape(shapes)):
        raise MappingError("Expected input_shapes as a list of shapes, one per tensor argument of call(), or "
                           f"{{argument name: shape}}, received: {shapes!r}")
    if _takes_var_positional(model):   # call(self, *xs) or call(self, x, *rest): every shape by position
        return _GivenShapes(tuple(_checked_shape(v, f"input_shapes[{i}]") for i, v in enumerate(shapes)), {},
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
    checked = [_checked_shape(v, f"input_shapes[{names[i]!r}]") for i, v in enumerate(shapes)]
    if any(p.kind == p.POSITIONAL_ONLY for p in named[by_position:len(checked)]):
        raise MappingError(f"Expected no positional-only argument of {cls}.call() after its mask or training "
                           f"argument, received: {', '.join(names)}")
    return _GivenShapes(tuple(checked[:by_position]),
                        {p.name: v for p, v in zip(named[by_position:], checked[by_position:])},
                        repr(list(shapes)))


def _tagged(value):
    if isinstance(value, _TypedShape):
        return {"shape": list(value.shape), "dtype": value.dtype}
    if isinstance(value, dict):
        return {"dict": {k: _tagged(v) for k, v in value.items()}}
    if isinstance(value, (list, tuple)) and not _is_shape(value):
        return {"tuple" if isinstance(value, tuple) else "list": [_tagged(v) for v in value]}
    return {"shape": list(value)}


def _untagged(value):
    if "dict" in value:
        return {k: _untagged(v) for k, v in value["dict"].items()}
    if "list" in value or "tuple" in value:
        items = [_untagged(v) for v in value.get("list", value.get("tuple"))]
        return items if "list" in value else tuple(items)
    shape = tuple(value["shape"])
    return _TypedShape(shape, value["dtype"]) if "dtype" in value else shape


@contextlib.contextmanager
def _given_in_context(model, given: _GivenShapes):
    """The walker traces ``model`` on ``given`` within the block (call_shapes, call_shapes_json)."""
    token = _CALL_SHAPES.set({**_CALL_SHAPES.get(), id(model): given})
    try:
        yield
    finally:
        _CALL_SHAPES.reset(token)


def given_shapes_json(model) -> str | None:
    """The call shapes given for ``model`` in this context (``call_shapes``) as JSON, for a child process that
    reloads the model (``call_shapes_json``); None where none were given."""
    given = _CALL_SHAPES.get().get(id(model))
    if given is None:
        return None
    return json.dumps({"args": [_tagged(a) for a in given.args],
                       "kwargs": {k: _tagged(v) for k, v in given.kwargs.items()}, "text": given.text})


@contextlib.contextmanager
def call_shapes_json(model, text: str | None):
    """``call_shapes`` for a model reloaded in another process, from ``given_shapes_json``'s text (None: none)."""
    if text is None:
        yield
        return
    doc = json.loads(text)
    given = _GivenShapes(tuple(_untagged(a) for a in doc["args"]),
                         {k: _untagged(v) for k, v in doc["kwargs"].items()}, doc["text"])
    with _given_in_context(model, given):
        yield


def build_on_given_shapes(model) -> None:
    """Build a reloaded copy's sublayers by one symbolic call on the shapes given (``call_shapes_json``): Keras
    rebuilds a subclassed model from its first argument's shape only, which leaves a call() of several tensors
    unbuilt. For throwaway copies (the Nsight Compute child): the call adds graph nodes and builds weights."""
    given = _CALL_SHAPES.get().get(id(model))
    if given is None or all(s.built for s in model._flatten_layers(include_self=False, recursive=True)):
        return
    args, kwargs = _Walk(1).given_arguments(given, model.compute_dtype)
    model(*args, **kwargs)


def call_arguments(model, batch_size: int) -> tuple[list, dict] | None:
    """What whole-model measurement calls a subclassed ``model`` on, as KerasTensors at ``batch_size``
    (positional, keyword): the arguments the mapping traces its call() on (the shapes given in ``call_shapes``,
    else the build shapes Keras recorded); None where Keras recorded none. A call() that takes more tensors than
    Keras recorded, with no shapes given, is a MappingError saying to pass input_shapes."""
    walk = _Walk(batch_size)
    specs = walk.call_specs(model)
    required = [p for p in _tensor_parameters(model) if p.default is inspect.Parameter.empty]
    if specs is not None and id(model) not in _CALL_SHAPES.get() and len(specs[0]) < len(required):
        # Keras recorded fewer tensors than call() needs (its first argument's only): optional ones may stay out
        raise MappingError(f"Expected the inputs of subclassed model '{model.name}'"
                           + walk.shapes_hint(model, None, specs[0]))
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
    if _is_graph_model(model):
        name = getattr(model, "name", type(model).__name__)
        raise MappingError(f"input_shapes is for subclassed models; model '{name}' is a {type(model).__name__} "
                           "model whose inputs are known")
    with _given_in_context(model, _given_shapes(model, shapes)):
        yield


def _fill_batch(shape, batch_size: int) -> tuple:
    shape = tuple(shape)
    if shape and shape[0] is None:
        shape = (batch_size,) + shape[1:]
    return shape


def _concrete(shape, batch_size: int) -> tuple | None:
    """The shape with its batch filled in, or None if another dimension is still unknown."""
    shape = _fill_batch(shape, batch_size)
    return None if any(d is None for d in shape) else tuple(int(d) for d in shape)


def _spec(shape, dtype) -> keras.KerasTensor:
    return keras.KerasTensor(tuple(shape), dtype=dtype)


def _flat_tensors(structure) -> list:
    return [t for t in keras.tree.flatten(structure) if isinstance(t, keras.KerasTensor)]


def _same_as(tensors) -> tuple[int, ...]:
    first: dict[int, int] = {}
    return tuple(first.setdefault(id(t), i) for i, t in enumerate(tensors))


def _argument_names(op, args, kwargs) -> tuple[str, ...]:
    """The call argument each KerasTensor of ``(args, kwargs)`` was passed as, in flattening order."""
    try:
        params = [p.name for p in inspect.signature(op.call).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    named_args = tuple(
        keras.tree.map_structure(lambda _, n=(params[i] if i < len(params) else f"arg{i}"): n, a)
        for i, a in enumerate(args)
    )
    named_kwargs = {k: keras.tree.map_structure(lambda _, n=k: n, v) for k, v in kwargs.items()}
    values = keras.tree.flatten((tuple(args), dict(kwargs)))
    names = keras.tree.flatten((named_args, named_kwargs))
    if len(values) != len(names):
        return ()
    return tuple(n for v, n in zip(values, names) if isinstance(v, keras.KerasTensor))


_TENSOR_NAME = re.compile(r"keras_tensor(?:_(\d+))?")
_TENSOR_REPR = re.compile(r"<KerasTensor shape=(\([^)]*\)), dtype=(\w+)[^>]*>")


def _readable(exc: Exception) -> str:
    """The first line of an exception, a KerasTensor's repr in it shortened to its shape and dtype (its name,
    keras_tensor_136, differs on every trace)."""
    first = str(exc).splitlines()[0] if str(exc) else ""
    return _TENSOR_REPR.sub(r"KerasTensor(shape=\1, dtype=\2)", first)


def _nodes_in_order(graph) -> list:
    """A graph's nodes, producers before consumers: by depth (then operation order) for a functional
    model; in call order for a traced call() (a keras Function: its nodes in the order their output
    KerasTensors were created, which Keras numbers keras_tensor, keras_tensor_1, ...), falling back to
    the depth order where a name does not say."""
    order = {id(op): i for i, op in enumerate(graph.operations)}
    by_depth = [n for depth in sorted(graph._nodes_by_depth, reverse=True)
                for n in sorted(graph._nodes_by_depth[depth], key=lambda n: order.get(id(n.operation), 0))]
    if isinstance(graph, keras.layers.Layer):  # Functional / Sequential: the depth order, as always
        return by_depth
    keys = []
    for node in by_depth:
        matches = [_TENSOR_NAME.fullmatch(str(getattr(t, "name", ""))) for t in node.outputs]
        if not matches or not all(matches):
            return by_depth
        keys.append(min(int(m.group(1) or 0) for m in matches))
    return [node for _, _, node in sorted(zip(keys, range(len(by_depth)), by_depth))]


def _lookup_cost(op):
    return lookup(op)


def is_composite_user_layer(op) -> bool:
    """A user layer made of sublayers with no cost model of its own: opened, not costed as a leaf."""
    if not isinstance(op, keras.layers.Layer) or _is_graph_model(op):
        return False
    if type(op).__module__.startswith("keras."):
        return False
    children = list(op._flatten_layers(include_self=False, recursive=False))
    return bool(children) and _lookup_cost(op) is None


@contextlib.contextmanager
def _nodes_restored(layer):
    """Remove the graph nodes a symbolic trace adds to ``layer`` and its sublayers (the user's model is
    left as it was: no extra inbound/outbound nodes)."""
    layers = list(layer._flatten_layers(include_self=True, recursive=True))
    saved = [(lay, len(lay._inbound_nodes), len(lay._outbound_nodes)) for lay in layers]
    try:
        yield
    finally:
        for lay, n_in, n_out in saved:
            del lay._inbound_nodes[n_in:]
            del lay._outbound_nodes[n_out:]


def _trace(layer, args, kwargs):
    """``layer.call(*args, **kwargs)`` on KerasTensors: a keras Function whose nodes are every sublayer
    and keras.ops call, in order. Raises whatever the call raises."""
    from keras.src.ops.function import Function

    inputs = list({id(t): t for t in _flat_tensors((args, kwargs))}.values())
    with _nodes_restored(layer):
        outputs = layer.call(*args, **kwargs)
        return Function(inputs, _flat_tensors(outputs), name=layer.name)


class _Walk:
    trace_error: str | None = None

    def __init__(self, batch_size: int):
        if not isinstance(batch_size, int) or batch_size < 1:
            raise MappingError(f"Expected batch_size to be a positive int, received: batch_size={batch_size!r}")
        self.batch_size = batch_size

    # ---- graph models -------------------------------------------------------------------------

    def graph_of(self, model):
        """The Functional graph behind a Functional or Sequential model."""
        if isinstance(model, keras.Sequential):
            functional = getattr(model, "_functional", None)
            if functional is None:
                raise MappingError(
                    f"Expected Sequential model '{model.name}' to be built with a known input shape "
                    "(keras.Input first, or model.build(input_shape)); received an unbuilt Sequential"
                )
            return functional
        return model

    def top_inputs(self, graph, model_name: str) -> list[keras.KerasTensor]:
        """The model's inputs at ``batch_size``: an unknown batch filled in and a fixed one replaced (the
        layers' shapes are then inferred from these, so every figure is at the batch asked for)."""
        specs = []
        for tensor in graph.inputs:
            shape = tuple(tensor.shape)
            if shape:
                shape = (self.batch_size,) + shape[1:]
            shape = _concrete(shape, self.batch_size)
            if shape is None:
                raise MappingError(
                    f"Expected model '{model_name}' inputs with known dimensions besides the batch; "
                    f"received input shape {tuple(tensor.shape)}: build the model with a fixed input shape"
                )
            specs.append(_spec(shape, tensor.dtype))
        return specs

    def walk_graph(self, model, prefix: str, inputs: list[keras.KerasTensor]) -> Iterator[tuple]:
        """Yield ("call", LayerCall) items; finally yield ("outputs", [KerasTensor]) once."""
        graph = self.graph_of(model)
        known: dict[int, keras.KerasTensor] = {}  # id(graph tensor) -> concrete spec
        graph_inputs = list(graph.inputs)
        if len(graph_inputs) != len(inputs):
            raise MappingError(
                f"Expected {len(graph_inputs)} inputs for nested model '{model.name}', received {len(inputs)}"
            )
        for ref, spec in zip(graph_inputs, inputs):
            known[id(ref)] = spec

        calls_seen: dict[int, int] = {}
        traced = not isinstance(graph, keras.layers.Layer)
        op_names: dict[str, int] = {}  # traced keras.ops: names per graph, the same on every trace
        nodes = list(_nodes_in_order(graph))
        # an op's name never takes a layer's (Keras names the first Add layer "add", as ops.add would be):
        # rows, measurements and counters are matched by name
        layer_names = {n.operation.name for n in nodes if isinstance(n.operation, keras.layers.Layer)}
        for node in nodes:
            op = node.operation
            if op is None or node.is_input or isinstance(op, keras.layers.InputLayer):
                continue
            in_refs = node.input_tensors
            in_specs = [self.spec_for(ref, known) for ref in in_refs]
            k = calls_seen.get(id(op), 0)
            calls_seen[id(op)] = k + 1
            name = op.name if k == 0 else f"{op.name}#{k}"
            if traced and not isinstance(op, keras.layers.Layer):
                base = to_snake_case(type(op).__name__)
                n = op_names.get(base, 0)
                name = base if n == 0 else f"{base}_{n}"
                while name in layer_names:
                    n += 1
                    name = f"{base}_{n}"
                op_names[base] = n + 1
            path = f"{prefix}{name}"

            # a nested graph model, or a user layer made of sublayers traced into one: walked inside
            inner, inner_inputs = None, in_specs
            if _is_graph_model(op):
                inner = op
            elif is_composite_user_layer(op):
                inner = self.trace_node(node, in_refs, in_specs)
                inner_inputs = list(inner.inputs) if inner is not None else None
            if inner is not None:
                out_specs = None
                for kind, item in self.walk_graph(inner, path + "/", inner_inputs):
                    if kind == "call":
                        yield kind, item
                    else:
                        out_specs = item
            else:
                out_specs = self.outputs_of(node, in_refs, in_specs, known, path)
                args, kwargs = node.arguments.args, node.arguments.kwargs
                yield "call", self.make_call(path, op, in_specs, out_specs,
                                             names=_argument_names(op, args, kwargs),
                                             same_as=_same_as(in_refs))
            for ref, spec in zip(node.outputs, out_specs):
                known[id(ref)] = spec

        yield "outputs", [self.spec_for(ref, known) for ref in graph.outputs]

    def spec_for(self, ref, known) -> keras.KerasTensor:
        spec = known.get(id(ref))
        if spec is not None:
            return spec
        shape = _fill_batch(ref.shape, self.batch_size)
        return _spec(shape, ref.dtype)

    def trace_node(self, node, in_refs, in_specs):
        """A composite user layer's call traced on fresh KerasTensors of these shapes; None if it cannot be
        traced (it is then costed as one leaf) or its outputs do not match the node's."""
        fresh = {}
        for ref, spec in zip(in_refs, in_specs):
            fresh.setdefault(id(ref), _spec(spec.shape, spec.dtype))
        try:
            args, kwargs = node.arguments.fill_in(fresh)
            traced = _trace(node.operation, args, kwargs)
        except Exception:  # noqa: BLE001 - any failure: cost the layer as one call instead
            return None
        if len(traced.outputs) != len(node.outputs):
            return None
        return traced

    def outputs_of(self, node, in_refs, in_specs, known, path) -> list[keras.KerasTensor]:
        """Recorded output shapes when they are concrete for these inputs; else Keras' shape inference."""
        recorded_inputs = [_fill_batch(ref.shape, self.batch_size) for ref in in_refs]
        same_inputs = all(r == tuple(s.shape) for r, s in zip(recorded_inputs, in_specs))
        recorded_outputs = [_concrete(ref.shape, self.batch_size) for ref in node.outputs]
        if same_inputs and all(s is not None for s in recorded_outputs):
            return [_spec(s, ref.dtype) for s, ref in zip(recorded_outputs, node.outputs)]
        # Input shapes differ from the recorded ones (or outputs hold unknown dims): infer symbolically.
        fill = {id(ref): spec for ref, spec in zip(in_refs, in_specs)}
        try:
            args, kwargs = node.arguments.fill_in(fill)
            out = node.operation.compute_output_spec(*args, **kwargs)
        except Exception as exc:  # Keras raises many types here; one clear error for the user
            raise MappingError(
                f"Expected Keras to infer output shapes of '{path}' ({type(node.operation).__name__}) "
                f"for inputs {[tuple(s.shape) for s in in_specs]}; received {type(exc).__name__}: {exc}"
            ) from exc
        outs = _flat_tensors(out)
        if any(d is None for o in outs for d in o.shape):
            # A layer's compute_output_shape may leave a dimension the user declared None (EinsumDense
            # output_shape=(None, 7)) though the input fixes it: trace its call on these concrete inputs.
            traced = self.traced_outputs(node.operation, args, kwargs)
            if traced is not None and len(traced) == len(outs):
                outs = traced
        return outs

    @staticmethod
    def traced_outputs(op, args, kwargs) -> list[keras.KerasTensor] | None:
        from keras.src import backend

        try:
            return _flat_tensors(backend.compute_output_spec(op.call, *args, **kwargs))
        except Exception:  # noqa: BLE001 - make_call reports the unknown dimension
            return None

    def make_call(self, path, op, in_specs, out_specs, names=(), same_as=()) -> LayerCall:
        in_shapes = tuple(tuple(s.shape) for s in in_specs)
        out_shapes = tuple(tuple(s.shape) for s in out_specs)
        for shape in in_shapes + out_shapes:
            if any(d is None for d in shape):
                raise MappingError(
                    f"Expected concrete shapes for '{path}' ({type(op).__name__}); received inputs "
                    f"{in_shapes} and outputs {out_shapes}: build the model with a fixed input shape"
                )
        return LayerCall(
            path=path,
            layer=op,
            input_shapes=tuple(tuple(int(d) for d in s) for s in in_shapes),
            output_shapes=tuple(tuple(int(d) for d in s) for s in out_shapes),
            input_dtypes=tuple(str(s.dtype) for s in in_specs),
            input_names=tuple(names) if len(names) == len(in_shapes) else (),
            input_same_as=tuple(same_as) if len(same_as) == len(in_shapes) else (),
        )

    # ---- subclassed models --------------------------------------------------------------------

    def build_specs(self, layer):
        """The arguments a built layer was built (first called) with, as KerasTensors at ``batch_size``:
        (list of per-argument structures, their names); None where Keras recorded no build shapes."""
        shapes_dict = getattr(layer, "_build_shapes_dict", None)
        if not layer.built or not shapes_dict:
            return None
        structs = [self.specs_of(v, layer.compute_dtype) for v in shapes_dict.values()]
        names = [k[: -len("_shape")] if k.endswith("_shape") else k for k in shapes_dict]
        return structs, names

    def given_arguments(self, given: _GivenShapes, dtype) -> tuple[list, dict]:
        """The positional and keyword arguments of a call() on the shapes given, as KerasTensors."""
        return ([self.given_specs(a, dtype) for a in given.args],
                {k: self.given_specs(v, dtype) for k, v in given.kwargs.items()})

    def given_specs(self, given, dtype):
        """Checked given shapes (``_checked_shape``) as KerasTensors at ``batch_size``: a typed one at its dtype, a
        bare shape at ``dtype`` (the model's compute dtype)."""
        if isinstance(given, _TypedShape):
            return self.specs_of(given.shape, given.dtype)
        if isinstance(given, dict):
            return {k: self.given_specs(v, dtype) for k, v in given.items()}
        if isinstance(given, (list, tuple)) and not _is_shape(given):
            return type(given)(self.given_specs(v, dtype) for v in given)
        return self.specs_of(given, dtype)

    def specs_of(self, shapes, dtype):
        """A shape, or a structure of shapes, as KerasTensors of ``dtype`` with the batch set to ``batch_size``."""
        def to_spec(shape):
            shape = tuple(shape)
            return _spec((self.batch_size,) + shape[1:] if shape else shape, dtype)

        return to_spec(shapes) if _is_shape(shapes) else keras.tree.map_shape_structure(to_spec, shapes)

    def call_specs(self, model) -> tuple[list, dict] | None:
        """The arguments subclassed ``model``'s call() is traced on, as KerasTensors at ``batch_size``: the shapes
        given (``call_shapes``), else the build shapes Keras recorded; None where it recorded none."""
        given = _CALL_SHAPES.get().get(id(model))
        if given is not None:
            return self.given_arguments(given, model.compute_dtype)
        built = self.build_specs(model)
        if built is None:
            return None
        structs, _ = built
        if _takes_var_positional(model) and not _tensor_parameters(model) and len(structs) == 1 \
                and isinstance(structs[0], (list, tuple)):
            structs = list(structs[0])   # call(self, *xs): Keras records the tuple of their shapes as one
        return structs, {}

    def trace_model(self, model):
        """The subclassed model's call() traced on KerasTensors at ``batch_size``; None if it cannot be."""
        given = _CALL_SHAPES.get().get(id(model))
        specs = self.call_specs(model)
        if specs is None:
            return None
        structs, kwargs = specs
        try:
            if "training" in inspect.signature(model.call).parameters:
                kwargs["training"] = False  # the analysis is of inference
        except (TypeError, ValueError):
            pass
        # A sublayer never built (one called only in a branch the model was not built through) would be built,
        # weights and all, into the user's model by the trace: not traced then.
        unbuilt = [s.name for s in model._flatten_layers(include_self=False, recursive=True) if not s.built]
        if unbuilt and given is not None:
            raise MappingError(f"Expected every sublayer of subclassed model '{model.name}' built; "
                               f"{named_list(unbuilt, 4)} never built: call the model once with every argument "
                               "before mapping it on input_shapes")
        if unbuilt:
            self.trace_error = (f"sublayer{'s' if len(unbuilt) > 1 else ''} {named_list(unbuilt, 4)} never built; "
                                "a trace would build it into the model")
            return None
        try:
            traced = _trace(model, structs, kwargs)
        except Exception as exc:  # noqa: BLE001 - anything the user's call() raises on KerasTensors
            if given is not None:   # shapes given to trace on: no silent lower bound, say why it cannot
                raise MappingError(f"Expected the call() of subclassed model '{model.name}' to run on input_shapes "
                                   f"{given.text}; received {type(exc).__name__}: {_readable(exc)}") from exc
            self.trace_error = f"{type(exc).__name__}: {_readable(exc)}" + self.shapes_hint(model, given, structs)
            return None
        # A sublayer with weights the traced call never reached (an optional argument left at its default, a
        # branch): the trace would leave its work out silently.
        reached = {id(op) for op in getattr(traced, "operations", [])}
        missed = [s.name for s in model._flatten_layers(include_self=False, recursive=False)
                  if s.weights and id(s) not in reached]
        if missed and given is not None:
            raise MappingError(f"Expected the call() of subclassed model '{model.name}' on input_shapes {given.text} to "
                               f"reach every sublayer with weights; it never reached {named_list(missed, 4)}: give "
                               "the shapes of the arguments that lead to them")
        if missed:
            self.trace_error = (f"the call traced with its {'given' if given is not None else 'build'} inputs and "
                                f"defaults never reached {named_list(missed, 4)}" + self.shapes_hint(model, given, structs))
            return None
        return traced

    @staticmethod
    def shapes_hint(model, given, structs) -> str:
        """Where call() takes more tensors than Keras recorded build shapes for: how to give them."""
        if given is not None or (len(_tensor_parameters(model)) <= len(structs) and not _takes_var_positional(model)):
            return ""
        names = ", ".join(("*" if p.kind == p.VAR_POSITIONAL else "") + p.name for p in _call_parameters(model)
                          if p.kind != p.VAR_KEYWORD and p.name != "mask")
        return (f"; Keras recorded the shape of the first argument only: pass input_shapes for ({names}) "
                "(carm-advise: a --call-shape for each)")

    def walk_subclassed(self, layer, prefix: str, skipped: list[str], unbuilt: list[str]) -> Iterator[LayerCall]:
        """Fallback where call() cannot be traced: built sublayers in attribute order, from build shapes."""
        for sub in layer._flatten_layers(include_self=False, recursive=False):
            path = f"{prefix}{sub.name}"
            if isinstance(sub, keras.layers.InputLayer):
                continue
            if _is_graph_model(sub):
                graph = self.graph_of(sub)
                for kind, item in self.walk_graph(sub, path + "/", self.top_inputs(graph, sub.name)):
                    if kind == "call":
                        yield item
                continue
            if is_composite_user_layer(sub):   # the graph walk's rule: a registered cost keeps it a leaf
                yield from self.walk_subclassed(sub, path + "/", skipped, unbuilt)
                continue
            if not sub.built:
                unbuilt.append(path)   # no weights yet (called only in a branch not built through): not weight-free
                continue
            if self.build_specs(sub) is None and not sub.weights:
                skipped.append(path)  # weight-free (Dropout, Flatten, pooling ...): its shapes are unknown
                continue
            yield self.call_from_build_shapes(sub, path)

    def call_from_build_shapes(self, layer, path) -> LayerCall:
        built = self.build_specs(layer)
        if built is None:
            raise MappingError(
                f"Expected layer '{path}' ({type(layer).__name__}) to be built with known input shapes; "
                "received an unbuilt layer: build or call the model once (e.g. model(keras.ops.zeros(...)) "
                "or model.build(input_shape)) before mapping"
            )
        in_specs_struct, arg_names = built
        in_specs = _flat_tensors(in_specs_struct)
        names = [n for n, v in zip(arg_names, in_specs_struct) for _ in _flat_tensors(v)]
        try:
            out = layer.compute_output_spec(*in_specs_struct)
        except Exception as exc:
            raise MappingError(
                f"Expected Keras to infer output shapes of '{path}' ({type(layer).__name__}) from its build "
                f"shapes {dict(layer._build_shapes_dict)}; received {type(exc).__name__}: {exc}"
            ) from exc
        return self.make_call(path, layer, in_specs, _flat_tensors(out), names=names)


def _is_shape(x) -> bool:
    return isinstance(x, (tuple, list)) and all(
        d is None or (isinstance(d, numbers.Integral) and not isinstance(d, bool)) for d in x)


def fixed_batch_sizes(model) -> list[int]:
    """The batch sizes a functional / Sequential model's inputs fix (``keras.Input(..., batch_size=3)``):
    the walker costs every layer at the batch asked for instead; [] where the batch is free."""
    if not _is_graph_model(model):
        return []
    try:
        graph = _Walk(1).graph_of(model)
    except MappingError:
        return []
    sizes = []
    for tensor in graph.inputs:
        shape = tuple(tensor.shape)
        if shape and shape[0] is not None and int(shape[0]) not in sizes:
            sizes.append(int(shape[0]))
    return sizes


def iter_layer_calls(model, batch_size: int) -> Iterator[LayerCall]:
    """Every layer call of ``model`` in graph order, with the batch dimension set to ``batch_size``."""
    if not isinstance(model, keras.layers.Layer):
        raise MappingError(f"Expected a keras.Model, received: {type(model).__name__}")
    walk = _Walk(batch_size)
    if _is_graph_model(model):
        graph = walk.graph_of(model)
        inputs = walk.top_inputs(graph, model.name)
        for kind, item in walk.walk_graph(model, "", inputs):
            if kind == "call":
                yield item
        return
    if not model.built and not isinstance(model, keras.Model):
        raise MappingError(
            f"Expected a keras.Model; received a layer, {type(model).__name__} '{model.name}': wrap it in a model, "
            "e.g. keras.Sequential([keras.Input(shape=...), layer])"
        )
    if not model.built:
        raise MappingError(
            f"Expected a built model; received unbuilt subclassed model '{model.name}': "
            "build or call the model once before mapping"
        )
    traced = walk.trace_model(model)
    if traced is not None:
        for kind, item in walk.walk_graph(traced, "", list(traced.inputs)):
            if kind == "call":
                yield item
        return
    skipped: list[str] = []
    unbuilt: list[str] = []
    yield from walk.walk_subclassed(model, "", skipped, unbuilt)
    why = getattr(walk, "trace_error", None) or "Keras recorded no input shapes for the model"
    # warn_explicit without a registry: said on every mapping of such a model (not once per process), so every
    # analysis of it can carry the line (analysis.mapping_warnings collects it).
    warnings.warn_explicit(
        f"carm_advisor: the call() of subclassed model '{model.name}' could not be traced on symbolic inputs "
        f"({why}); its layers are listed in attribute order from their build shapes, and keras.ops or "
        f"backend ops outside its layers{', and the weight-free layers ' + ', '.join(skipped) if skipped else ''}"
        f"{', and the never-built layers ' + ', '.join(unbuilt) if unbuilt else ''} "
        "are not counted: the totals are a lower bound",
        RuntimeWarning, __file__, 0,
    )

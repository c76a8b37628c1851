"""Walk a Keras 3 model's graph and list every layer call with concrete shapes, without executing it.

Shapes come from Keras' own symbolic machinery: the KerasTensors recorded on each layer's inbound
nodes, and, where those hold unknown dimensions (a nested model built for ``(None, None, 3)`` inputs
and called on 224x224 images), from ``compute_output_spec`` on concrete KerasTensors. Nothing is run
on a device and no backend tensor is created by the walk itself.

- One :class:`LayerCall` per call of a layer: a layer shared by two calls yields ``name`` and ``name#1``.
- Nested Functional and Sequential models are walked, their layers named ``outer/inner``; the models
  themselves are never leaves. ``InputLayer`` yields nothing.
- The batch dimension (the leading ``None``) becomes ``batch_size``.
- ``keras.ops`` calls on KerasTensors inside a functional graph (``ops.add``, ``ops.multiply``, as
  MobileNetV3 and ConvNeXt use) are operations, not layers; they are yielded like layers, their
  ``layer`` being the ``keras.Operation``.
- Subclassed models have no graph: their built sublayers are listed in attribute order with the
  input shapes recorded when Keras built them (``_build_shapes_dict``); a layer that was never built
  is a :class:`MappingError`. Keras' own layers are leaves; a user layer made of sublayers is opened.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import keras

from carm_advisor.errors import MappingError

Shape = tuple[int, ...]


@dataclass(frozen=True)
class LayerCall:
    """One call of one layer (or ``keras.ops`` operation) with concrete, batch-filled shapes."""

    path: str                             # "layer", "outer/inner", "shared#1"
    layer: Any                            # keras.layers.Layer, or keras.Operation for keras.ops nodes
    input_shapes: tuple[Shape, ...]       # one per input tensor, flattened in call order
    output_shapes: tuple[Shape, ...]
    input_dtypes: tuple[str, ...]


def _functional_class():
    from keras.src.models.functional import Functional

    return Functional


def _is_graph_model(op) -> bool:
    """Keras' own Functional / Sequential containers: walked, never costed."""
    return isinstance(op, (_functional_class(), keras.Sequential))


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


class _Walk:
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
        specs = []
        for tensor in graph.inputs:
            shape = _concrete(tensor.shape, self.batch_size)
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

        order = {id(op): i for i, op in enumerate(graph.operations)}
        calls_seen: dict[int, int] = {}
        for depth in sorted(graph._nodes_by_depth, reverse=True):
            nodes = sorted(graph._nodes_by_depth[depth], key=lambda n: order.get(id(n.operation), 0))
            for node in nodes:
                op = node.operation
                if op is None or node.is_input or isinstance(op, keras.layers.InputLayer):
                    continue
                in_refs = node.input_tensors
                in_specs = [self.spec_for(ref, known) for ref in in_refs]
                k = calls_seen.get(id(op), 0)
                calls_seen[id(op)] = k + 1
                name = op.name if k == 0 else f"{op.name}#{k}"
                path = f"{prefix}{name}"

                if _is_graph_model(op):
                    out_specs = None
                    for kind, item in self.walk_graph(op, path + "/", in_specs):
                        if kind == "call":
                            yield kind, item
                        else:
                            out_specs = item
                else:
                    out_specs = self.outputs_of(node, in_refs, in_specs, known, path)
                    yield "call", self.make_call(path, op, in_specs, out_specs)
                for ref, spec in zip(node.outputs, out_specs):
                    known[id(ref)] = spec

        yield "outputs", [self.spec_for(ref, known) for ref in graph.outputs]

    def spec_for(self, ref, known) -> keras.KerasTensor:
        spec = known.get(id(ref))
        if spec is not None:
            return spec
        shape = _fill_batch(ref.shape, self.batch_size)
        return _spec(shape, ref.dtype)

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
        return _flat_tensors(out)

    def make_call(self, path, op, in_specs, out_specs) -> LayerCall:
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
        )

    # ---- subclassed models --------------------------------------------------------------------

    def walk_subclassed(self, layer, prefix: str) -> Iterator[LayerCall]:
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
            children = list(sub._flatten_layers(include_self=False, recursive=False))
            is_keras_own = type(sub).__module__.startswith("keras.")
            if children and not is_keras_own:
                yield from self.walk_subclassed(sub, path + "/")
                continue
            yield self.call_from_build_shapes(sub, path)

    def call_from_build_shapes(self, layer, path) -> LayerCall:
        shapes_dict = getattr(layer, "_build_shapes_dict", None)
        if not layer.built or not shapes_dict:
            raise MappingError(
                f"Expected layer '{path}' ({type(layer).__name__}) to be built with known input shapes; "
                "received an unbuilt layer: build or call the model once (e.g. model(keras.ops.zeros(...)) "
                "or model.build(input_shape)) before mapping"
            )
        dtype = layer.compute_dtype

        def to_spec(shape):
            shape = tuple(shape)
            return _spec((self.batch_size,) + shape[1:] if shape else shape, dtype)

        is_shape = lambda x: isinstance(x, (tuple, list)) and all(d is None or isinstance(d, int) for d in x)
        in_specs_struct = [
            keras.tree.map_shape_structure(to_spec, v) if not is_shape(v) else to_spec(v)
            for v in shapes_dict.values()
        ]
        in_specs = _flat_tensors(in_specs_struct)
        try:
            out = layer.compute_output_spec(*in_specs_struct)
        except Exception as exc:
            raise MappingError(
                f"Expected Keras to infer output shapes of '{path}' ({type(layer).__name__}) from its build "
                f"shapes {dict(shapes_dict)}; received {type(exc).__name__}: {exc}"
            ) from exc
        return self.make_call(path, layer, in_specs, _flat_tensors(out))


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
    yield from walk.walk_subclassed(model, "")

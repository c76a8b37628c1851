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
- Inside a traced call: a sublayer whose ``compute_output_shape`` leaves a dimension unknown though its inputs are
  concrete (EinsumDense with ``output_shape=(None, heads, width)``) gets the shapes of its call traced on them, so
  the ops reading its ``ops.shape()`` stay concrete; a recorded ``training`` reaches only a call() that takes it; a
  tensor that is no KerasTensor (a weight used in keras.ops, a tensor made from weights alone: ViT's class token,
  SigLIP's probe) is an input of the op reading it; plain Python arguments reach the cost model (``options``).
- A ``call()`` that cannot run on KerasTensors (backend-native ``tf.*`` / ``torch.*`` code, Python
  branches on tensor values), or a model Keras recorded no input shapes for (a ``call(self, a, b)`` of
  several tensor arguments: Keras records the first only, unless they are given with ``call_shapes`` /
  ``input_shapes=``, :mod:`carm_advisor.mapping.given_shapes`), falls back to the built sublayers in attribute
  order with their build shapes, and warns (RuntimeWarning) that ops outside the layers are not counted: the
  totals are a lower bound. A weight-free layer (Dropout, Flatten, pooling) without build shapes, and a sublayer never
  built (called only in a branch the model was not built through), are skipped there and named in that
  warning; a built layer with weights but no build shapes is a :class:`MappingError`. Shapes given for
  call() are a promise: where they do not trace the whole model, that is a :class:`MappingError`.
"""

from __future__ import annotations

import contextlib
import inspect
import re
import warnings
from collections.abc import Iterator
from dataclasses import replace

import keras
from keras.src.utils.naming import to_snake_case

from carm_advisor.errors import MappingError
from carm_advisor.mapping.given_shapes import build_specs, call_specs, given_for, shapes_hint
from carm_advisor.mapping.registry import lookup
from carm_advisor.mapping.symbolic import (
    checked_batch_size,
    flat_tensors,
    graph_nodes_restored,
    is_graph_model,
    tensor_spec,
)
from carm_advisor.mapping.types import LayerCall
from carm_advisor.units import named_list


def _fill_batch(shape, batch_size: int) -> tuple:
    shape = tuple(shape)
    if shape and shape[0] is None:
        shape = (batch_size,) + shape[1:]
    return shape


def _concrete(shape, batch_size: int) -> tuple | None:
    """The shape with its batch filled in, or None if another dimension is still unknown."""
    shape = _fill_batch(shape, batch_size)
    return None if any(d is None for d in shape) else tuple(int(d) for d in shape)


def _same_as(tensors) -> tuple[int, ...]:
    first: dict[int, int] = {}
    return tuple(first.setdefault(id(t), i) for i, t in enumerate(tensors))


def _is_constant(value) -> bool:
    """A tensor a traced call computes with that is no KerasTensor: a variable (a layer's weight used in
    ``keras.ops`` directly) or a backend tensor computed from weights alone while the call was traced (ViT's class
    token tiled to the batch, SigLIP's pooling probe repeated to it)."""
    return isinstance(value, keras.Variable) or (not isinstance(value, keras.KerasTensor)
                                                 and keras.ops.is_tensor(value))


def _is_operand(value) -> bool:
    return isinstance(value, keras.KerasTensor) or _is_constant(value)


def _operands(args, kwargs) -> list:
    """The tensors of ``(args, kwargs)`` a call reads, KerasTensors and constants alike, in flattening order."""
    return [v for v in keras.tree.flatten((tuple(args), dict(kwargs))) if _is_operand(v)]


def _constant_spec(value) -> tuple[tuple, str]:
    return tuple(int(d) for d in value.shape), keras.backend.standardize_dtype(value.dtype)


_PLAIN = (bool, int, float, str)


def _positional_names(op) -> list[str]:
    try:
        return [p.name for p in inspect.signature(op.call).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return []


def _plain_arguments(op, args, kwargs) -> dict:
    """The call's arguments that are plain Python values (``use_causal_mask=True``, ``reverse=True``), by name."""
    params = _positional_names(op)
    named = {params[i]: a for i, a in enumerate(args) if i < len(params)}
    named.update(kwargs)
    return {k: v for k, v in named.items() if isinstance(v, _PLAIN)}


def _argument_names(op, args, kwargs) -> tuple[str, ...]:
    """The call argument each tensor of ``(args, kwargs)`` was passed as, in flattening order."""
    params = _positional_names(op)
    named_args = tuple(
        keras.tree.map_structure(lambda _, n=(params[i] if i < len(params) else f"arg{i}"): n, a)
        for i, a in enumerate(args)
    )
    named_kwargs = {k: keras.tree.map_structure(lambda _, n=k: n, v) for k, v in kwargs.items()}
    values = keras.tree.flatten((tuple(args), dict(kwargs)))
    names = keras.tree.flatten((named_args, named_kwargs))
    if len(values) != len(names):
        return ()
    return tuple(n for v, n in zip(values, names) if _is_operand(v))


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
    if not isinstance(op, keras.layers.Layer) or is_graph_model(op):
        return False
    if type(op).__module__.startswith("keras."):
        return False
    children = list(op._flatten_layers(include_self=False, recursive=False))
    return bool(children) and _lookup_cost(op) is None


def _nodes_restored(layer):
    """Remove the graph nodes a symbolic trace adds to ``layer`` and its sublayers (the user's model is
    left as it was: no extra inbound/outbound nodes)."""
    return graph_nodes_restored(list(layer._flatten_layers(include_self=True, recursive=True)))


def _has_unknown_dim(tensors) -> bool:
    return any(d is None for t in tensors for d in t.shape)


@contextlib.contextmanager
def _concrete_sublayer_outputs(layer):
    """While ``layer``'s call is traced, a sublayer leaving a dimension unknown for concrete inputs gets the shapes of
    its call traced on them. Keras' EinsumDense keeps the ``None`` of ``output_shape=(None, heads, head_dim)``
    (Gemma's, Llama's, Mistral's Q/K/V); a caller reading ``ops.shape()`` of it bakes the ``None`` into its reshape."""
    from keras.src import backend

    def concrete_spec(original, sub):
        def spec(*args, **kwargs):
            try:
                out = original(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - a shape method not taking every call argument: trace the call
                try:   # keras_hub's CachedMultiHeadAttention(..., cache=None): MultiHeadAttention's takes no cache
                    return backend.compute_output_spec(sub.call, *args, **kwargs)
                except Exception:  # noqa: BLE001 - the call cannot say either: Keras' own error
                    raise exc from None
            if _has_unknown_dim(flat_tensors(out)) and not _has_unknown_dim(flat_tensors((args, kwargs))):
                try:
                    traced = backend.compute_output_spec(sub.call, *args, **kwargs)
                except Exception:  # noqa: BLE001 - keep Keras' own answer; make_call names the unknown dimension
                    return out
                if len(flat_tensors(traced)) == len(flat_tensors(out)) and not _has_unknown_dim(flat_tensors(traced)):
                    return traced
            return out
        return spec

    patched = []
    for sub in layer._flatten_layers(include_self=False, recursive=True):
        own = sub.__dict__.get("compute_output_spec")
        object.__setattr__(sub, "compute_output_spec", concrete_spec(sub.compute_output_spec, sub))
        patched.append((sub, own))
    try:
        yield
    finally:
        for sub, own in patched:
            if own is None:
                object.__delattr__(sub, "compute_output_spec")
            else:
                object.__setattr__(sub, "compute_output_spec", own)


def _accepted_kwargs(layer, kwargs) -> dict:
    """The keyword arguments ``layer.call`` accepts. Keras' ``Layer.__call__`` passes ``training`` (and its other
    call-context arguments) on only to a call() that declares them, but records them in the node either way:
    SigLIP's encoder calls ``self.mlp(x, training=training)`` on a ``call(self, inputs)``."""
    try:
        params = inspect.signature(layer.call).parameters
    except (TypeError, ValueError):
        return dict(kwargs)
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return dict(kwargs)
    return {k: v for k, v in kwargs.items() if k in params}


def _trace(layer, args, kwargs):
    """``layer.call(*args, **kwargs)`` on KerasTensors: a keras Function whose nodes are every sublayer
    and keras.ops call, in order. Raises whatever the call raises."""
    from keras.src.ops.function import Function

    inputs = list({id(t): t for t in flat_tensors((args, kwargs))}.values())
    with _nodes_restored(layer), _concrete_sublayer_outputs(layer):
        outputs = layer.call(*args, **kwargs)
        return Function(inputs, flat_tensors(outputs), name=layer.name)


class _Walk:
    trace_error: str | None = None

    def __init__(self, batch_size: int):
        self.batch_size = checked_batch_size(batch_size)

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
            specs.append(tensor_spec(shape, tensor.dtype))
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
            if is_graph_model(op):
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
                names = _argument_names(op, args, kwargs)
                constants = tuple((place, *_constant_spec(v), names[place] if names else "")
                                  for place, v in enumerate(_operands(args, kwargs)) if _is_constant(v))
                names = tuple(n for place, n in enumerate(names) if not any(place == c[0] for c in constants))
                call = self.make_call(path, op, in_specs, out_specs, names=names, same_as=_same_as(in_refs),
                                      options=_plain_arguments(op, args, kwargs))
                yield "call", replace(call, constant_inputs=constants) if constants else call
            for ref, spec in zip(node.outputs, out_specs):
                known[id(ref)] = spec

        yield "outputs", [self.spec_for(ref, known) for ref in graph.outputs]

    def spec_for(self, ref, known) -> keras.KerasTensor:
        spec = known.get(id(ref))
        if spec is not None:
            return spec
        shape = _fill_batch(ref.shape, self.batch_size)
        return tensor_spec(shape, ref.dtype)

    def trace_node(self, node, in_refs, in_specs):
        """A composite user layer's call traced on fresh KerasTensors of these shapes; None if it cannot be
        traced (it is then costed as one leaf) or its outputs do not match the node's."""
        fresh = {}
        for ref, spec in zip(in_refs, in_specs):
            fresh.setdefault(id(ref), tensor_spec(spec.shape, spec.dtype))
        try:
            args, kwargs = node.arguments.fill_in(fresh)
            traced = _trace(node.operation, args, _accepted_kwargs(node.operation, kwargs))
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
            return [tensor_spec(s, ref.dtype) for s, ref in zip(recorded_outputs, node.outputs)]
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
        outs = flat_tensors(out)
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
            return flat_tensors(backend.compute_output_spec(op.call, *args, **kwargs))
        except Exception:  # noqa: BLE001 - make_call reports the unknown dimension
            return None

    def make_call(self, path, op, in_specs, out_specs, names=(), same_as=(), options=None) -> LayerCall:
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
            options=dict(options or {}),
        )

    # ---- subclassed models --------------------------------------------------------------------

    def trace_model(self, model):
        """The subclassed model's call() traced on KerasTensors at ``batch_size``; None if it cannot be."""
        given = given_for(model)
        specs = call_specs(model, self.batch_size)
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
            self.trace_error = f"{type(exc).__name__}: {_readable(exc)}" + shapes_hint(model, given, structs)
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
                                f"defaults never reached {named_list(missed, 4)}" + shapes_hint(model, given, structs))
            return None
        return traced

    def walk_subclassed(self, layer, prefix: str, skipped: list[str], unbuilt: list[str]) -> Iterator[LayerCall]:
        """Fallback where call() cannot be traced: built sublayers in attribute order, from build shapes."""
        for sub in layer._flatten_layers(include_self=False, recursive=False):
            path = f"{prefix}{sub.name}"
            if isinstance(sub, keras.layers.InputLayer):
                continue
            if is_graph_model(sub):
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
            if build_specs(sub, self.batch_size) is None and not sub.weights:
                skipped.append(path)  # weight-free (Dropout, Flatten, pooling ...): its shapes are unknown
                continue
            yield self.call_from_build_shapes(sub, path)

    def call_from_build_shapes(self, layer, path) -> LayerCall:
        built = build_specs(layer, self.batch_size)
        if built is None:
            raise MappingError(
                f"Expected layer '{path}' ({type(layer).__name__}) to be built with known input shapes; "
                "received an unbuilt layer: build or call the model once (e.g. model(keras.ops.zeros(...)) "
                "or model.build(input_shape)) before mapping"
            )
        in_specs_struct, arg_names = built
        in_specs = flat_tensors(in_specs_struct)
        names = [n for n, v in zip(arg_names, in_specs_struct) for _ in flat_tensors(v)]
        try:
            out = layer.compute_output_spec(*in_specs_struct)
        except Exception as exc:
            raise MappingError(
                f"Expected Keras to infer output shapes of '{path}' ({type(layer).__name__}) from its build "
                f"shapes {dict(layer._build_shapes_dict)}; received {type(exc).__name__}: {exc}"
            ) from exc
        return self.make_call(path, layer, in_specs, flat_tensors(out), names=names)


def fixed_batch_sizes(model) -> list[int]:
    """The batch sizes a functional / Sequential model's inputs fix (``keras.Input(..., batch_size=3)``):
    the walker costs every layer at the batch asked for instead; [] where the batch is free."""
    if not is_graph_model(model):
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
    if is_graph_model(model):
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
    # analysis of it can carry the line (advise/analyze.py: mapping_warnings collects it).
    warnings.warn_explicit(
        f"carm_advisor: the call() of subclassed model '{model.name}' could not be traced on symbolic inputs "
        f"({why}); its layers are listed in attribute order from their build shapes, and keras.ops or "
        f"backend ops outside its layers{', and the weight-free layers ' + ', '.join(skipped) if skipped else ''}"
        f"{', and the never-built layers ' + ', '.join(unbuilt) if unbuilt else ''} "
        "are not counted: the totals are a lower bound",
        RuntimeWarning, __file__, 0,
    )

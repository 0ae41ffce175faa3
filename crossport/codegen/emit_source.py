"""Write a Keras functional model as a readable Python module with a ``build_model()``.

One line per layer or op, in the order the model runs them: layers as
``layer1_0_conv1 = keras.layers.Conv2D(64, (3, 3), use_bias=False, name="layer1.0.conv1")(x)``
(``crossport.layers`` only where Keras has no layer with torch's numerics), ``keras.ops``
functions for the ops between them. Weights are not in the source: ``build_model()`` loads
them from the ``.weights.h5`` file beside it.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import keras

from crossport.codegen import configs
from crossport.codegen.keras_graph import Call, calls, input_layer, tensor_key
from crossport.codegen.literals import Constants, Identifiers, literal


@dataclass
class Source:
    """The generated module's text and the arrays it reads from its ``.constants.npz``."""

    text: str
    constants: dict = field(default_factory=dict)


class _Writer:
    def __init__(self, model: keras.Model):
        self.model = model
        self.ids = Identifiers()
        self.constants = Constants()
        self.tensors: dict[int, str] = {}  # KerasTensor id -> expression
        self.lines: list[str] = []
        self.uses: set[str] = set()  # "np", "crossport"

    # -- values ---------------------------------------------------------------------------
    def _tensor_name(self, value):
        if isinstance(value, keras.KerasTensor):
            try:
                return self.tensors[tensor_key(value)]
            except KeyError:
                raise configs.SourceError(
                    "a tensor is used before the operation computing it was written "
                    f"({value!r}); is it from another model?") from None
        return None

    def _literal(self, value) -> str:
        text = literal(value, self._tensor_name, self.constants)
        if "np." in text:
            self.uses.add("np")
        return text

    def _arguments(self, positional: list, keywords: dict) -> str:
        parts = [self._literal(v) for v in positional]
        parts += [f"{k}={self._literal(v)}" for k, v in keywords.items()]
        return ", ".join(parts)

    def _bind_outputs(self, call: Call, base: str) -> str:
        """Name the call's result; multi-output calls are indexed (``split[1]``)."""
        var = self.ids.new(base)
        if len(call.outputs) == 1:
            self.tensors[tensor_key(call.outputs[0])] = var
        else:
            for i, t in enumerate(call.outputs):
                self.tensors[tensor_key(t)] = f"{var}[{i}]"
        return var

    # -- graph ----------------------------------------------------------------------------
    def inputs(self) -> None:
        for t in self.model.inputs:
            config = input_layer(t).get_config()
            name = config["name"]
            args = {"batch_shape": tuple(config["batch_shape"]),
                    "dtype": configs.dtype_name(config["dtype"]),
                    "name": name}
            if config.get("sparse"):
                args["sparse"] = True
            var = self.ids.new(name)
            self.tensors[tensor_key(t)] = var
            self.lines.append(f"{var} = keras.Input({self._arguments([], args)})")

    def body(self) -> None:
        model_calls = calls(self.model)
        uses = Counter(id(c.operation) for c in model_calls)
        declared: dict[int, str] = {}
        for call in model_calls:
            op = call.operation
            if isinstance(op, keras.layers.Layer):
                ctor = self._layer_constructor(op)
                args = self._arguments(list(call.args), configs.call_keywords(op, call.kwargs))
                if uses[id(op)] > 1:  # shared layer: build once, call often
                    if id(op) not in declared:
                        declared[id(op)] = self.ids.new(f"{op.name}_layer")
                        self.lines.append(f"{declared[id(op)]} = {ctor}")
                    var = self._bind_outputs(call, op.name)
                    self.lines.append(f"{var} = {declared[id(op)]}({args})")
                else:
                    var = self._bind_outputs(call, op.name)
                    self.lines.append(f"{var} = {ctor}({args})")
            elif _is_indexing(call):  # x[:, 1:3]: Python's own syntax for GetItem
                tensor, key = self._literal(call.args[0]), call.args[1]
                var = self._bind_outputs(call, "get_item")
                self.lines.append(f"{var} = {tensor}[{self._index(key)}]")
            else:
                path, fn = configs.op_function(op)
                positional, keywords = configs.op_arguments(op, fn, call.args, call.kwargs)
                text = self._arguments(positional, keywords)
                var = self._bind_outputs(call, path.rsplit(".", 1)[-1])
                self.lines.append(f"{var} = {path}({text})")

    def _index(self, key) -> str:
        items = key if isinstance(key, tuple) else (key,)
        parts = []
        for item in items:
            if isinstance(item, slice):
                bounds = [self._literal(item.start) if item.start is not None else "",
                          self._literal(item.stop) if item.stop is not None else ""]
                if item.step not in (None, 1):
                    bounds.append(self._literal(item.step))
                parts.append(":".join(bounds))
            else:
                parts.append(self._literal(item))
        if isinstance(key, tuple) and len(key) == 1:
            return parts[0] + ","
        return ", ".join(parts) if parts else "()"

    def _layer_constructor(self, layer: keras.layers.Layer) -> str:
        path = configs.layer_path(layer)
        if path.startswith("crossport.layers.dynamic."):
            self.uses.add("crossport.dynamic")
        elif path.startswith("crossport."):
            self.uses.add("crossport")
        positional, keywords = configs.layer_arguments(layer)
        keywords["name"] = layer.name
        return f"{path}({self._arguments(positional, keywords)})"

    def outputs(self) -> tuple[str, str]:
        inputs = self.model.input
        outputs = self.model.output
        return self._literal(inputs), self._literal(outputs)


def _is_indexing(call: Call) -> bool:
    return (type(call.operation).__name__ == "GetItem" and len(call.args) == 2
            and not call.kwargs and isinstance(call.args[0], keras.KerasTensor))


def generate(model: keras.Model, weights_file: str, constants_file: str,
             description: str = "") -> Source:
    """The source of a module whose ``build_model()`` rebuilds ``model``.

    Args:
        model: a Keras functional model.
        weights_file: the file name (beside the module) ``build_model`` loads weights from.
        constants_file: the ``.npz`` file name for arrays too large to inline.
        description: a line for the module docstring (what the model was converted from).
    """
    writer = _Writer(model)
    writer.inputs()
    writer.body()
    inputs, outputs = writer.outputs()
    body = ["    constants = np.load(CONSTANTS)"] if writer.constants.arrays else []
    body += [f"    {line}" for line in writer.lines]
    name = "" if re.fullmatch(r"functional(_\d+)?", model.name) else (
        f", name={literal(model.name, lambda v: None, writer.constants)}")
    body.append(f"    model = keras.Model(inputs={inputs}, outputs={outputs}{name})")
    body += ["    if weights:", "        model.load_weights(WEIGHTS)", "    return model"]
    constants = writer.constants.arrays
    header = _header(model, weights_file, description, writer.uses,
                     constants_file if constants else None)
    return Source("\n".join(header + body + _footer()) + "\n", constants)


def _header(model, weights_file: str, description: str, uses: set[str],
            constants_file: str | None) -> list[str]:
    doc = description or f"the Keras model {model.name!r}"
    lines = [
        f'"""{doc}, written as Keras source by crossport.',
        "",
        "`build_model()` builds the model and loads its weights from",
        f"`{weights_file}` beside this file. Run this file to print a summary.",
        '"""',
        "",
        "from pathlib import Path",
        "",
        "import keras",
    ]
    if "np" in uses or constants_file:
        lines.append("import numpy as np")
    crossport_imports = [name for key, name in (("crossport", "import crossport.layers"), (
        "crossport.dynamic", "import crossport.layers.dynamic")) if key in uses]
    if crossport_imports:
        lines += ["", *crossport_imports]
    lines += ["", f'WEIGHTS = Path(__file__).with_name("{weights_file}")']
    if constants_file:
        lines.append(f'CONSTANTS = Path(__file__).with_name("{constants_file}")')
    lines += ["", "", "def build_model(weights: bool = True) -> keras.Model:",
              '    """The model; with `weights=False` its layers keep their initial values."""']
    return lines


def _footer() -> list[str]:
    return ["", "", 'if __name__ == "__main__":', "    build_model().summary()"]

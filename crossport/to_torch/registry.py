"""The reverse converter table: Keras layer class (or keras.ops op) -> converter, policy.

A converter is a function named after the Keras class it converts, registered with
:func:`register_layer` (``keras.layers.*``) or :func:`register_op` (``keras.ops`` nodes in a
functional graph; the two tables are separate because names collide, e.g. ``Add``)::

    @register_layer("ReLU", policy=Policy.AGNOSTIC)
    def ReLU(ctx, layer, inputs):
        \"\"\"keras.layers.ReLU -> nn.ReLU (plain; max_value/threshold go to torch_layers).\"\"\"
        return ctx.call_module(nn.ReLU(), inputs)

``inputs`` is the layer's positional tensor argument (a tensor, or a list for merge layers),
held as the policy asks (``crossport.Policy``): fx nodes for AGNOSTIC/CHANNELS_FIRST/
CANONICAL converters, :class:`~crossport.to_torch.context.Held` values for CUSTOM ones.
``supports(layer) -> reason | None`` rejects configurations that cannot be converted exactly;
the pre-flight check lists every such layer at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from crossport.layout.policy import Policy

SupportsFn = Callable[[object], "str | None"]


@dataclass(frozen=True)
class LayerConverter:
    name: str
    fn: Callable
    policy: Policy
    supports: SupportsFn | None = None
    keeps_layout: bool = False
    masks: bool = False     # reproduces Keras' masked semantics (mask kwargs accepted)
    sizes: bool = False     # emits the run-time sizes (RunSize) in its op's arguments

    @property
    def passes_layout(self) -> bool:
        return self.policy is Policy.AGNOSTIC or self.keeps_layout

    def policy_for(self, layer) -> Policy:
        """The policy for this layer: a Keras ``data_format='channels_first'`` layer already
        holds its tensors N, C, spatial..., so a CHANNELS_FIRST converter takes them in Keras'
        own order (CANONICAL) and computes the same torch op on them."""
        if self.policy is Policy.CHANNELS_FIRST and channels_first_layer(layer):
            return Policy.CANONICAL
        return self.policy

    def unsupported_reason(self, layer) -> str | None:
        return self.supports(layer) if self.supports is not None else None


def channels_first_layer(layer) -> bool:
    """Whether a Keras layer computes on channels-first data (``data_format`` config)."""
    get_config = getattr(layer, "get_config", None)
    config = get_config() if get_config is not None else {}
    return config.get("data_format") == "channels_first"


_LAYERS: dict[str, LayerConverter] = {}
_OPS: dict[str, LayerConverter] = {}


def _register(table: dict, names, policy, supports, override, keeps_layout, masks=False,
              sizes=False):
    def decorate(fn: Callable) -> Callable:
        for name in names or (fn.__name__,):
            if name in table and not override:
                raise ValueError(f"{name} already has a converter ({table[name].fn.__name__}); "
                                 "pass override=True to replace it")
            table[name] = LayerConverter(name, fn, policy, supports, keeps_layout, masks,
                                         sizes)
        return fn

    return decorate


def register_layer(*names: str, policy: Policy, supports: SupportsFn | None = None,
                   override: bool = False, keeps_layout: bool = False, masks: bool = False):
    """Register the decorated function for the Keras layer classes ``names`` (default: its name).

    ``masks=True``: the converter takes the Keras masks the layer consumes (``mask``,
    ``query_mask``...) and reproduces Keras' masked semantics; layers fed a mask without it
    are refused.
    """
    return _register(_LAYERS, names, policy, supports, override, keeps_layout, masks)


def register_op(*names: str, policy: Policy, supports: SupportsFn | None = None,
                override: bool = False, keeps_layout: bool = False, sizes: bool = False):
    """Register the decorated function for ``keras.ops`` operation classes ``names``.

    ``sizes=True``: the converter emits the run-time sizes a traced ``call()`` passes the op
    (:class:`~crossport.to_torch.sizes.RunSize`, with ``sizes.emit_size``); an op holding
    one without it is refused.
    """
    return _register(_OPS, names, policy, supports, override, keeps_layout, sizes=sizes)


def lookup(operation) -> LayerConverter | None:
    """The converter of a Keras layer or keras.ops operation instance, or None."""
    import keras

    _load_builtin_converters()
    table = _LAYERS if isinstance(operation, keras.layers.Layer) else _OPS
    converter = table.get(type(operation).__name__)
    if converter is not None and converter.fn.__module__.startswith("crossport.") \
            and not _builtin_class(type(operation)):
        return None  # a class of another library that only shares the name: traced
    return converter


def _builtin_class(cls) -> bool:
    """Whether crossport's converter for ``cls.__name__`` computes what ``cls`` does: a
    Keras (or crossport) class, or a subclass of the one of that name that does not
    override ``call`` (keras_hub's ``ReversibleEmbedding``). keras_hub's own
    ``RMSNormalization`` only shares the name of Keras' layer."""
    def builtin(c) -> bool:
        return c.__module__.startswith(("keras.", "crossport."))

    if builtin(cls):
        return True
    return any(builtin(base) and base.__name__ == cls.__name__ and cls.call is base.call
               for base in cls.__mro__[1:])


def registered_layers() -> dict[str, LayerConverter]:
    _load_builtin_converters()
    return dict(_LAYERS)


def registered_ops() -> dict[str, LayerConverter]:
    _load_builtin_converters()
    return dict(_OPS)


_loaded = False


def _load_builtin_converters() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        from crossport.to_torch import ops  # noqa: F401  (registers on import)

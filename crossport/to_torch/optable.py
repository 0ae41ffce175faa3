"""The supported Keras layer table, generated from the reverse registry (never edited by hand).

``crossport.to_keras.optable`` appends it to docs/ops.md, so one command regenerates both.
"""

from __future__ import annotations

from crossport.to_torch.registry import registered_layers, registered_ops

HEADER = """
# Supported Keras layers (Keras → PyTorch)

Generated from the reverse converter registry (`crossport.to_torch.registry`). Policies: see
[architecture.md](architecture.md); plain torch modules are used wherever torch has a layer
with identical numerics, `crossport.torch_layers` otherwise (see each converter's docstring).
`channels_first` policies also take `data_format="channels_first"` layers (their tensors as
Keras holds them). "masks": the converter reproduces Keras' masked semantics for the masks
(`Embedding(mask_zero=True)`, `Masking`) the layer consumes; any other layer fed a mask it
would consume is refused. "sizes": the converter reads at run time the sizes a traced
custom layer's `call()` passes it (`ops.shape(x)[1]`, docs/architecture.md); any other op
given one is refused.

| Keras class | kind | policy | family | converter | masks | sizes |
|---|---|---|---|---|---|---|
"""


def rows() -> list[tuple[str, str, str, str, str, str, str]]:
    table = []
    for kind, registry in (("layer", registered_layers()), ("keras.ops", registered_ops())):
        for name, conv in registry.items():
            family = conv.fn.__module__.rsplit(".", 1)[-1]
            table.append((name, kind, conv.policy.value, family, conv.fn.__name__,
                          "yes" if conv.masks else "", "yes" if conv.sizes else ""))
    return sorted(table, key=lambda r: (r[1] != "layer", r[0]))


def markdown() -> str:
    return HEADER + "".join(
        f"| `{name}` | {kind} | {policy} | {family} | `{fn}` | {masks} | {sizes} |\n"
        for name, kind, policy, family, fn, masks, sizes in rows())


if __name__ == "__main__":
    print(markdown(), end="")

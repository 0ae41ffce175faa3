"""``crossport.to_torch_source``: readable PyTorch source + weights that rebuild the module
exactly (the function re-checks; these tests re-check again in a fresh import)."""


import keras
import pytest
import torch

import crossport
from tests.to_torch.harness import load_written, make_live, random_inputs

L = keras.layers


def _cnn():
    inp = keras.Input((9, 9, 3))
    x = L.Conv2D(4, 3, 2, padding="same", activation="relu", name="stem")(inp)
    x = L.BatchNormalization(name="bn")(x)
    x = L.DepthwiseConv2D(3, padding="same")(x)
    x = L.AveragePooling2D(3, 1, padding="same")(x)
    x = L.Conv2DTranspose(4, 3, 2, padding="same")(x)
    x = L.LayerNormalization(epsilon=1e-6)(x)
    x = L.Flatten()(L.MaxPooling2D(2)(x))
    return keras.Model(inp, L.Dense(3, activation="softmax")(x))


def _text():
    tokens = keras.Input((6,), dtype="int32")
    x = L.Embedding(20, 8)(tokens)
    x = L.MultiHeadAttention(2, 4)(x, x, use_causal_mask=True)
    x = L.Bidirectional(L.GRU(3, return_sequences=True))(x)
    x = L.SimpleRNN(3, activation="sigmoid", return_sequences=True)(x)  # (the twin)
    x = L.GRU(4, reset_after=False)(x)
    return keras.Model(tokens, L.Dense(2)(x))


def _augmented():
    inp = keras.Input((9, 10, 3))
    x = L.RandomFlip()(inp)
    x = L.Pipeline([L.RandomRotation(0.1), L.RandomFlip("vertical")])(x)
    x = L.RandomContrast(0.2)(L.AutoContrast(value_range=(0, 1))(x))
    x = L.AdaptiveMaxPooling2D((4, 3))(L.Conv2D(4, 3)(x))
    x = L.AdaptiveAveragePooling1D(2)(L.Reshape((12, 4))(x))
    return keras.Model(inp, L.Flatten()(x))


def _regularized():
    inp = keras.Input((9, 10, 3))
    x = L.SpatialDropout2D(0.2)(L.Conv2D(4, 3)(inp))
    x = L.GaussianDropout(0.1)(L.GaussianNoise(0.3)(x))
    x = L.Dropout(0.3, noise_shape=(None, 1, None, 4))(x)
    x = L.AlphaDropout(0.1)(L.ActivityRegularization(0.01)(L.Flatten()(x)))
    return keras.Model(inp, L.Dense(2)(L.Dropout(0.5)(x)))


def _frames():
    inp = keras.Input((3, 6, 5, 2))
    x = L.ConvLSTM2D(3, 3, strides=2, padding="same", return_sequences=True)(inp)
    return keras.Model(inp, L.ConvLSTM2D(2, 2, go_backwards=True)(x))


def _recurrent():
    inp = keras.Input((5, 3))
    frozen, frozen_bn = L.Dense(3), L.BatchNormalization()
    x = L.LSTM(4, return_sequences=True)(frozen_bn(frozen(inp)))  # bias_hh: a frozen zero
    frozen.trainable = frozen_bn.trainable = False
    return keras.Model(inp, L.SimpleRNN(3)(x))


def _grouped():
    """GroupNormalization over channels-last (torch_layers' KerasGroupNorm), one frozen: its
    source line once asked the module for a ``frozen`` flag only the BN classes have."""
    inp = keras.Input((6, 6, 4))
    x = L.GroupNormalization(2, epsilon=1e-4)(L.Conv2D(4, 3)(inp))
    frozen = L.GroupNormalization(-1, center=False)
    frozen.trainable = False
    return keras.Model(inp, frozen(L.Conv2D(4, 1)(x)))


@pytest.mark.parametrize("build", [_cnn, _text, _augmented, _regularized, _frames, _recurrent,
                                   _grouped],
                         ids=["cnn", "text", "augmented", "regularized", "frames", "recurrent",
                              "grouped"])
def test_source_rebuilds_the_module(build, tmp_path):
    model = make_live(build())
    args = random_inputs(model, 2, 0, int_high=20)
    conv = crossport.to_torch_with_report(model, args)
    path = crossport.to_torch_source(conv, tmp_path / "model_torch.py")
    text = path.read_text()
    assert "class KerasModel(nn.Module)" in text
    assert "import keras" not in text and "tensorflow" not in text
    written = load_written(path)
    rebuilt = written.build_model()
    fresh = random_inputs(model, 3, 5, int_high=20)
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(*fresh), conv.module(*fresh), rtol=0, atol=0)
    # what a state_dict does not carry: which parameters train
    assert ({n: p.requires_grad for n, p in rebuilt.named_parameters()}
            == {n: p.requires_grad for n, p in conv.module.named_parameters()})
    assert ({n: m.frozen for n, m in rebuilt.named_modules() if hasattr(m, "frozen")}
            == {n: m.frozen for n, m in conv.module.named_modules() if hasattr(m, "frozen")})
    # what eval() does not show: the train-mode settings (dropout rates, noise shapes ...)
    written_modules, noise = dict(rebuilt.named_modules()), 0
    for name, want in conv.module.named_modules():
        if type(want).__module__ in ("crossport.to_torch.noise",
                                     "crossport.to_torch.regularization"):
            assert type(written_modules[name]) is type(want), name
            assert _settings(written_modules[name]) == _settings(want), name
            noise += 1
    assert noise == (7 if build is _regularized else 0)


def _settings(module: torch.nn.Module) -> dict:
    return {k: v for k, v in vars(module).items() if not k.startswith("_") and k != "training"}


def test_existing_files_are_kept_unless_overwrite(tmp_path):
    """Both files are staged: an existing .py or .pt is refused, or replaced with overwrite."""
    model = keras.Sequential([keras.Input((4,)), L.Dense(2)])
    conv = crossport.to_torch_with_report(model, (torch.randn(1, 4),))
    (tmp_path / "m.pt").write_bytes(b"the user's weights")
    with pytest.raises(crossport.ExportError, match="m.pt already exists"):
        crossport.to_torch_source(conv, tmp_path / "m.py")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt"]
    assert (tmp_path / "m.pt").read_bytes() == b"the user's weights"
    crossport.to_torch_source(conv, tmp_path / "m.py", overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt", "m.py"]
    assert torch.load(tmp_path / "m.pt", weights_only=True).keys() == conv.module.state_dict().keys()

"""The public API: structures in and out, options, the self-check and its diagnosis."""

import dataclasses

import numpy as np
import pytest
import torch

import crossport
from crossport.to_keras.registry import replaced
from tests.harness import assert_converts, random_inputs


class TwoInTupleOut(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.fc = torch.nn.Linear(5, 2)

    def forward(self, image, vector):
        return self.conv(image).relu(), (self.fc(vector), vector * 2)


class DictOut(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 1)

    def forward(self, x):
        y = self.conv(x)
        return {"out": y, "aux": y.mean(dim=(2, 3))}  # not in sorted order


def test_nested_outputs_and_several_inputs():
    args = random_inputs([(2, 3, 8, 8), (2, 5)])
    assert_converts(TwoInTupleOut(), args)


def test_dict_outputs_keep_keys():
    assert_converts(DictOut(), random_inputs((1, 3, 8, 8)))


def test_input_names_follow_forward_arguments():
    model = crossport.convert(TwoInTupleOut().eval(), random_inputs([(1, 3, 8, 8), (1, 5)]))
    assert [t.name.split(":")[0] for t in model.inputs] == ["image", "vector"]


def test_a_torch_compiled_module_converts_under_its_own_names():
    """torch.compile wraps the module as ``_orig_mod``: layer names were
    ``_orig_mod.conv``, which float_layers=["conv"] and check mappings did not find
    (found by audit). The wrapped module is what is converted and checked."""
    net = TwoInTupleOut().eval()
    args = random_inputs([(1, 3, 8, 8), (1, 5)])
    conversion = crossport.convert_with_report(torch.compile(net), args)
    assert {"conv", "fc"} <= {layer.name for layer in conversion.model.layers}
    assert conversion.module is net and conversion.report.passed


@pytest.mark.parametrize("script", [torch.jit.script, lambda m: torch.jit.trace(m, (
    torch.randn(1, 3, 8, 8),))], ids=["script", "trace"])
def test_a_torchscript_module_is_an_input_error(script):
    """It was a CaptureError naming contextlib.py and an 'OrderedDictWrapper' attribute
    (found by audit): torch.export cannot capture TorchScript."""
    scripted = script(torch.nn.Conv2d(3, 4, 1).eval())
    with pytest.raises(crossport.InputError, match="TorchScript"):
        crossport.convert(scripted, (torch.randn(1, 3, 8, 8),))


def test_a_torchscript_submodule_is_an_input_error_naming_it():
    """A scripted submodule was a CaptureError: 'Linear.forward() takes 2 positional
    arguments but 3 were given'."""
    net = torch.nn.Sequential(torch.nn.ReLU(), torch.jit.script(torch.nn.Linear(4, 4)))
    with pytest.raises(crossport.InputError, match="submodule '1' of Sequential is a "
                                                   "TorchScript module"):
        crossport.convert(net.eval(), (torch.randn(2, 4),))


def test_an_eager_quantized_module_is_an_input_error():
    """A dynamically quantized Linear was a CaptureError naming contextlib.py and a
    LinearPackedParamsBase field (found by audit): the refusal names the submodule and says
    to quantize at export instead."""
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    quantized = torch.ao.quantization.quantize_dynamic(net.eval(), {torch.nn.Linear},
                                                       dtype=torch.qint8)
    with pytest.raises(crossport.InputError, match=r"^0 \(Linear\) is an eager-mode quantized.*"
                       "tflite-int8"):
        crossport.convert(quantized, (torch.randn(1, 4),))


def test_layer_names_follow_module_paths(torchvision):
    model = crossport.convert(torchvision.models.resnet18().eval(), random_inputs((1, 3, 64, 64)))
    names = {layer.name for layer in model.layers}
    assert {"conv1", "bn1", "layer1.0.conv1", "layer4.1.bn2", "fc"} <= names


class InputNamedLikeAModule(torch.nn.Module):
    """A diffusion block's ``forward(x, t)`` beside its timestep projection ``self.t``."""

    def __init__(self):
        super().__init__()
        self.t = torch.nn.Linear(1, 4)
        self.x = torch.nn.Conv2d(4, 4, 1)

    def forward(self, x, t):
        return self.x(x) + self.t(t[:, None])[:, :, None, None]


def test_an_input_named_like_a_module_keeps_its_name(tmp_path):
    """Keras names inputs and layers in one namespace: the module ``t`` clashed with the
    input ``t`` (a ConversionError when the model was built)."""
    args = random_inputs([(2, 4, 5, 5), (2,)])
    conversion = assert_converts(InputNamedLikeAModule(), args)
    assert [t.name.split(":")[0] for t in conversion.model.inputs] == ["x", "t"]
    assert {"x_1", "t_1"} <= {layer.name for layer in conversion.model.layers}
    crossport.to_source(conversion, tmp_path / "model.py")
    crossport.export(conversion, tmp_path / "model.keras")


def test_channels_last_io_has_no_transposes():
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU())
    conversion = assert_converts(net, random_inputs((1, 3, 12, 12)), channels_last_io=True)
    assert conversion.boundary_transposes == 0
    assert conversion.model.inputs[0].shape == (1, 12, 12, 3)


def test_dynamic_batch_gives_none_and_runs_other_batches():
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(4 * 36, 3))
    model = crossport.convert(net.eval(), random_inputs((2, 3, 8, 8)), dynamic_batch=True)
    assert model.inputs[0].shape[0] is None
    x = random_inputs((5, 3, 8, 8), seed=3)[0]
    np.testing.assert_allclose(np.asarray(model(x.numpy())), net(x).detach().numpy(), atol=1e-5)


def test_parity_error_names_first_diverging_layer_and_says_semantic():
    """A deliberately wrong converter must be caught, located and called semantic."""
    relu = torch.ops.aten.relu.default

    def leaky_by_mistake(ctx, self):
        import keras
        return keras.layers.LeakyReLU(negative_slope=0.1, name=ctx.name())(self)

    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Conv2d(4, 2, 1))
    with replaced(relu, leaky_by_mistake, supports=None), \
            pytest.raises(crossport.ParityError) as info:
        crossport.convert(net.eval(), random_inputs((1, 3, 10, 10)))
    report = info.value.report
    assert report.verdict == "semantic"
    assert report.first_divergent.module_path == "1"
    assert "aten.relu" in report.first_divergent.op
    assert "semantic" in str(info.value) and "first divergence" in str(info.value)


def test_registering_twice_without_override_is_an_error():
    with pytest.raises(ValueError, match="already has a converter"):
        crossport.register(torch.ops.aten.relu.default,
                           policy=crossport.Policy.AGNOSTIC)(lambda ctx, self: self)


def test_unknown_option_is_an_input_error():
    with pytest.raises(crossport.InputError, match="unknown option"):
        crossport.convert(torch.nn.ReLU(), random_inputs((1, 3)), chanels_last_io=True)


def test_dynamic_dims_none_means_no_dynamic_dims():
    """Found by the s17 audit: ``dynamic_dims=None`` (the usual "no value") was refused
    as not a dict."""
    model = crossport.convert(torch.nn.ReLU(), random_inputs((2, 3)), dynamic_dims=None)
    assert tuple(model.inputs[0].shape) == (2, 3)


@pytest.mark.parametrize("dims, example", [
    ({0: {5: "s"}}, (torch.randn(2, 4),)),                     # was taken as dim 1 (5 % 2)
    ({1: {0: "s"}}, (torch.randn(2, 4), torch.tensor(2.0))),   # was a ZeroDivisionError
], ids=["past-the-rank", "of-a-0-d-input"])
def test_a_dynamic_dim_an_input_does_not_have_is_an_input_error(dims, example):
    """Found by the s17 audit: dims were wrapped by the input's rank, so dim 5 of a 2-D
    input made dim 1 dynamic (a CaptureError about a dim the user never named), and any dim
    of a 0-D input crashed with a raw ZeroDivisionError."""

    class Scale(torch.nn.Module):
        def forward(self, x, s=None):
            return x * 2 if s is None else x * s

    with pytest.raises(crossport.InputError, match=r"has shape .* so it has no dim"):
        crossport.convert(Scale(), example, dynamic_dims=dims)


def test_transpose_count_matches_the_tf_graph(torchvision):
    from crossport.parity.graph import graph_transposes

    net = torchvision.models.resnet18().eval()
    for channels_last_io in (False, True):
        conversion = crossport.convert_with_report(net, random_inputs((1, 3, 64, 64)),
                                                   check=False, channels_last_io=channels_last_io)
        in_graph = graph_transposes(conversion.model)
        assert in_graph == conversion.transposes + conversion.boundary_transposes
        assert conversion.transposes == 0
        assert in_graph == (0 if channels_last_io else 1)


class VarArgs(torch.nn.Module):
    def forward(self, *xs):
        return xs[0] * 2 + xs[1]


def test_dynamic_batch_with_var_positional_forward():
    model = crossport.convert(VarArgs().eval(), random_inputs([(2, 3), (2, 3)]), dynamic_batch=True)
    a, b = random_inputs([(4, 3), (4, 3)], seed=5)
    np.testing.assert_allclose(np.asarray(model([a.numpy(), b.numpy()])), (a * 2 + b).numpy(),
                               atol=1e-6)


def test_stages_are_reported_in_order_and_timed():
    seen = []
    conversion = crossport.convert_with_report(torch.nn.Conv2d(3, 4, 3).eval(),
                                               random_inputs((1, 3, 8, 8)), on_stage=seen.append)
    assert seen == ["capture", "convert", "verify"] == list(conversion.seconds)


def test_a_conversion_does_not_keep_a_dropped_keras_model_alive():
    """The generative export drops ``conversion.model`` to free the Keras copy of the
    weights before TF's converter runs (4.4 GB for a 1.1B model); ``Conversion.origins``
    held every layer strongly and kept them all resident (peak RSS 13.4 GB, limit 11)."""
    import gc
    import weakref

    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                              torch.nn.Linear(4 * 6 * 6, 5)).eval()
    conversion = crossport.convert_with_report(net, (torch.randn(1, 3, 8, 8),))
    assert len(conversion.origins) > 0  # the quantization report's names are still there
    layer = weakref.ref(conversion.model.layers[-1])
    conversion.model = None
    gc.collect()
    assert layer() is None


@dataclasses.dataclass
class _Pair:
    doubled: torch.Tensor
    shifted: torch.Tensor


class _ReturnsPair(torch.nn.Module):
    def forward(self, x):
        return _Pair(x * 2, x + 1)


def test_a_dataclass_output_is_refused_with_what_to_do_until_registered():
    """Found by the s17 audit: an unregistered dataclass output was torch's "register a
    pytree" message with no crossport hint; registered, its conversion crashed in the output
    node and the check (Keras takes no dataclass)."""
    example = random_inputs((2, 3))
    with pytest.raises(crossport.CaptureError, match=r"register_dataclass\(_Pair\)"):
        crossport.convert(_ReturnsPair().eval(), example)
    torch.export.register_dataclass(_Pair)
    model = crossport.convert(_ReturnsPair().eval(), example)
    got, want = model(example[0].numpy()), _ReturnsPair()(example[0])
    assert set(got) == {"doubled", "shifted"}
    for name in got:
        np.testing.assert_allclose(np.asarray(got[name]), getattr(want, name).numpy(), atol=1e-6)


class GradModeBranches(torch.nn.Module):
    """Branches on grad mode and a no_grad block, as checkpointing / EMA code has them."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        with torch.no_grad():
            scale = x.abs().amax()
        y = self.fc(x) / (scale + 1)
        return y * 2 if torch.is_grad_enabled() else y


def test_capture_runs_without_grad_as_the_check_runs_torch():
    """Inference semantics on both sides: the check runs torch without grad, so capture
    does too (it captured the grad-enabled branch, and the check refused as 'semantic')."""
    module, x = GradModeBranches().eval(), torch.randn(2, 4)
    conversion = crossport.convert_with_report(module, (x,))
    assert conversion.report.passed and torch.is_grad_enabled()
    with torch.no_grad():
        want = module(x)
    np.testing.assert_allclose(np.asarray(conversion.model(x.numpy())), want.numpy(), atol=1e-6)

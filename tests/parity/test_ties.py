"""Integer and bool values that float32 rounding decided are ties, not a failed check.

Real modules, converted and checked; the faithful-op rule is exercised both ways: ties
pass with a note, a converter that decides differently on the same inputs still fails.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import keras
import numpy as np
import torch
from torch import nn

import crossport


class _Decisions(nn.Module):
    """Floats through ops whose ulps differ between torch and TF (gelu, exp, log1p, sin),
    scaled so that truncating to integers and comparing with a threshold both land values
    on the boundary; the integers also feed a float op after the decision."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(64, 256)

    def forward(self, x):
        y = nn.functional.gelu(self.linear(x)).exp().log1p().sin() * 1e6
        ints = y.long()
        return ints, y > 3e5, (ints % 7).float() * 0.5


class _ConvDecisions(nn.Module):
    """A conv block flattened into a Linear (the flattened features keep Keras' order, a
    layout the replay compares in), then the same decisions."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.linear = nn.Linear(8 * 6 * 6, 512)

    def forward(self, x):
        y = self.linear(torch.flatten(torch.relu(self.conv(x)), 1))
        return (nn.functional.gelu(y).exp().log1p().sin() * 1e6).long()


def test_a_flattened_conv_feature_then_a_decision():
    torch.manual_seed(0)
    module, x = _ConvDecisions().eval(), torch.randn(32, 3, 6, 6)
    conversion = crossport.convert_with_report(module, (x,))
    differ = int(np.count_nonzero(np.asarray(conversion.model(x.numpy())) != module(x).numpy()))
    assert differ > 0
    assert conversion.report.passed, conversion.report.summary()
    assert any("rounding or the order of equal values decided" in n for n in conversion.report.notes)


def test_integers_decided_by_rounding_pass_with_a_note():
    torch.manual_seed(0)
    module, x = _Decisions().eval(), torch.randn(64, 64)
    conversion = crossport.convert_with_report(module, (x,))
    ints, above, derived = conversion.model(x.numpy())
    want = module(x)
    differ = int(np.count_nonzero(np.asarray(ints) != want[0].numpy()))
    assert differ > 0  # the premise: rounding moved some values across an integer
    assert conversion.report.passed, conversion.report.summary()
    notes = "\n".join(conversion.report.notes)
    assert "the op's boundary" in notes and "aten.to" in notes
    # after the decision the derived float output is compared given Keras' integers
    np.testing.assert_array_equal(np.asarray(derived), (np.asarray(ints) % 7) * 0.5)
    assert np.asarray(above).dtype == bool


def test_a_converter_that_decides_differently_still_fails():
    """argmax converted as argmin (int64, as torch's): only integer values differ, the
    inputs agree within atol, and torch's argmax of Keras' inputs is not Keras' value: the
    faithful-op rule refuses it (without that rule it would pass as a tie)."""
    code = textwrap.dedent("""
        import os, warnings
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
        warnings.filterwarnings("ignore")
        import keras, torch
        import crossport
        from crossport import Policy, register
        aten = torch.ops.aten

        @register(aten.argmax.default, policy=Policy.CANONICAL, override=True, dynamic=True)
        def wrong_argmax(ctx, self, dim=None, keepdim=False):
            # int64 as torch's: a dtype mismatch alone would fail before the tie rule
            return keras.ops.cast(keras.ops.argmin(self, axis=dim, keepdims=keepdim), "int64")

        class Classify(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = torch.nn.Linear(8, 5)

            def forward(self, x):
                return self.linear(x).argmax(-1)

        torch.manual_seed(0)
        try:
            crossport.convert(Classify().eval(), (torch.randn(16, 8),))
            print("CONVERTED")
        except crossport.ParityError as exc:
            print("REFUSED", "rounding decided" in str(exc))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == ["REFUSED", "False"], done.stdout


def test_exported_files_and_source_keep_the_ties(tmp_path):
    """The export and generated-source re-checks compare with torch too: an artifact whose
    integers equal the checked Keras model's passes there as well (a .keras file, the
    generated source)."""
    torch.manual_seed(0)
    module, x = _Decisions().eval(), torch.randn(64, 64)
    conversion = crossport.convert_with_report(module, (x,))
    result = crossport.export(conversion, tmp_path / "m.keras")
    assert result.recheck.passed, result.summary()
    assert crossport.to_source(conversion, tmp_path / "m.py").exists()  # raises if not


class _Orders(nn.Module):
    """Rows of 2048 floats whose ulps differ between torch and TF, ordered by sort, topk,
    max over a dim and argsort of a relu (many exactly equal zeros)."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(64, 2048)

    def forward(self, x):
        y = nn.functional.gelu(self.linear(x)).exp().log1p().sin()
        values, order = torch.sort(y, dim=-1)
        top = torch.topk(y, 100, dim=-1).indices
        best = y.reshape(y.shape[0], 8, -1).max(dim=1).indices
        return values, order, top, best, torch.argsort(torch.relu(y), dim=-1, descending=True)


def test_indices_of_near_and_exact_ties_pass_when_they_select_the_same_values():
    torch.manual_seed(0)
    module, x = _Orders().eval(), torch.randn(64, 64)
    conversion = crossport.convert_with_report(module, (x,))
    got = conversion.model(x.numpy())
    with torch.no_grad():
        want = module(x)
    differ = [int(np.count_nonzero(np.asarray(g) != w.numpy())) for g, w in zip(got, want)]
    assert differ[1] > 0 and differ[4] > 0  # the premise: sort and argsort indices differ
    assert conversion.report.passed, conversion.report.summary()
    notes = "\n".join(conversion.report.notes)
    assert "aten.sort.default element 1" in notes and "select exactly" in notes


class _IntegerSort(nn.Module):
    def __init__(self, stable: bool):
        super().__init__()
        self.stable = stable

    def forward(self, x):
        return torch.sort(x, dim=-1, stable=self.stable).indices


def _convert_with_reversed_ties(stable: bool) -> str:
    """Converts an integer sort with a sort converter that orders equal values by
    descending index (a valid unstable sort); prints CONVERTED or REFUSED."""
    code = textwrap.dedent(f"""
        import os, warnings
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
        warnings.filterwarnings("ignore")
        import keras, torch
        import crossport
        from crossport import Policy, register
        from tests.parity.test_ties import _IntegerSort

        @register(torch.ops.aten.sort.stable, policy=Policy.CANONICAL, override=True,
                  dynamic=True)
        def reversed_ties(ctx, self, *, stable=None, dim=-1, descending=False):
            order = keras.ops.argsort(keras.ops.flip(self, axis=dim), axis=dim)
            indices = keras.ops.cast(self.shape[dim] - 1 - order, "int64")
            return keras.ops.take_along_axis(self, indices, axis=dim), indices

        torch.manual_seed(0)
        try:
            crossport.convert(_IntegerSort({stable}).eval(), (torch.randint(0, 5, (8, 300)),))
            print("CONVERTED")
        except crossport.ParityError:
            print("REFUSED")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()[-1]


def test_sort_indices_order_equal_values_freely_unless_stable():
    """torch documents no order among equal values for ``sort(stable=False)``: Keras'
    by-index order passes although torch's differs; with ``stable=True`` the order is the
    contract, and a converter ordering ties otherwise is refused."""
    torch.manual_seed(0)
    x = torch.randint(0, 5, (8, 300))
    loose = crossport.convert_with_report(_IntegerSort(False).eval(), (x,))
    assert np.count_nonzero(np.asarray(loose.model(x.numpy())) != _IntegerSort(False)(x).numpy())
    assert loose.report.passed and "select exactly" in "\n".join(loose.report.notes)
    strict = crossport.convert_with_report(_IntegerSort(True).eval(), (x,))
    assert strict.report.passed and not strict.report.notes  # exact: nothing to excuse
    assert _convert_with_reversed_ties(stable=False) == "CONVERTED"
    assert _convert_with_reversed_ties(stable=True) == "REFUSED"


class _Phase(nn.Module):
    """The phase of a real signal's 2-D spectrum: the bins of row N/2 and column 0 are
    real, with an imaginary part exactly 0 in torch and rounding noise (+-1e-8) in TF, so
    where their real part is negative the angle is pi in one and -pi in the other."""

    def forward(self, x):
        return torch.fft.fft2(x).angle()


def test_a_phase_on_the_branch_cut_is_a_tie():
    module, x = _Phase().eval(), torch.randn(2, 6, 8, generator=torch.Generator().manual_seed(0))
    conversion = crossport.convert_with_report(module, (x,), check_inputs=8)
    # the premise: on some input set an angle jumped by 2*pi
    notes = "\n".join(conversion.report.notes)
    assert conversion.report.passed, conversion.report.summary()
    assert "aten.angle.default" in notes and "the op's boundary" in notes, notes


def test_a_float_decision_converted_wrongly_still_fails():
    """floor converted as round: values past atol at a float decision node, but torch's
    floor of Keras' inputs is not Keras' value, so it is no tie."""
    from crossport.to_keras.registry import replaced

    module = _Floored().eval()
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(0))
    with replaced(torch.ops.aten.floor.default, lambda ctx, self: keras.ops.round(self)):
        try:
            crossport.convert_with_report(module, (x,))
        except crossport.ParityError as exc:
            assert "decided them" not in str(exc) and exc.report.verdict == "semantic"
        else:
            raise AssertionError("a floor converted as round passed the check")


class _Floored(nn.Module):
    def forward(self, x):
        return torch.floor(x * 4) / 4

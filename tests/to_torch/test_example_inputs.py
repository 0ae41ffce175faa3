"""Keras -> torch without example inputs: random ones from the model's own ``Input`` specs,
or a clear ``InputError`` saying what to give when the specs do not say enough."""

import keras
import numpy as np
import pytest
import torch

import crossport
from crossport.errors import InputError

L = keras.layers


def _two_inputs():
    image = keras.Input((6, 6, 3), name="image")
    ids = keras.Input((5,), dtype="int32", name="ids")
    pooled = L.GlobalAveragePooling2D()(L.Conv2D(4, 3)(image))
    words = L.GlobalAveragePooling1D()(L.Embedding(7, 4)(ids))
    return keras.Model([image, ids], L.Add()([pooled, words]))


def test_specs_give_a_batch_of_two_and_ids_below_the_vocabulary():
    conversion = crossport.to_torch_with_report(_two_inputs())
    image, ids = conversion.example_args
    assert tuple(image.shape) == (2, 6, 6, 3) and image.dtype == torch.float32
    assert tuple(ids.shape) == (2, 5) and ids.dtype == torch.int32
    assert 0 <= int(ids.min()) and int(ids.max()) < 7
    assert conversion.report.passed


def test_specs_in_the_channels_first_layout():
    kmodel = keras.Sequential([keras.Input((6, 6, 3)), L.Conv2D(4, 3)])
    conversion = crossport.to_torch_with_report(kmodel, channels_first_io=True)
    assert tuple(conversion.example_args[0].shape) == (2, 3, 6, 6)
    x = np.random.default_rng(0).standard_normal((2, 6, 6, 3)).astype("float32")
    got = conversion.module(torch.from_numpy(x).permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
    np.testing.assert_allclose(got.detach().numpy(), kmodel(x).numpy(), atol=1e-5)


def test_a_fixed_batch_is_kept():
    kmodel = keras.Sequential([keras.Input((4,), batch_size=3), L.Dense(2)])
    assert tuple(crossport.to_torch_with_report(kmodel).example_args[0].shape) == (3, 4)


@pytest.mark.parametrize("build, message", [
    (lambda: keras.Sequential([keras.Input((None, None, 3)), L.Conv2D(2, 3)]),
     "--input 1xNxNx3"),
    (lambda: keras.Sequential([keras.Input((None,), dtype="int32"), L.Embedding(9, 2)]),
     "--input int32:1xN:9"),
    (lambda: keras.Sequential([keras.Input((4,), dtype="int32"), L.CategoryEncoding(8)]),
     "--input int32:1x4:HIGH"),
])
def test_what_the_specs_do_not_say_is_asked_for(build, message):
    with pytest.raises(InputError, match="give an example") as error:
        crossport.to_torch(build())
    assert message in str(error.value)

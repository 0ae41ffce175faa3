"""A plain HF model, as README's example converts it: ModelOutput outputs, ids and mask
sharing a named dynamic sequence dim, the check on."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import crossport
from crossport.compat import import_torchvision


def _tiny_bert():
    import_torchvision()  # transformers imports torchvision
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64)
    return transformers.BertModel(config).eval()


def test_model_output_becomes_a_dict_of_its_fields():
    bert = _tiny_bert()
    ids, mask = torch.randint(0, 100, (2, 7)), torch.ones(2, 7, dtype=torch.long)
    model = crossport.convert(bert, (ids, mask))
    out = model([ids.numpy(), mask.numpy()])
    want = bert(ids, mask)
    assert list(out) == ["last_hidden_state", "pooler_output"]
    for key in out:
        np.testing.assert_allclose(np.asarray(out[key]), want[key].detach().numpy(), atol=1e-5)


def test_readme_dynamic_sequence_shared_by_ids_and_mask():
    """Dims named alike are one size: the size-condition check moves them together (it
    refused ids 2x17 with a 2x16 mask, a pair the user ruled out by naming both 'seq')."""
    bert = _tiny_bert()
    ids, mask = torch.randint(0, 100, (1, 16)), torch.ones(1, 16, dtype=torch.long)
    conversion = crossport.convert_with_report(
        bert, (ids, mask), dynamic_batch=True,
        dynamic_dims={"input_ids": {1: "seq"}, "attention_mask": {1: "seq"}})
    assert [tuple(i.shape) for i in conversion.model.inputs] == [(None, None)] * 2
    ids, mask = torch.randint(0, 100, (3, 9)), torch.ones(3, 9, dtype=torch.long)
    mask[0, 5:] = 0
    out = conversion.model([ids.numpy(), mask.numpy()])["last_hidden_state"]
    np.testing.assert_allclose(np.asarray(out), bert(ids, mask).last_hidden_state.detach(),
                               atol=1e-5)


def _tiny_gpt2(**config):
    import_torchvision()
    import transformers

    torch.manual_seed(0)
    return transformers.GPT2Model(transformers.GPT2Config(
        vocab_size=100, n_embd=32, n_layer=2, n_head=2, **config)).eval()


def test_model_output_with_one_field_converts():
    """GPT2Model without its cache returns a ModelOutput whose one field is set; rebuilding
    that class around a Keras tensor failed (its __post_init__ iterates a lone first field it
    does not know as a tensor): the output is a dict built without the user's class."""
    gpt2 = _tiny_gpt2(use_cache=False)
    ids = torch.randint(0, 100, (2, 9))
    conversion = crossport.convert_with_report(gpt2, (ids,))
    assert conversion.report.passed
    out = conversion.model(ids.numpy())
    assert list(out) == ["last_hidden_state"]
    np.testing.assert_allclose(np.asarray(out["last_hidden_state"]),
                               gpt2(ids).last_hidden_state.detach().numpy(), atol=1e-5)


def test_returned_kv_cache_is_refused_with_the_way_out():
    """A transformers model returning its KV cache object (use_cache on, the default) is a
    capture error that says how to turn the cache off or where generation export lives."""
    gpt2 = _tiny_gpt2()
    with pytest.raises(crossport.CrossportError) as refused:
        crossport.convert(gpt2, (torch.randint(0, 100, (1, 5)),))
    message = str(refused.value)
    assert "DynamicCache" in message and "use_cache = False" in message
    assert "crossport.generative.export" in message

"""A plain HF model, as README's example converts it: ModelOutput outputs, ids and mask
sharing a named dynamic sequence dim, the check on."""

from __future__ import annotations

import numpy as np
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

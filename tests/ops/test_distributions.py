"""torch.distributions built inside forward (a policy's log-probabilities and entropy):
captured without their argument validation, which branches on values torch.export cannot
take, and matched against the eager module (which validates)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical, Distribution, Independent, Normal

import crossport


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(6, 16)
        self.mean, self.log_std = nn.Linear(16, 3), nn.Linear(16, 3)
        self.logits = nn.Linear(16, 5)

    def forward(self, obs, action, choice):
        h = torch.tanh(self.body(obs))
        gauss = Independent(Normal(self.mean(h), self.log_std(h).exp()), 1)
        pick = Categorical(logits=self.logits(h))
        return (gauss.log_prob(action), gauss.entropy(), pick.log_prob(choice), pick.entropy(),
                pick.probs)


def test_policy_log_probs_and_entropies_convert():
    torch.manual_seed(0)
    module = Policy().eval()
    args = (torch.randn(4, 6), torch.randn(4, 3), torch.tensor([0, 4, 2, 1]))
    # torch.compile's first call turns the default off for good (dynamo's TorchPatcher)
    default = Distribution._validate_args
    conversion = crossport.convert_with_report(module, args)
    assert conversion.report.passed, conversion.report.summary()
    assert Distribution._validate_args is default  # restored after capture
    with torch.no_grad():
        want = module(*args)
    got = conversion.model([a.numpy() for a in args])
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w.numpy(), rtol=1e-5, atol=1e-5)

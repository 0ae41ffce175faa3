"""Parity: compare converted models with torch, find the first divergence, give a verdict."""

from crossport.parity.compare import Comparison, OutputComparison, compare_outputs
from crossport.parity.live import DeadModelError, check_live, make_live
from crossport.parity.metrics import normalized_error, rounding_verdict
from crossport.parity.report import NodeDivergence, ParityReport
from crossport.parity.verify import verify

__all__ = ["Comparison", "DeadModelError", "NodeDivergence", "OutputComparison", "ParityReport",
           "check_live", "compare_outputs", "make_live", "normalized_error", "rounding_verdict",
           "verify"]

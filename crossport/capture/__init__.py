"""Graph capture: torch.export, dynamic dims, the decomposition table, node provenance."""

from crossport.capture.export import (
    capture,
    dataclass_fields,
    input_names,
    normalize_example_args,
    requested_dim_groups,
    requested_dynamic_dims,
    unwrap_module,
)
from crossport.capture.source import describe, module_path, module_type, source_line

__all__ = [
    "dataclass_fields",
    "capture",
    "describe",
    "input_names",
    "module_path",
    "module_type",
    "normalize_example_args",
    "requested_dim_groups",
    "requested_dynamic_dims",
    "source_line",
    "unwrap_module",
]

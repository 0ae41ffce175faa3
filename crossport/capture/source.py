"""Where a graph node came from: its torch module path and the user's source line."""

from __future__ import annotations

import re

import torch.fx

_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)')


def module_path(node: torch.fx.Node) -> str:
    """The dotted path of the innermost module that ran ``node`` ('' for the root)."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path, _type = list(stack.values())[-1]
    return _clean_path(path)


def module_type(node: torch.fx.Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    _path, type_name = list(stack.values())[-1]
    return type_name if isinstance(type_name, str) else getattr(type_name, "__name__", "")


def _clean_path(path: str) -> str:
    # torch.export spells list indices as "layer1.0" but sometimes as "L['self'].layer1[0]"
    path = re.sub(r"L\['self'\]\.?|L__self__\.?", "", path)
    return re.sub(r"\[(\d+)\]", r".\1", path).strip(".")


def source_line(node: torch.fx.Node) -> str:
    """``file:line: code`` of the innermost frame outside torch itself, or ''."""
    trace = node.meta.get("stack_trace") or ""
    frames = _FRAME.findall(trace)
    user = [f for f in frames if "/torch/" not in f[0]]
    if not user:
        return ""
    filename, line, _fn, code = user[-1]
    return f"{filename}:{line}: {code.strip()}"


def describe(node: torch.fx.Node) -> str:
    """One phrase locating ``node`` for error messages."""
    path = module_path(node) or "<root module>"
    line = source_line(node)
    return f"in {path}" + (f" ({line})" if line else "")

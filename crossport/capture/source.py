"""Where a graph node came from: its torch module path and the user's source line."""

from __future__ import annotations

import inspect
import os
import re
import sys

import torch
import torch.fx

# A traceback frame; the code line is absent for code without a file (stdin, exec).
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)(?:\n(?!\s*File ")\s*(.*))?')
# torch's own frames, by install directory: a user path may contain "/torch/" too.
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


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
    """``file:line: code`` of the innermost frame outside torch itself, or ''.

    Frames of code torch.fx generated (``<eval_with_key>.5``: where dynamo records a
    higher-order op such as ``torch.while_loop``) are torch's too: the user's call is the
    frame before them."""
    trace = node.meta.get("stack_trace") or ""
    frames = _FRAME.findall(trace)
    user = [f for f in frames if not os.path.abspath(f[0]).startswith(_TORCH_DIR)
            and not f[0].startswith("<eval_with_key>")]
    if not user:
        return ""
    filename, line, _fn, code = user[-1]
    return f"{filename}:{line}" + (f": {code.strip()}" if code.strip() else "")


def forward_location(node: torch.fx.Node) -> str:
    """``file:line`` of the ``forward`` of the module that ran ``node`` (when the node
    carries no stack trace), or ''."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    _path, type_name = list(stack.values())[-1]
    cls = type_name if isinstance(type_name, type) else _find_class(str(type_name))
    forward = getattr(cls, "forward", None)
    try:
        filename = inspect.getsourcefile(forward)
        _lines, first = inspect.getsourcelines(forward)
    except (TypeError, OSError):
        return ""
    return f"{filename}:{first}: forward of {cls.__name__}" if filename else ""


def _find_class(qualified: str):
    module_name, _, name = qualified.rpartition(".")
    obj = sys.modules.get(module_name)
    for part in name.split("."):
        obj = getattr(obj, part, None)
    return obj if isinstance(obj, type) else None


def describe(node: torch.fx.Node) -> str:
    """One phrase locating ``node`` for error messages."""
    path = module_path(node) or "<root module>"
    line = source_line(node) or forward_location(node)
    return f"in {path}" + (f" ({line})" if line else "")

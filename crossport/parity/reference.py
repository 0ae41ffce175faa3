"""torch's side of the parity check, computed while the Keras model is built.

The check compares torch and Keras on every input set. torch's outputs depend only on the
module and the inputs, so once the inputs are known (right after capture) a worker thread
runs the torch forwards while the calling thread builds the Keras model and runs it. Both
frameworks release the GIL inside their kernels and the build is mostly Python, so with a
second core the torch forwards cost little wall time (benchmarks/RESULTS.md "Conversion
time"). The results are the same objects the sequential check computed: the same module,
inputs and forwards, in the same order, only on another thread.

It is only done when the forward cannot change what the build reads and runs as it would on
the calling thread (``can_run_beside``): otherwise the forwards run on the calling thread, in
order, when the check asks for them, as before.
"""

from __future__ import annotations

import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import torch
from torch.overrides import _get_current_function_mode_stack
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

from crossport.errors import InputError

# While the worker runs, the calling thread holds the GIL for long Python stretches (Keras
# layer construction). A thread waiting for the GIL gets it after at most this interval, so
# the default 5 ms would stall the worker at every torch op; 0.5 ms keeps it fed.
_SWITCH_INTERVAL = 0.0005


def torch_outputs(module: torch.nn.Module, args: tuple):
    """``module(*args)`` on copies: a forward that writes to its inputs leaves ours intact."""
    with torch.no_grad():
        return module(*(a.clone() for a in args))


def torch_on_input_set(module: torch.nn.Module, args: tuple, index: int):
    """``torch_outputs`` of input set ``index``; the user's model rejecting those inputs is
    an InputError saying which set and what to give instead."""
    try:
        return torch_outputs(module, args)
    except Exception as exc:  # the user's model rejects the inputs: say which, in one line
        which = ("example inputs" if index == 0 else f"fresh input set {index} (shapes "
                 f"{', '.join('x'.join(map(str, a.shape)) for a in args)})")
        raise InputError(
            f"the torch module failed on the {which}: {type(exc).__name__}: {exc}. "
            "Give example inputs the model accepts (token ids below the vocabulary "
            "size, valid masks); fresh integer inputs are drawn within the example's "
            "range" + ("" if index == 0 else "; check_inputs=0 checks on the example inputs "
                       "only") + ".") from exc


def can_run_beside(exported: torch.export.ExportedProgram) -> bool:
    """Whether torch's forwards may run on a worker thread while the model is built.

    Not when the captured forward writes buffers (or inputs) in place: the build reads
    them. Not when the caller's thread has torch state a new thread would not inherit
    (autocast, a torch function or dispatch mode such as ``with torch.device(...)``,
    inference mode): the check's forwards must run as the caller's would.
    """
    signature = exported.graph_signature
    if signature.buffers_to_mutate or signature.user_inputs_to_mutate:
        return False
    return not (_get_current_function_mode_stack() or _get_current_dispatch_mode_stack()
                or torch.is_autocast_enabled("cpu") or torch.is_inference_mode_enabled())


def torch_on_input_sets(module: torch.nn.Module, input_sets: list, index: int):
    """``(torch's outputs on input set index, note or None)``, ``input_sets[0]`` being the
    example. A fresh set torch rejects is retried with the example's integer inputs
    (lengths, offsets, positions: structure random draws break, as EmbeddingBag's offsets
    must start at 0, packed lengths be sorted) and its fresh floats; that set replaces it in
    ``input_sets`` (so Keras runs the same one) and the note says so. Still rejected, or no
    integer input to keep: the InputError of :func:`torch_on_input_set`."""
    try:
        return torch_on_input_set(module, input_sets[index], index), None
    except InputError as rejected:
        kept = _with_example_integers(input_sets[index], input_sets[0]) if index else None
        if kept is None:
            raise
        try:
            result = torch_outputs(module, kept)
        except Exception:  # noqa: BLE001  (still rejected: the first reason is the one)
            raise rejected from None
        input_sets[index] = kept
        reason = " ".join(str(rejected.__cause__ or rejected).split())[:160]
        return result, (f"input set {index}: the example's integer inputs with fresh floats "
                        f"(torch rejected random integers: {reason})")


def _with_example_integers(fresh: tuple, example: tuple) -> tuple | None:
    """``fresh`` with the tensors it drew from the example's range (integers) replaced by
    the example's, or None when it has none (or their shapes differ from the example's)."""
    from crossport.parity.verify import drawn_from_range  # verify imports this module

    drawn = [isinstance(a, torch.Tensor) and drawn_from_range(a.dtype) for a in fresh]
    if not any(drawn) or any(d and new.shape != old.shape
                             for d, new, old in zip(drawn, fresh, example)):
        return None
    return tuple(old if d else new for d, new, old in zip(drawn, fresh, example))


class _Stopped(BaseException):
    """Ends the worker's forward at its next submodule call when the check is left early
    (a failed build, Ctrl-C): not an ``Exception``, so no user code swallows it."""


class TorchReference:
    """torch's outputs on ``input_sets``, computed ahead on a worker thread when
    ``concurrent``, else on demand. Use as a context manager: leaving it cancels forwards
    not yet started, stops the running one at its next submodule call and waits for it,
    so the module is idle afterwards (the caller restores it then).

    Example:
        >>> import torch
        >>> net = torch.nn.Linear(3, 2).eval()
        >>> with TorchReference(net, [(torch.ones(1, 3),)], concurrent=True) as reference:
        ...     reference.outputs(0).shape
        torch.Size([1, 2])
    """

    def __init__(self, module: torch.nn.Module, input_sets: list[tuple], concurrent: bool):
        self._module = module
        self._input_sets = input_sets
        self._pool: ThreadPoolExecutor | None = None
        self._futures: list[Future] = []
        self._interval = sys.getswitchinterval()
        self._failed = False
        self._stop = threading.Event()
        self._worker: int | None = None  # the worker thread's ident, once it runs
        self._hook = None
        self.notes: list[str] = []  # input sets whose integers were kept from the example
        if concurrent and input_sets:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="crossport-torch-reference")
            sys.setswitchinterval(min(self._interval, _SWITCH_INTERVAL))
            # process-wide, but it acts only on the worker thread, and only once stopped
            self._hook = torch.nn.modules.module.register_module_forward_pre_hook(
                self._stop_here)
            self._futures = [self._pool.submit(self._run, i) for i in range(len(input_sets))]

    def _stop_here(self, module, args) -> None:
        if self._stop.is_set() and threading.get_ident() == self._worker:
            raise _Stopped

    def _run(self, index: int):
        """One forward on the worker; none after a failed one (the check stops at the first
        failure, as it did when it ran torch itself)."""
        self._worker = threading.get_ident()
        if self._failed or self._stop.is_set():
            return None
        try:
            return self._forward(index)
        except BaseException:
            self._failed = True
            raise

    def _forward(self, index: int):
        result, note = torch_on_input_sets(self._module, self._input_sets, index)
        if note:
            self.notes.append(note)
        return result

    def outputs(self, index: int):
        """torch's output structure on input set ``index`` (raises its InputError); the
        set may have been replaced in ``input_sets`` (see ``_forward``)."""
        if not self._futures:
            return self._forward(index)
        return self._futures[index].result()

    def close(self) -> None:
        if self._pool is not None:
            self._stop.set()
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
            self._hook.remove()
            sys.setswitchinterval(self._interval)

    def __enter__(self) -> TorchReference:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


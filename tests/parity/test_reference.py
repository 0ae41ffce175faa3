"""torch's side of the check runs on a worker thread while the Keras model is built."""

from __future__ import annotations

import sys
import threading
import time

import pytest
import torch

import crossport
from crossport.errors import InputError, UnsupportedOpError
from crossport.parity.reference import TorchReference, can_run_beside

WORKER = "crossport-torch-reference"
# Which thread ran each forward. Module-level: crossport restores the lists a module holds
# (whatever forward appends to self.something is undone after the check).
SEEN: list[str] = []


@pytest.fixture(autouse=True)
def _clear_seen():
    SEEN.clear()


class RecordsThread(torch.nn.Module):
    """A conv whose forward notes which thread ran it (in a list the test owns)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x):
        SEEN.append(threading.current_thread().name)
        return self.conv(x)


def _workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(WORKER)]


def test_checks_forwards_run_on_the_worker_and_the_report_is_the_sequential_one():
    module = RecordsThread().eval()
    x = torch.randn(1, 3, 8, 8)
    interval = sys.getswitchinterval()
    conversion = crossport.convert_with_report(module, (x,), check_inputs=2)
    checked = [name for name in SEEN if name.startswith(WORKER)]
    assert len(checked) == 3, SEEN  # example + 2 fresh input sets, all on the worker
    assert sys.getswitchinterval() == interval
    assert not _workers()
    sequential = crossport.parity.verify(module, conversion.exported,
                                         _emitted(conversion), (x,), conversion.options)
    assert sequential.errors == conversion.report.errors


def _emitted(conversion):
    from crossport.to_keras.emit import EmittedModel
    return EmittedModel(conversion.model)


class WritesBuffer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        SEEN.append(threading.current_thread().name)
        self.calls.add_(1)
        return x * 2


def test_a_forward_writing_buffers_never_runs_beside_the_build():
    module = WritesBuffer().eval()
    with pytest.raises(crossport.CrossportError):  # buffer writes are refused by the build
        crossport.convert(module, (torch.randn(2, 3),))
    assert not any(name.startswith(WORKER) for name in SEEN), SEEN
    assert float(module.calls) == 0  # and the module is as it was


class Unsupported(torch.nn.Module):
    def forward(self, x):
        SEEN.append(threading.current_thread().name)
        return torch.geqrf(x)[0]


def test_a_refused_op_is_reported_before_any_forward_runs():
    module = Unsupported().eval()
    with pytest.raises(UnsupportedOpError):
        crossport.convert(module, (torch.rand(2, 3) + 1,))
    assert not any(name.startswith(WORKER) for name in SEEN), SEEN
    assert not _workers()


class FailsOnItsThirdCall(torch.nn.Module):
    """Capture calls forward once, the check's example run once: the first fresh input set
    is the third call."""

    def forward(self, x):
        SEEN.append(threading.current_thread().name)
        if len(SEEN) >= 3:
            raise ValueError("not again, please")
        return x + 1


def test_the_workers_error_is_the_checks_input_error():
    with pytest.raises(InputError, match="fresh input set 1 .*not again, please"):
        crossport.convert(FailsOnItsThirdCall(), (torch.ones(2, 3),))
    assert len(SEEN) == 3  # the queued sets were cancelled
    assert not _workers()


def test_leaving_early_cancels_what_has_not_started():
    started = threading.Event()
    release = threading.Event()
    calls: list[int] = []

    class Slow(torch.nn.Module):
        def forward(self, x):
            calls.append(1)
            started.set()
            release.wait(10)
            return x

    with TorchReference(Slow(), [(torch.ones(1),)] * 5, concurrent=True):
        started.wait(10)
        release.set()
    assert len(calls) == 1  # the running forward finished; the four queued never ran
    assert not _workers()


def test_leaving_early_stops_the_running_forward_at_its_next_submodule():
    """A failed build or Ctrl-C must not wait for a whole forward of a large model."""
    started = threading.Event()
    calls: list[str] = []

    class Block(torch.nn.Module):
        def forward(self, x):
            calls.append("block")
            started.set()
            return x

    class Deep(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList(Block() for _ in range(50))

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
                time.sleep(0.05)  # 2.5 s for the whole forward
            return x

    begin = time.monotonic()
    with TorchReference(Deep(), [(torch.ones(1),)], concurrent=True):
        started.wait(10)
    assert time.monotonic() - begin < 1.5
    assert len(calls) < 10
    assert not _workers()
    assert not torch.nn.modules.module._global_forward_pre_hooks  # the stop hook is gone


def test_thread_local_torch_state_keeps_the_forwards_on_the_callers_thread():
    """autocast, torch function modes (``with torch.device(...)``) and inference mode are
    thread-local: a worker's forward would not be the one the caller's thread runs."""
    exported = crossport.convert_with_report(RecordsThread().eval(), (torch.randn(1, 3, 8, 8),),
                                             check=False).exported
    assert can_run_beside(exported)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not can_run_beside(exported)
    with torch.device("cpu"):
        assert not can_run_beside(exported)
    with torch.inference_mode():
        assert not can_run_beside(exported)

"""The launchers' allocation and device guard (``mingru._launch._alloc``): outputs of the asked
shape, dtype and device, NaN-filled under the poison switch; the device switched only when the
input's GPU is not the current one."""

from __future__ import annotations

import contextlib

import pytest
import torch

from mingru._launch import _alloc
from mingru_kernels.launch import switches


@pytest.mark.parametrize("shape", [(), (5,), (2, 3, 4), torch.Size([3, 1, 2])])
@pytest.mark.parametrize("poison", [False, True])
def test_new_tensor_has_the_asked_shape_dtype_and_device(shape, poison):
    with switches.forced(poison=poison):
        x = _alloc.new_tensor(shape, torch.float16, torch.device("cpu"))
    assert x.shape == torch.Size(shape) and x.dtype == torch.float16 and x.device.type == "cpu"
    assert x.is_contiguous()
    if poison:
        assert torch.isnan(x).all()


class _FakeCuda:
    """Stands in for a CUDA tensor on GPU ``index`` (this machine may have none)."""

    is_cuda = True

    def __init__(self, index: int):
        self.index = index

    def get_device(self) -> int:
        return self.index


def test_device_guard_switches_only_to_another_gpu(monkeypatch):
    switched: list[int] = []

    @contextlib.contextmanager
    def fake_device(index):
        switched.append(index)
        yield

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "device", fake_device)
    with _alloc.device_guard(_FakeCuda(1)):
        pass
    assert switched == []
    with _alloc.device_guard(_FakeCuda(0)):
        pass
    assert switched == [0]
    with _alloc.device_guard(torch.zeros(1)):  # a host tensor: nothing to switch
        pass
    assert switched == [0]

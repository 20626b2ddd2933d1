# SPDX-License-Identifier: BSD-3-Clause
"""Fixtures shared by the kvcore binding tests: a CPU context, and `xp`, which runs a test once on
numpy arrays and once on torch tensors (skipped, saying why, when torch is not installed)."""
import numpy as np
import pytest

import kvcore

try:
    import torch
except ImportError:  # torch is optional: the torch half of each test skips
    torch = None


@pytest.fixture(scope="session")
def ctx():
    return kvcore.Context(backend="cpu")


class Numpy:
    name = "numpy"

    @staticmethod
    def asarray(a):
        return a

    @staticmethod
    def tonumpy(a):
        return a


class Torch:
    name = "torch"

    @staticmethod
    def asarray(a):
        a = np.ascontiguousarray(a)
        if a.dtype == np.uint16:  # torch has no uint16: LMCache's CDFs are int16 with the same bits
            a = a.view(np.int16)
        return torch.from_numpy(a)

    @staticmethod
    def tonumpy(t):
        return t.numpy()


@pytest.fixture(params=["numpy", "torch"])
def xp(request):
    if request.param == "torch":
        if torch is None:
            pytest.skip("torch is not installed (Debian: python3-torch)")
        return Torch
    return Numpy


def needs_torch():
    if torch is None:
        pytest.skip("torch is not installed (Debian: python3-torch)")
    return torch


def raises_status(name):
    """pytest.raises for a KvcoreError with this status name."""
    class _Ctx:
        def __enter__(self):
            self._r = pytest.raises(kvcore.KvcoreError)
            self.info = self._r.__enter__()
            return self.info

        def __exit__(self, *exc):
            ok = self._r.__exit__(*exc)
            assert self.info.value.name == name, f"status {self.info.value.name}, want {name}: {self.info.value}"
            return ok
    return _Ctx()


def shape_desc(**fields):
    """An LMCache PageBufferShapeDesc built as LMCache builds one: empty, then field by field."""
    import kvcore.lmcache_ops
    d = kvcore.lmcache_ops.PageBufferShapeDesc()
    for k, v in fields.items():
        setattr(d, k, v)
    return d

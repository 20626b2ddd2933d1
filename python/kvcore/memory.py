# SPDX-License-Identifier: BSD-3-Clause
"""Host and device memory: HostBuffer, DeviceBuffer, DeviceArray, allocation and copies."""
import ctypes as _C
import os
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import numpy as _np

from . import _abi
from ._array import count as _count, cstr as _cstr
from ._base import _c_array, Array, ContextBase, DirectionLike, Stream
from ._lib import check as _check, lib as _lib
from .errors import KvcoreError


class HostBuffer:
    """Host memory from kvc_mem_alloc. It is freed when the last reference to it is gone: every
    numpy array or torch tensor made from it (np.asarray(buf), buf.numpy(), buf.torch()) holds one,
    so no view can outlive the memory. The buffer also keeps its Context alive."""

    def __init__(self, ctx: ContextBase, ptr: int, size: int, report: Dict[str, Any]) -> None:
        self._ctx, self.ptr, self.size, self.report = ctx, ptr, size, report
        ctx._buffers.add(self)

    def __repr__(self) -> str:
        r = self.report
        what = ", ".join(w for w, on in (("pinned", r.get("pinned")), ("shared " + str(r.get("name")), r.get("name")),
                                         ("huge pages", r.get("huge_bytes"))) if on)
        return f"<kvcore.HostBuffer {self.size} bytes at {self.ptr:#x}{', ' + what if what else ''}>"

    @property
    def __array_interface__(self) -> Dict[str, Any]:
        return {"shape": (self.size,), "typestr": "|u1", "data": (self.ptr, False), "version": 3}

    def numpy(self, dtype: Any = _np.uint8, shape: Optional[Sequence[int]] = None) -> Any:
        """A numpy view of the buffer (dtype, then shape); it keeps the buffer alive."""
        a = _np.asarray(self).view(dtype)
        return a if shape is None else a.reshape(shape)

    def torch(self, dtype: Any = None, shape: Optional[Sequence[int]] = None) -> Any:
        """A torch CPU tensor over the buffer (dtype, then shape); it keeps the buffer alive."""
        import torch
        if dtype == torch.bfloat16:
            t = torch.from_numpy(self.numpy(_np.int16)).view(torch.bfloat16)
        else:
            t = torch.from_numpy(_np.asarray(self))
            if dtype is not None:
                t = t.view(dtype)
        return t if shape is None else t.view(shape)

    def query(self) -> Dict[str, Any]:
        """Fresh report of the allocation (page locations, hugepage use) as a dict."""
        r = _abi.MemReport()
        _check(_lib.kvc_mem_query(self._ctx._h, _C.c_void_p(self.ptr), _C.byref(r)))
        return _report_dict(r)

    def __del__(self) -> None:
        if self.ptr and self._ctx._h:
            _lib.kvc_mem_free(self._ctx._h, _C.c_void_p(self.ptr))
            self.ptr = 0


class DeviceBuffer:
    """Memory from kvc_device_alloc: on a GPU context device memory, described by
    __cuda_array_interface__ (the protocol torch, CuPy and Numba read, on ROCm too); on the CPU
    context plain host memory (__array_interface__). Freed when the last reference to it is gone;
    every view (view()) holds one. The buffer keeps its Context alive."""

    def __init__(self, ctx: ContextBase, ptr: int, size: int) -> None:
        self._ctx, self.ptr, self.size = ctx, ptr, size
        self._host = ctx.backend == "cpu"
        ctx._buffers.add(self)

    def _interface(self, typestr: str, shape: Tuple[int, ...]) -> Dict[str, Any]:
        return {"shape": shape, "typestr": typestr, "data": (self.ptr, False), "version": 3, "strides": None}

    def __getattr__(self, name: str) -> Dict[str, Any]:
        # exactly one of the two protocols, so nothing mistakes device memory for host memory
        if name == ("__array_interface__" if self._host else "__cuda_array_interface__"):
            return self._interface("|u1", (self.size,))
        raise AttributeError(name)

    def view(self, dtype: Any, shape: Optional[Sequence[int]] = None) -> "DeviceArray":
        """A typed array over the buffer (C order; shape defaults to 1-D over all of it)."""
        return DeviceArray(self, _np.dtype(dtype), shape)

    def __del__(self) -> None:
        if self.ptr and self._ctx._h:
            _lib.kvc_device_free(self._ctx._h, _C.c_void_p(self.ptr))
            self.ptr = 0


class DeviceArray:
    """A typed view of a DeviceBuffer, passed to kvcore (or torch.as_tensor, CuPy) like an array."""

    def __init__(self, buf: DeviceBuffer, dtype: Any, shape: Optional[Sequence[int]]) -> None:
        n = buf.size // dtype.itemsize
        shape = (n,) if shape is None else tuple(int(d) for d in shape)
        if any(d < 0 for d in shape):
            raise KvcoreError(_abi.KVC_ERR_SHAPE, f"view shape {list(shape)} has a negative dimension")
        need = dtype.itemsize
        for d in shape:
            need *= d
        if need > buf.size:
            raise KvcoreError(_abi.KVC_ERR_SHAPE, f"view of {need} bytes over a {buf.size}-byte device buffer")
        self._buf, self.dtype, self.shape = buf, dtype, shape

    def __getattr__(self, name: str) -> Dict[str, Any]:
        if name == ("__array_interface__" if self._buf._host else "__cuda_array_interface__"):
            return self._buf._interface(self.dtype.str, self.shape)
        raise AttributeError(name)


def _report_dict(r: Any) -> Dict[str, Any]:
    d = {}
    for name, _ in _abi.MemReport._fields_:
        v = getattr(r, name)
        if name == "location":
            v = {r.location[i].os_index: r.location[i].pages for i in range(min(r.location_count, 16))}
        elif isinstance(v, bytes):
            v = v.decode(errors="replace")
        d[name] = v
    return d


class MemoryOps(ContextBase):
    """kvcore.Context's host and device memory and copies (docs/MEMORY.md)."""

    def memcpy(self, dst: Array, src: Array, nbytes: Optional[int] = None) -> None:
        """Synchronous copy of nbytes (default: all of src) from array src into array dst."""
        d, s = self._arr(dst, "dst", True), self._arr(src, "src")
        n = s.nbytes if nbytes is None else _count(nbytes, "nbytes")
        if n > d.nbytes or n > s.nbytes:
            raise KvcoreError(_abi.KVC_ERR_NO_SPACE, f"copy of {n} bytes: dst has {d.nbytes}, src {s.nbytes}")
        _check(_lib.kvc_memcpy(self._handle(), _C.c_void_p(d.ptr), _C.c_void_p(s.ptr), n))

    def memcpy_async_ptr(self, dst: int, src: int, nbytes: int, direction: DirectionLike, host_offset: int,
                         host_alignment: int, stream: Stream = None) -> None:
        """LMCache's split copy on raw addresses (kvc_memcpy_async)."""
        _check(_lib.kvc_memcpy_async(self._handle(), _C.c_void_p(dst), _C.c_void_p(src), _count(nbytes, "nbytes"),
                                     int(direction), _count(host_offset, "host_buffer_offset"),
                                     _count(host_alignment, "host_buffer_alignment"), _C.c_void_p(stream or 0)))

    def batched_memcpy_ptr(self, dsts: Sequence[int], srcs: Sequence[int], sizes: Sequence[int],
                           stream: Stream = None) -> None:
        """count copies dsts[i] <- srcs[i] of sizes[i] bytes, on raw addresses."""
        if not len(dsts) == len(srcs) == len(sizes):
            raise KvcoreError(_abi.KVC_ERR_SHAPE, f"batched_memcpy: {len(dsts)} destinations, {len(srcs)} "
                                                  f"sources, {len(sizes)} sizes")
        n = len(sizes)
        sz = _c_array(_C.c_size_t, [_count(x, f"sizes[{i}]") for i, x in enumerate(sizes)])
        _check(_lib.kvc_batched_memcpy(self._handle(), _c_array(_C.c_void_p, [int(x) for x in dsts]),
                                       _c_array(_C.c_void_p, [int(x) for x in srcs]), sz, n, _C.c_void_p(stream or 0)))

    def alloc_host(self, size: int, pinned: bool = False, numa_node: Union[int, str, None] = None,
                   near_pci: Optional[str] = None, shared_name: Optional[str] = None, hugepage: bool = False,
                   strict: bool = False, touch: bool = True) -> HostBuffer:
        """Host memory (kvc_mem_alloc): plain, pinned, NUMA-bound (numa_node, or "local", or the node
        nearest PCI device near_pci), POSIX shared (shared_name "/name") and/or 2 MiB pages. Returns a
        HostBuffer; its memory lives as long as the buffer or any array view of it."""
        p = _abi.MemParams(field_mask=_abi.MEM_PARAM_KIND | _abi.MEM_PARAM_TOUCH | _abi.MEM_PARAM_POLICY,
                           touch=int(bool(touch)),
                           policy=_abi.MEM_POLICY_STRICT if strict else _abi.MEM_POLICY_PREFERRED)
        kind = _abi.MEM_PINNED if pinned else 0
        if hugepage:
            kind |= _abi.MEM_HUGEPAGE
        if numa_node is not None or near_pci is not None:
            kind |= _abi.MEM_NUMA
            p.field_mask |= _abi.MEM_PARAM_TARGET
            if near_pci is not None:
                p.target, p.pci_bus_id = _abi.MEM_TARGET_PCI, _cstr(near_pci, "near_pci")
            elif numa_node == "local":
                p.target = _abi.MEM_TARGET_LOCAL
            else:
                p.target, p.node = _abi.MEM_TARGET_NODE, int(numa_node)  # type: ignore[arg-type]  # not None here
        if shared_name is not None:
            kind |= _abi.MEM_SHARED
            p.field_mask |= _abi.MEM_PARAM_NAME
            p.name = _cstr(shared_name, "shared_name")
        p.kind = kind
        ptr, rep = _C.c_void_p(), _abi.MemReport()
        _check(_lib.kvc_mem_alloc(self._handle(), _count(size, "size"), _C.byref(p), _C.byref(ptr), _C.byref(rep)))
        return HostBuffer(self, ptr.value or 0, size, _report_dict(rep))

    def alloc_device(self, size: int) -> DeviceBuffer:
        """Device memory of this context's backend (kvc_device_alloc) as a DeviceBuffer."""
        ptr = _C.c_void_p()
        _check(_lib.kvc_device_alloc(self._handle(), size, _C.byref(ptr)))
        return DeviceBuffer(self, ptr.value or 0, size)

    def attach_shared(self, name: str, pinned: bool = False) -> HostBuffer:
        """Map a shared segment created by alloc_host(shared_name=...) (any process)."""
        ptr, size, rep = _C.c_void_p(), _C.c_size_t(), _abi.MemReport()
        _check(_lib.kvc_mem_attach(self._handle(), _cstr(name, "name"), _abi.MEM_PINNED if pinned else 0,
                                   _C.byref(ptr), _C.byref(size), _C.byref(rep)))
        return HostBuffer(self, ptr.value or 0, size.value, _report_dict(rep))

    def map_file(self, path: Union[str, "os.PathLike[str]"], size: int, offset: int = 0,
                 pinned: bool = False) -> HostBuffer:
        """Map size bytes at offset of a device's memory file (a PCIe BAR's sysfs resource file,
        kvc_mem_map_file) as a HostBuffer; pinned registers it with the backend as I/O memory."""
        ptr, rep = _C.c_void_p(), _abi.MemReport()
        _check(_lib.kvc_mem_map_file(self._handle(), _cstr(path, "path"), _count(size, "size"),
                                     _count(offset, "offset"), _abi.MEM_PINNED if pinned else 0, _C.byref(ptr),
                                     _C.byref(rep)))
        return HostBuffer(self, ptr.value or 0, size, _report_dict(rep))

    def live_allocations(self) -> int:
        """How many host allocations of this context are live (kvc_mem_live_count)."""
        return int(_lib.kvc_mem_live_count(self._handle()))

    def pci_bus_id(self, device: int = 0) -> str:
        """The PCI bus id (\"0000:3b:00.0\") of a device of this GPU context."""
        b = _C.create_string_buffer(32)
        _check(_lib.kvc_device_pci_bus_id(self._handle(), device, b, len(b)))
        return b.value.decode()

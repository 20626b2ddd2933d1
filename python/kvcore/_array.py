# SPDX-License-Identifier: BSD-3-Clause
"""Array inputs: numpy arrays, torch tensors, anything with __array_interface__,
__cuda_array_interface__ or DLPack, reduced to (pointer, shape, byte strides, kvcore dtype, device).
Nothing here copies: a kvcore call works on the caller's memory or refuses it."""
import ctypes
import os

from typing import Any, Dict, List, NoReturn, Optional, Sequence, Tuple, Union

import numpy as _np

from . import _abi
from ._lib import KvcoreError
from .errors import type_error

# numpy / __array_interface__ type strings (little-endian or byte-sized) -> kvc_dtype_t
_TYPESTR = {
    "<f2": _abi.DTYPE_F16, "<f4": _abi.DTYPE_F32, "<f8": _abi.DTYPE_F64, "|u1": _abi.DTYPE_U8,
    "|i1": _abi.DTYPE_I8, "<i2": _abi.DTYPE_I16, "<i4": _abi.DTYPE_I32, "<i8": _abi.DTYPE_I64,
    "<u2": _abi.DTYPE_U16, "<u4": _abi.DTYPE_U32, "<u8": _abi.DTYPE_U64, "|b1": _abi.DTYPE_BOOL,
}
_SIZE = {_abi.DTYPE_F16: 2, _abi.DTYPE_BF16: 2, _abi.DTYPE_F32: 4, _abi.DTYPE_F64: 8, _abi.DTYPE_U8: 1,
         _abi.DTYPE_I8: 1, _abi.DTYPE_I16: 2, _abi.DTYPE_I32: 4, _abi.DTYPE_I64: 8, _abi.DTYPE_U16: 2,
         _abi.DTYPE_U32: 4, _abi.DTYPE_U64: 8, _abi.DTYPE_BOOL: 1, _abi.DTYPE_F8_E4M3: 1,
         _abi.DTYPE_F8_E5M2: 1}
DTYPE_NAMES = {_abi.DTYPE_F16: "float16", _abi.DTYPE_BF16: "bfloat16", _abi.DTYPE_F32: "float32",
               _abi.DTYPE_F64: "float64", _abi.DTYPE_U8: "uint8", _abi.DTYPE_I8: "int8", _abi.DTYPE_I16: "int16",
               _abi.DTYPE_I32: "int32", _abi.DTYPE_I64: "int64", _abi.DTYPE_U16: "uint16",
               _abi.DTYPE_U32: "uint32", _abi.DTYPE_U64: "uint64", _abi.DTYPE_BOOL: "bool",
               _abi.DTYPE_F8_E4M3: "float8_e4m3fn", _abi.DTYPE_F8_E5M2: "float8_e5m2"}
# DLPack (code, bits) -> kvc_dtype_t
_DLPACK = {(0, 8): _abi.DTYPE_I8, (0, 16): _abi.DTYPE_I16, (0, 32): _abi.DTYPE_I32, (0, 64): _abi.DTYPE_I64,
           (1, 8): _abi.DTYPE_U8, (1, 16): _abi.DTYPE_U16, (1, 32): _abi.DTYPE_U32, (1, 64): _abi.DTYPE_U64,
           (2, 16): _abi.DTYPE_F16, (2, 32): _abi.DTYPE_F32, (2, 64): _abi.DTYPE_F64, (4, 16): _abi.DTYPE_BF16,
           (6, 8): _abi.DTYPE_BOOL}
_DLPACK_DEVICES = {1: "cpu", 3: "cpu", 2: "cuda", 10: "hip"}  # kDLCPU, kDLCUDAHost, kDLCUDA, kDLROCM


class Buf:
    """One array's memory as kvcore sees it; `keep` holds whatever keeps the memory alive."""
    __slots__ = ("ptr", "shape", "strides", "dtype", "device", "readonly", "keep", "name", "contig")
    ptr: int
    shape: Tuple[int, ...]
    strides: Tuple[int, ...]
    dtype: int
    device: Tuple[str, Optional[int]]
    readonly: bool
    keep: Any
    name: str
    contig: Optional[bool]

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return _SIZE[self.dtype]

    @property
    def size(self) -> int:
        """Elements."""
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        """Bytes of the elements (size x itemsize)."""
        return self.size * self.itemsize

    def contiguous(self) -> bool:
        """C order without gaps."""
        if self.contig is not None:
            return self.contig
        return dense(self.shape, self.strides, self.itemsize)


def dense(shape: Sequence[int], strides: Sequence[int], itemsize: int) -> bool:
    """Whether shape and byte strides are C order without gaps."""
    step = itemsize
    for d, s in zip(reversed(shape), reversed(strides)):
        if d != 1 and s != step:
            return False
        step *= d
    return True


def _fail(status: int, msg: str) -> NoReturn:
    raise KvcoreError(status, msg)


_TORCH_DTYPES: Optional[Dict[Any, int]] = None


def torch_dtypes() -> Dict[Any, int]:
    """torch dtype -> kvc_dtype_t, built on first use (torch is imported only when a tensor comes)."""
    global _TORCH_DTYPES
    if _TORCH_DTYPES is None:
        import torch
        table = {torch.float16: _abi.DTYPE_F16, torch.bfloat16: _abi.DTYPE_BF16, torch.float32: _abi.DTYPE_F32,
                 torch.float64: _abi.DTYPE_F64, torch.uint8: _abi.DTYPE_U8, torch.int8: _abi.DTYPE_I8,
                 torch.int16: _abi.DTYPE_I16, torch.int32: _abi.DTYPE_I32, torch.int64: _abi.DTYPE_I64,
                 torch.bool: _abi.DTYPE_BOOL}
        for attr, code in (("float8_e4m3fn", _abi.DTYPE_F8_E4M3), ("float8_e5m2", _abi.DTYPE_F8_E5M2),
                           ("uint16", _abi.DTYPE_U16), ("uint32", _abi.DTYPE_U32), ("uint64", _abi.DTYPE_U64)):
            if hasattr(torch, attr):
                table[getattr(torch, attr)] = code
        _TORCH_DTYPES = table
    return _TORCH_DTYPES


def _torch_dtype_code(t: Any, name: str) -> int:
    table = torch_dtypes()
    if t.dtype not in table:
        _fail(_abi.KVC_ERR_DTYPE, f"{name}: torch dtype {t.dtype} has no kvcore equivalent")
    return table[t.dtype]


def _from_interface(b: Buf, ai: Dict[str, Any], name: str, device: Tuple[str, Optional[int]]) -> Buf:
    typestr = ai["typestr"]
    if typestr not in _TYPESTR:
        _fail(_abi.KVC_ERR_DTYPE, f"{name}: element type {typestr!r} has no kvcore equivalent "
                                  "(little-endian numbers and bool only; bfloat16 through torch or DLPack)")
    b.dtype = _TYPESTR[typestr]
    b.shape = tuple(int(d) for d in ai["shape"])
    ptr, b.readonly = ai["data"] if ai.get("data") is not None else (0, False)
    b.ptr = int(ptr or 0)
    st = ai.get("strides")
    if st is None:
        st, step = [], _SIZE[b.dtype]
        for d in reversed(b.shape):
            st.insert(0, step)
            step *= d
    b.strides = tuple(int(s) for s in st)
    b.device = device
    return b


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


_capsule_ptr = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_ptr.restype, _capsule_ptr.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]


def _from_dlpack(b: Buf, obj: Any, name: str) -> Buf:
    cap = obj.__dlpack__()
    t = _DLTensor.from_address(_capsule_ptr(cap, b"dltensor"))  # DLManagedTensor starts with its DLTensor
    if (t.code, t.bits) not in _DLPACK or t.lanes != 1:
        _fail(_abi.KVC_ERR_DTYPE, f"{name}: DLPack type (code {t.code}, {t.bits} bits, {t.lanes} lanes) "
                                  "has no kvcore equivalent")
    b.dtype = _DLPACK[(t.code, t.bits)]
    b.shape = tuple(t.shape[i] for i in range(t.ndim))
    size = _SIZE[b.dtype]
    if t.strides:
        b.strides = tuple(t.strides[i] * size for i in range(t.ndim))
    else:
        st: List[int] = []
        step = size
        for d in reversed(b.shape):
            st.insert(0, step)
            step *= d
        b.strides = tuple(st)
    b.ptr = (t.data or 0) + t.byte_offset
    b.readonly = False
    b.device = (_DLPACK_DEVICES.get(t.device.device_type, f"dlpack:{t.device.device_type}"), t.device.device_id)
    b.keep = (obj, cap)  # the capsule's destructor releases the producer's tensor
    return b


NP_DTYPES = {_np.dtype(t): code for t, code in _TYPESTR.items()}
_CPU = ("cpu", 0)


def buf(obj: Any, name: str, writable: bool = False) -> Buf:
    """Describe obj's memory. Raises KvcoreError for anything that is not an array of a kvcore type."""
    b = Buf()
    b.name, b.keep, b.contig = name, obj, None
    if type(obj) is _np.ndarray:  # the common case, without building the interface dict's tuples
        code = NP_DTYPES.get(obj.dtype)
        if code is None:
            _fail(_abi.KVC_ERR_DTYPE, f"{name}: element type {obj.dtype.str!r} has no kvcore equivalent "
                                      "(little-endian numbers and bool only; bfloat16 through torch or DLPack)")
        flags = obj.flags
        b.dtype, b.shape, b.strides, b.device = code, obj.shape, obj.strides, _CPU
        b.ptr, b.readonly, b.contig = obj.__array_interface__["data"][0], not flags.writeable, flags.c_contiguous
    elif hasattr(obj, "data_ptr") and hasattr(obj, "stride") and type(obj).__module__.startswith("torch"):
        b.dtype = _torch_dtype_code(obj, name)
        b.ptr = obj.data_ptr()
        b.shape = tuple(obj.shape)
        b.strides = tuple(s * obj.element_size() for s in obj.stride())
        b.readonly = False
        b.contig = obj.is_contiguous()
        dev = obj.device
        b.device = _CPU if dev.type == "cpu" else (dev.type, dev.index or 0)
    elif hasattr(obj, "__cuda_array_interface__"):
        _from_interface(b, obj.__cuda_array_interface__, name, ("cuda", None))
    elif hasattr(obj, "__array_interface__"):
        _from_interface(b, obj.__array_interface__, name, ("cpu", 0))
    elif hasattr(obj, "__dlpack__"):
        _from_dlpack(b, obj, name)
    else:
        raise type_error(f"{name}: expected an array (numpy, torch, __array_interface__, "
                         f"__cuda_array_interface__ or DLPack), got {type(obj).__name__}")
    if writable and b.readonly:
        _fail(_abi.KVC_ERR_INVALID_ARG, f"{name}: the array is read-only and this call writes it")
    if any(d < 0 for d in b.shape):  # only a hand-made interface can say so; nbytes would go negative
        _fail(_abi.KVC_ERR_SHAPE, f"{name}: negative dimension in shape {list(b.shape)}")
    return b


def require(b: Buf, dtypes: Union[int, Sequence[int], None] = None, ndim: Union[int, Sequence[int], None] = None,
            shape: Optional[Sequence[Optional[int]]] = None, contiguous: bool = True) -> Buf:
    """Check one Buf: kvcore dtype codes, rank, exact shape (None entries match anything), C order."""
    if dtypes is not None:
        if isinstance(dtypes, int):
            dtypes = (dtypes,)
        if b.dtype not in dtypes:
            want = " or ".join(DTYPE_NAMES[d] for d in dtypes)
            _fail(_abi.KVC_ERR_DTYPE, f"{b.name}: dtype {DTYPE_NAMES[b.dtype]}, expected {want}")
    if ndim is not None and len(b.shape) not in ((ndim,) if isinstance(ndim, int) else ndim):
        _fail(_abi.KVC_ERR_SHAPE, f"{b.name}: {len(b.shape)} dimensions {b.shape}, expected {ndim}")
    if shape is not None:
        if len(shape) != len(b.shape) or any(w is not None and w != d for w, d in zip(shape, b.shape)):
            want = "[" + ", ".join("*" if w is None else str(w) for w in shape) + "]"
            _fail(_abi.KVC_ERR_SHAPE, f"{b.name}: shape {list(b.shape)}, expected {want}")
    if contiguous and not b.contiguous():
        _fail(_abi.KVC_ERR_SHAPE, f"{b.name}: not C-contiguous (shape {list(b.shape)}, byte strides "
                                  f"{list(b.strides)}); pass .contiguous() / np.ascontiguousarray()")
    return b


# ---------------------------------------------------------------- bounds
# ctypes wraps a negative int silently into a size_t (-1 becomes SIZE_MAX) and cuts a char* at its
# first NUL: every size and name from the caller passes through these before it reaches C.
_PTRDIFF_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_size_t) - 1)) - 1


def count(v: Any, name: str, limit: int = _PTRDIFF_MAX) -> int:
    """A size, count or offset for a C size_t: an integer in [0, limit], else KVC_ERR_INVALID_ARG."""
    try:
        i = v.__index__()
    except (AttributeError, TypeError, ValueError, RuntimeError):
        _fail(_abi.KVC_ERR_INVALID_ARG, f"{name}: {type(v).__name__}, expected an integer")
    if i < 0:
        _fail(_abi.KVC_ERR_INVALID_ARG, f"{name} {i} is negative")
    if i > limit:
        _fail(_abi.KVC_ERR_INVALID_ARG, f"{name} {i} is larger than {limit}")
    return int(i)


def cstr(s: Union[str, bytes, "os.PathLike[str]"], name: str) -> bytes:
    """A str/bytes/path argument as C bytes; an embedded NUL is refused (C would stop reading there)."""
    b = s if isinstance(s, bytes) else (s.encode() if isinstance(s, str) else os.fsencode(s))
    if b"\0" in b:
        _fail(_abi.KVC_ERR_INVALID_ARG, f"{name} {s!r} contains a NUL character")
    return b


def span(b: Buf) -> Tuple[int, int]:
    """[lo, hi): the bytes b's shape and strides reach, relative to b.ptr ((0, 0) when empty)."""
    if any(d == 0 for d in b.shape):
        return 0, 0
    lo, hi = 0, b.itemsize
    for d, s in zip(b.shape, b.strides):
        if s < 0:
            lo += (d - 1) * s
        else:
            hi += (d - 1) * s
    return lo, hi


def require_reach(b: Buf, lo: int, hi: int, what: str) -> None:
    """A kernel reaches bytes [lo, hi) relative to b.ptr: refuse (KVC_ERR_SHAPE) anything outside
    the bytes b itself covers."""
    blo, bhi = span(b)
    if hi > lo and (lo < blo or hi > bhi):
        _fail(_abi.KVC_ERR_SHAPE, f"{b.name}: {what} reaches bytes [{lo}, {hi}) from the first element, the "
                                  f"array (shape {list(b.shape)}, byte strides {list(b.strides)}) covers "
                                  f"[{blo}, {bhi})")


def require_distinct(b: Buf) -> Buf:
    """A written array's elements must be distinct memory: a zero or negative stride on a dimension
    longer than 1 (torch expand(), numpy as_strided/broadcast_to, reversed views) is KVC_ERR_SHAPE."""
    for i, (d, s) in enumerate(zip(b.shape, b.strides)):
        if d > 1 and s <= 0:
            _fail(_abi.KVC_ERR_SHAPE, f"{b.name}: dimension {i} has byte stride {s} (shape {list(b.shape)}); "
                                      "an array that is written needs positive strides")
    return b

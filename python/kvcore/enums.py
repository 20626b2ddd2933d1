# SPDX-License-Identifier: BSD-3-Clause
"""kvcore's enumerations as IntEnums: engine formats, directions, element types, key scaling, RoPE
styles and chunk layouts. Each is an int (so it goes wherever the C value goes and compares equal
to it), prints its name, and is accepted where kvcore takes one as the member, its int value or its
name as a string, any case ("D2H", "d2h", "NL_X_TWO_NB_BS_NH_HS", "float16", "token")."""
import enum as _enum
from typing import Any, Optional, Type, TypeVar, Union

import numpy as _np

from . import _abi
from .errors import KvcoreError, type_error

_E = TypeVar("_E", bound="_KvcEnum")


class _KvcEnum(_enum.IntEnum):
    """An IntEnum that prints its name and is built from its value or its name (any case)."""

    def __str__(self) -> str:
        return self.name

    def __format__(self, spec: str) -> str:
        return format(int(self), spec) if spec else self.name

    @classmethod
    def _missing_(cls, value: object) -> Optional["_KvcEnum"]:
        if isinstance(value, str):
            key = value.strip().upper().replace("-", "_")
            for m in cls:
                if m.name == key or key in getattr(m, "_aliases", ()):
                    return m
        return None

    @classmethod
    def coerce(cls: Type[_E], value: Union[int, str, "_KvcEnum"], what: str = "") -> _E:
        """cls(value), or a KvcoreError (ValueError; TypeError for another type) naming the choices."""
        what = what or cls.__name__
        if not isinstance(value, (int, str)) or isinstance(value, bool):
            raise type_error(f"{what}: {type(value).__name__} {value!r}, expected one of {cls._choices()}")
        try:
            return cls(value)  # type: ignore[arg-type]  # names: _missing_
        except ValueError:
            raise KvcoreError(_abi.KVC_ERR_INVALID_ARG if cls is not Format else _abi.KVC_ERR_FORMAT,
                              f"{what}: {value!r} is not one of {cls._choices()}") from None

    @classmethod
    def _choices(cls) -> str:
        return ", ".join(f"{m.name} ({int(m)})" for m in cls)


class Direction(_KvcEnum):
    """A transfer's direction: H2D (chunk -> engine, "store back") or D2H (engine -> chunk)."""
    H2D = _abi.H2D
    D2H = _abi.D2H


class Format(_KvcEnum):
    """LMCache's EngineKVFormat: how an engine lays out its paged KV cache (docs/TRANSFER.md).
    `NL_X_TWO_X_NB_BS_HS` is LMCache's earlier name of 17 (an alias)."""
    NB_NL_TWO_BS_NH_HS = 0
    NL_X_TWO_NB_BS_NH_HS = 1
    NL_X_NB_TWO_BS_NH_HS = 2
    NL_X_NB_BS_HS = 3
    TWO_X_NL_X_NBBS_NH_HS = 4
    NL_X_NBBS_ONE_HS = 5
    NL_X_TWO_NB_NH_BS_HS = 6
    NL_X_NB_TWO_NH_BS_HS = 7
    NB_NL_TWO_NH_BS_HS = 8
    TWO_X_NL_X_NB_BS_NH_HS = 9
    NL_X_NB_NH_BS_TWO_HS = 10
    NL_X_NB_BS_NH_TWO_HS = 11
    NL_X_NB_NH_BS_CS = 12
    NL_X_NB_BS_NH_CS = 13
    NL_X_NB_BSV_BSS = 14
    NL_X_TWO_NB_NH_ONE_BS_HS = 15
    NL_X_TWO_X_NB_BS_NH_HS = 16
    NL_X_NP_X_NB_BS_ONE_HS = 17
    NL_X_TWO_X_NB_BS_HS = 17


class DType(_KvcEnum):
    """kvc_dtype_t: kvcore's element types. Also built from "float16"-style names, a numpy dtype or a
    torch dtype (DType.of)."""
    F16 = _abi.DTYPE_F16
    BF16 = _abi.DTYPE_BF16
    F32 = _abi.DTYPE_F32
    F64 = _abi.DTYPE_F64
    U8 = _abi.DTYPE_U8
    I8 = _abi.DTYPE_I8
    I16 = _abi.DTYPE_I16
    I32 = _abi.DTYPE_I32
    I64 = _abi.DTYPE_I64
    U16 = _abi.DTYPE_U16
    U32 = _abi.DTYPE_U32
    U64 = _abi.DTYPE_U64
    BOOL = _abi.DTYPE_BOOL
    F8_E4M3 = _abi.DTYPE_F8_E4M3
    F8_E5M2 = _abi.DTYPE_F8_E5M2

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return _ITEMSIZE[self]

    @classmethod
    def of(cls, dtype: Any) -> "DType":
        """The DType of a numpy or torch dtype (or of an array/tensor's .dtype), or of a name."""
        if isinstance(dtype, (int, str)):
            return cls.coerce(dtype, "dtype")
        if not type(dtype).__module__.startswith("torch"):
            try:
                inner = getattr(dtype, "dtype", None)  # an array's (a numpy scalar type's is a descriptor)
                dtype = _np.dtype(inner if isinstance(inner, _np.dtype) else dtype)
            except TypeError:
                pass
        else:
            dtype = getattr(dtype, "dtype", dtype)
        name = str(dtype).replace("torch.", "")
        try:
            return cls(name)  # type: ignore[arg-type]  # names: _missing_
        except ValueError:
            raise KvcoreError(_abi.KVC_ERR_DTYPE, f"dtype {dtype} has no kvcore equivalent") from None


_ITEMSIZE = {DType.F16: 2, DType.BF16: 2, DType.F32: 4, DType.F64: 8, DType.U8: 1, DType.I8: 1, DType.I16: 2,
             DType.I32: 4, DType.I64: 8, DType.U16: 2, DType.U32: 4, DType.U64: 8, DType.BOOL: 1,
             DType.F8_E4M3: 1, DType.F8_E5M2: 1}
# numpy / torch spellings of each type ("float16", "float8_e4m3fn", ...)
for _m, _names in ((DType.F16, ("FLOAT16", "HALF")), (DType.BF16, ("BFLOAT16",)), (DType.F32, ("FLOAT32", "FLOAT")),
                   (DType.F64, ("FLOAT64", "DOUBLE")), (DType.U8, ("UINT8",)), (DType.I8, ("INT8",)),
                   (DType.I16, ("INT16", "SHORT")), (DType.I32, ("INT32", "INT")), (DType.I64, ("INT64", "LONG")),
                   (DType.U16, ("UINT16",)), (DType.U32, ("UINT32",)), (DType.U64, ("UINT64",)),
                   (DType.F8_E4M3, ("FLOAT8_E4M3FN",)), (DType.F8_E5M2, ("FLOAT8_E5M2",))):
    _m._aliases = _names  # type: ignore[attr-defined]


class KeyScaling(_KvcEnum):
    """How the codec scales keys before quantisation: TOKEN (LMCache's, the default) or CHANNEL
    (per-channel max-abs; container format 1.1, not LMCache-readable)."""
    TOKEN = _abi.CODEC_SCALE_TOKEN
    CHANNEL = _abi.CODEC_SCALE_CHANNEL


class RopeStyle(_KvcEnum):
    """Rotary embedding pairing: NEOX (halves) or GPTJ (interleaved pairs)."""
    NEOX = _abi.ROPE_NEOX
    GPTJ = _abi.ROPE_GPTJ


class ChunkLayout(_KvcEnum):
    """How a transfer's chunk is laid out (kvc_chunk_layout_t, docs/TRANSFER.md)."""
    DEFAULT = _abi.CHUNK_DEFAULT
    SPLIT_KV = _abi.CHUNK_SPLIT_KV
    FUSED_PACKED = _abi.CHUNK_FUSED_PACKED
    INTERLEAVED_KV = _abi.CHUNK_INTERLEAVED_KV

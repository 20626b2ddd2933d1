# SPDX-License-Identifier: BSD-3-Clause
"""RoPE: re-rotating cached keys to new positions, and the cos/sin table."""
import ctypes as _C
from typing import Any, Optional, Tuple

import numpy as _np

from . import _abi
from ._array import count as _count, require_distinct as _distinct, require_reach as _reach
from ._base import _FLOATS, Array, ContextBase, Index, Stream
from ._lib import check as _check, lib as _lib
from .enums import RopeStyle
from .errors import KvcoreError


def _heads_in_view(k: Any, nkv: int, hs: int, hstride: int) -> None:
    """An explicit head_size / head_stride must address elements of the key view, not the gaps
    between a strided view's heads (inside its extent, but the caller's other data)."""
    w, vst = k.shape[-1], k.strides[-2] // k.itemsize
    if nkv > 1 and vst > w:  # gaps between the view's heads: each head written lies in one of them
        bad = [h for h in range(nkv) if h * hstride // vst >= nkv or
               h * hstride + hs > h * hstride // vst * vst + w]
    else:  # dense heads (or one): a token's elements are [0, (nkv - 1) * vst + w)
        bad = [nkv - 1] if (nkv - 1) * hstride + hs > (nkv - 1) * vst + w else []
    if bad:
        raise KvcoreError(_abi.KVC_ERR_SHAPE, f"key: head {bad[0]} of {hs} elements at head stride {hstride} "
                                              f"falls outside the key's heads (shape {list(k.shape)}, element "
                                              f"strides {[st // k.itemsize for st in k.strides]})")


class RopeOps(ContextBase):
    """kvcore.Context's RoPE re-rotation of cached keys (docs/ROPE.md)."""

    def _keys(self, key: Array, head_size: Optional[int], head_stride: Optional[int]) -> Tuple[Any, Any]:
        k = _distinct(self._arr(key, "key", True, dtypes=_FLOATS, contiguous=False))
        if len(k.shape) < 2:
            raise KvcoreError(_abi.KVC_ERR_SHAPE, f"key: shape {list(k.shape)}, expected [..., NKV, HS]")
        es = k.itemsize
        if any(d > 1 and st % es for d, st in zip(k.shape, k.strides)):
            raise KvcoreError(_abi.KVC_ERR_SHAPE, f"key: byte strides {list(k.strides)} are not multiples of the "
                                                  f"element size {es}")
        nkv = k.shape[-2]
        hs = k.shape[-1] if head_size is None else _count(head_size, "head_size")
        if nkv == 1:  # a dimension of length 1 has no meaningful stride
            hstride = hs if head_stride is None else max(_count(head_stride, "head_stride"), hs)
        else:  # 0 would mean "head_size" to the C core, not the stride asked for
            hstride = k.strides[-2] // es if head_stride is None else _count(head_stride, "head_stride")
            if hstride == 0:
                raise KvcoreError(_abi.KVC_ERR_SHAPE, f"key: head_stride 0 with {nkv} heads; heads that are "
                                                      "written need a positive stride")
        if k.strides[-1] != es and k.shape[-1] > 1:
            raise KvcoreError(_abi.KVC_ERR_SHAPE, "key: the last dimension must be contiguous")
        if head_size is not None or head_stride is not None:
            _heads_in_view(k, nkv, hs, hstride)
        n = 1
        for d in k.shape[:-2]:
            n *= d
        lead = [(d, st) for d, st in zip(k.shape[:-2], k.strides[:-2]) if d > 1]
        tstride = lead[-1][1] // es if lead else nkv * hstride
        for (d0, s0), (d1, s1) in zip(lead, lead[1:]):  # leading dimensions fold into tokens only when dense
            if s0 != s1 * d1:
                raise KvcoreError(_abi.KVC_ERR_SHAPE, f"key: dimensions before [NKV, HS] must fold into one "
                                                      f"(strides {list(k.strides)})")
        if n and nkv and hs:  # the kernel's last element: token n-1, head nkv-1, element hs-1
            _reach(k, 0, ((n - 1) * tstride + (nkv - 1) * hstride + hs) * es,
                   f"{n} token(s) x {nkv} head(s) of {hs} elements (head stride {hstride}, token stride {tstride})")
        return _abi.RopeKeys(data=k.ptr, dtype=k.dtype, num_tokens=n, num_heads=nkv, head_size=hs,
                             head_stride=hstride, token_stride=tstride), k

    def rope_k_fused(self, key: Array, old_positions: Index, new_positions: Index, cos_sin_cache: Array,
                     is_neox: bool = True, head_size: Optional[int] = None, head_stride: Optional[int] = None,
                     stream: Stream = None) -> None:
        """Re-rotate keys [..., NKV, HS] in place from old to new positions (int64 [N]) through a
        cos/sin table [max_position, rot_dim] (key dtype or float32)."""
        keys, k = self._keys(key, head_size, head_stride)
        old = self._index(old_positions, "old_positions", keys.num_tokens)
        new = self._index(new_positions, "new_positions", keys.num_tokens)
        tb = self._arr(cos_sin_cache, "cos_sin_cache", dtypes=_FLOATS, ndim=2)
        table = _abi.RopeTable(data=tb.ptr, dtype=tb.dtype, max_position=tb.shape[0], rot_dim=tb.shape[1])
        _check(_lib.kvc_rope_k_fused(self._handle(), self._stream(stream, key), _C.byref(keys), _C.c_void_p(old.ptr),
                                     _C.c_void_p(new.ptr), _C.byref(table), _rope_params(is_neox)))

    def rope_k_delta(self, key: Array, old_positions: Index, new_positions: Index, rot_dim: int, base: float,
                     is_neox: bool = True, head_stride: Optional[int] = None, stream: Stream = None) -> None:
        """Table-free re-rotation by (new - old) positions."""
        keys, k = self._keys(key, None, head_stride)
        old = self._index(old_positions, "old_positions", keys.num_tokens)
        new = self._index(new_positions, "new_positions", keys.num_tokens)
        _check(_lib.kvc_rope_k_delta(self._handle(), self._stream(stream, key), _C.byref(keys), _C.c_void_p(old.ptr),
                                     _C.c_void_p(new.ptr), rot_dim, float(base), _rope_params(is_neox)))

    def rope_cache_build(self, max_position: int, rot_dim: int, base: float, dtype: Any = _np.float32,
                         out: Optional[Array] = None) -> Any:
        """vLLM's cos/sin table [max_position, rot_dim] for `base`."""
        o = _np.empty((max_position, rot_dim), dtype) if out is None else out
        tb = self._arr(o, "out", True, dtypes=_FLOATS, ndim=2)
        table = _abi.RopeTable(data=tb.ptr, dtype=tb.dtype, max_position=tb.shape[0], rot_dim=tb.shape[1])
        _check(_lib.kvc_rope_cache_build(self._handle(), None, _C.byref(table), float(base)))
        return o


def _rope_params(is_neox: bool) -> Any:
    return _C.byref(_abi.RopeParams(_abi.ROPE_PARAM_STYLE, RopeStyle.NEOX if is_neox else RopeStyle.GPTJ))

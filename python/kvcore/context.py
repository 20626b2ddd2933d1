# SPDX-License-Identifier: BSD-3-Clause
"""kvcore.Context: one library context with every op (the topic classes combined), recorders."""
import ctypes as _C
from typing import Any, Dict, List, Optional, Tuple

from . import _abi
from ._array import cstr as _cstr
from ._base import ContextBase, Stream
from ._codec_ops import CodecOps
from ._lib import check as _check, lib as _lib
from .errors import KvcoreError
from .memory import MemoryOps
from .rope import RopeOps
from .transfer import TransferOps


def status_name(status: int) -> str:
    """The enum name of a kvc_status_t value (\"KVC_ERR_SHAPE\")."""
    return str(_lib.kvc_status_name(status).decode())


def recorder_now() -> float:
    """The recorders' clock: monotonic Unix-epoch seconds."""
    return float(_lib.kvc_recorder_now())


class Context(TransferOps, CodecOps, RopeOps, MemoryOps, ContextBase):
    """A kvcore context: the backend ("auto", "cpu", "cuda", "hip"), its device, CPU threads and an
    ISA cap ("scalar", "avx2", "avx512", "neon", "best"). Every op is a method of a context."""

    def record_completion(self, kind: str, payload: bytes = b"", stream: Stream = None) -> None:
        """Record a completion of `kind` with an optional payload, in stream order (docs/RECORDERS.md);
        drain_completions() returns them."""
        p = bytes(payload)
        _check(_lib.kvc_record_completion(self._handle(), _C.c_void_p(stream or 0), _cstr(kind, "kind"), p or None,
                                          len(p)))

    def drain_completions(self) -> List[Tuple[str, bytes]]:
        """Every completion recorded so far, in order: [(kind: str, payload: bytes)]."""
        recs, n = _C.POINTER(_abi.CompletionRecord)(), _C.c_size_t()
        _check(_lib.kvc_drain_completions(self._handle(), _C.byref(recs), _C.byref(n)))
        try:
            return [(recs[i].kind.decode(), _C.string_at(recs[i].payload, recs[i].payload_len)
                     if recs[i].payload_len else b"") for i in range(n.value)]
        finally:
            _lib.kvc_completion_records_free(recs, n.value)

    def record_event(self, name: str, session_id: str, str_meta: Optional[Dict[str, Any]] = None,
                     int_meta: Optional[Dict[str, int]] = None, stream: Stream = None) -> None:
        """Record a named event of a session with string and integer metadata, timestamped with
        recorder_now() (docs/RECORDERS.md); drain_events() returns them."""
        sm = list((str_meta or {}).items())
        im = list((int_meta or {}).items())
        sarr = (_abi.StrMeta * len(sm))(*[_abi.StrMeta(_cstr(str(k), "str_meta key"), _cstr(str(v), "str_meta value"))
                                          for k, v in sm])
        for k, v in im:
            if not isinstance(v, int):
                raise KvcoreError(_abi.KVC_ERR_INVALID_ARG, f"int_meta[{k!r}]: {type(v).__name__}, expected int")
        iarr = (_abi.IntMeta * len(im))(*[_abi.IntMeta(_cstr(str(k), "int_meta key"), v) for k, v in im])
        _check(_lib.kvc_record_event(self._handle(), _C.c_void_p(stream or 0), _cstr(name, "name"),
                                     _cstr(session_id, "session_id"), sarr if sm else None, len(sm),
                                     iarr if im else None, len(im)))

    def drain_events(self) -> List[Tuple[str, str, float, Dict[str, str], Dict[str, int]]]:
        """[(name, session_id, timestamp, {str: str}, {str: int})] in record order."""
        recs, n = _C.POINTER(_abi.EventRecord)(), _C.c_size_t()
        _check(_lib.kvc_drain_events(self._handle(), _C.byref(recs), _C.byref(n)))
        try:
            out = []
            for i in range(n.value):
                r = recs[i]
                out.append((r.name.decode(), r.session_id.decode(), r.timestamp,
                            {r.str_meta[j].key.decode(): r.str_meta[j].value.decode() for j in range(r.num_str_meta)},
                            {r.int_meta[j].key.decode(): r.int_meta[j].value for j in range(r.num_int_meta)}))
            return out
        finally:
            _lib.kvc_event_records_free(recs, n.value)

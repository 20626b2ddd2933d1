# SPDX-License-Identifier: BSD-3-Clause
"""Context options and failures."""
import os

import kvcore
from conftest import raises_status


def test_options():
    c = kvcore.Context(backend="cpu", num_threads=1, isa="scalar")
    assert (c.backend, c.num_threads, c.isa) == ("cpu", 1, "scalar")
    assert "KVCORE_ISA" not in os.environ or os.environ["KVCORE_ISA"] != "scalar"  # restored
    assert kvcore.Context(backend="cpu", isa="best").isa in ("scalar", "avx2", "avx512", "neon")


def test_unknown_backend():
    with raises_status("KVC_ERR_INVALID_ARG") as info:
        kvcore.Context(backend="nope")
    assert "nope" in info.value.message


def test_forced_gpu_backend_without_module(tmp_path):
    # an explicit backend that cannot start is an error, never a silent CPU fallback
    with raises_status("KVC_ERR_NOT_FOUND"):
        kvcore.Context(backend="cuda", module_path=str(tmp_path))


def test_status_names():
    assert kvcore.status_name(-17) == "KVC_ERR_DTYPE"
    assert kvcore.format_name(12) == "NL_X_NB_NH_BS_CS"
    assert kvcore.format_ptr_count(4, 32) == 64

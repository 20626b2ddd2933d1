# SPDX-License-Identifier: BSD-3-Clause
"""The ctypes mirror (kvcore._abi) against the compiled headers: every struct's size, every field's
offset and size, every constant's value, as printed by tests/harness/python_abi (built by make check)."""
import ctypes
import os
import subprocess

import pytest

from kvcore import _abi


@pytest.fixture(scope="module")
def probe():
    exe = os.environ.get("KVC_ABI_PROBE")
    if not exe:
        pytest.skip("KVC_ABI_PROBE is not set (make check builds tests/harness/python_abi and sets it)")
    out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    structs, fields, consts = {}, {}, {}
    for line in out.splitlines():
        kind, name, *vals = line.split()
        {"struct": structs, "field": fields, "const": consts}[kind][name] = tuple(int(v) for v in vals)
    return structs, fields, consts


def test_struct_sizes(probe):
    structs, _, _ = probe
    assert set(structs) == set(_abi.STRUCTS)
    for name, cls in _abi.STRUCTS.items():
        assert ctypes.sizeof(cls) == structs[name][0], name


def test_field_offsets(probe):
    _, fields, _ = probe
    seen = set()
    for name, cls in _abi.STRUCTS.items():
        for fname, ftype in cls._fields_:
            key = f"{name}.{fname}"
            seen.add(key)
            assert key in fields, f"{key} is not printed by tests/harness/python_abi.c"
            assert (getattr(cls, fname).offset, ctypes.sizeof(ftype)) == fields[key], key
    assert seen == set(fields)


def test_constants(probe):
    _, _, consts = probe
    assert set(consts) == set(_abi.CONSTANTS)
    for name, value in _abi.CONSTANTS.items():
        assert consts[name] == (value,), name


def test_status_table_is_complete():
    # every status the library can name is mirrored
    lib = __import__("kvcore")._lib
    for v in range(0, -40, -1):
        name = lib.kvc_status_name(v).decode()
        assert (name == "KVC_UNKNOWN") == (v not in _abi.STATUS), v

# SPDX-License-Identifier: BSD-3-Clause
"""The README's Python example runs as written."""
import contextlib
import io
import os
import re

import pytest

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")


def test_readme_example():
    text = open(README).read()
    m = re.search(r"<!-- python-example -->\n```python\n(.*?)```", text, re.S)
    assert m, "README.md has no <!-- python-example --> block"
    code = m.group(1)
    assert len(code.strip().splitlines()) == 4
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    nbytes, blob, err = re.match(r"(\d+) -> (\d+) bytes, max error ([0-9.]+)", out.getvalue()).groups()
    assert int(nbytes) == 2 * 4 * 256 * 1024 * 2 and int(blob) < int(nbytes) / 2.5 and float(err) < 0.5

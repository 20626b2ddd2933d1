# SPDX-License-Identifier: BSD-3-Clause
"""Where LMCache's snapshot is (KVC_LMCACHE_DIR, set by tests/lmcache/run.sh) and its commit."""
import os
import re

import pytest


@pytest.fixture(scope="session")
def lmcache_dir():
    return os.environ["KVC_LMCACHE_DIR"]


@pytest.fixture(scope="session")
def lmcache_commit(lmcache_dir):
    with open(os.path.join(lmcache_dir, "README.md")) as f:
        m = re.search(r"Commit: `([0-9a-f]{40})`", f.read())
    assert m, "the LMCache snapshot's README.md names no commit"
    return m.group(1)

# SPDX-License-Identifier: BSD-3-Clause
"""`python3 -m kvcore.lmcache install`: the .pth hook that makes an unmodified LMCache use kvcore's
ops, on a stand-in `lmcache` package that behaves as LMCache's __init__ does (it installs its own
fallback as sys.modules["lmcache.c_ops"], and a submodule binds `import lmcache.c_ops as lmc_ops`).
LMCache itself runs on kvcore through the same hook in tests/lmcache (its serde, its test suite)."""
import os
import subprocess
import sys
import textwrap

import pytest

INIT = '''
import sys, types
fallback = types.ModuleType("lmcache.python_ops_fallback")
def multi_layer_kv_transfer(*a): return "fallback"
def op_kvcore_lacks(): return "fallback"
multi_layer_kv_transfer.__module__ = op_kvcore_lacks.__module__ = fallback.__name__
fallback.multi_layer_kv_transfer, fallback.op_kvcore_lacks = multi_layer_kv_transfer, op_kvcore_lacks
sys.modules["lmcache.c_ops"] = fallback  # what LMCache's __init__ does on a host without CUDA
'''
SUB = "import lmcache.c_ops as lmc_ops\nfrom lmcache.c_ops import multi_layer_kv_transfer\n"
CHECK = ("import sys, lmcache, lmcache.sub as s; c = sys.modules['lmcache.c_ops']; "
         "print(getattr(c, '__kvcore__', False), s.lmc_ops is c, getattr(lmcache, 'c_ops', None) is c, "
         "s.multi_layer_kv_transfer.__module__, c.op_kvcore_lacks())")


@pytest.fixture
def env(tmp_path):
    pkg = tmp_path / "src" / "lmcache"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(INIT)
    (pkg / "sub.py").write_text(SUB)
    e = dict(os.environ, PYTHONUSERBASE=str(tmp_path / "userbase"),
             PYTHONPATH=os.pathsep.join([str(tmp_path / "src"), os.environ.get("PYTHONPATH", "")]))
    e.pop("KVCORE_LMCACHE", None)
    return e


def py(env, *args, **kw):
    return subprocess.run([sys.executable, *args], env=dict(env, **kw), capture_output=True, text=True, timeout=120)


def test_install_then_lmcache_uses_kvcore(env):
    r = py(env, "-m", "kvcore.lmcache", "install", "--user")
    assert r.returncode == 0, r.stderr
    assert "kvcore-lmcache.pth" in r.stdout
    r = py(env, "-c", "import sys; print('kvcore' in sys.modules, 'lmcache' in sys.modules)")
    assert r.stdout.split() == ["False", "False"], "the hook loads nothing before LMCache is imported"
    r = py(env, "-c", CHECK)
    assert r.returncode == 0, r.stderr
    # kvcore's op everywhere LMCache looks, and an op kvcore lacks is still LMCache's
    assert r.stdout.split() == ["True", "True", "True", "kvcore.lmcache_ops", "fallback"], r.stdout + r.stderr
    log = [line for line in r.stderr.splitlines() if "kvcore" in line]
    assert len(log) == 1 and "lmcache.c_ops = kvcore.lmcache_ops" in log[0] and "op_kvcore_lacks" in log[0], r.stderr
    r = py(env, "-m", "kvcore.lmcache", "status")
    assert "kvcore-lmcache.pth" in r.stdout and "lmcache.c_ops is kvcore.lmcache_ops" in r.stdout, r.stdout
    r = py(env, "-c", CHECK, KVCORE_LMCACHE="0")  # off for one run
    assert r.stdout.split()[0] == "False", r.stdout
    r = py(env, "-m", "kvcore.lmcache", "uninstall", "--user")
    assert r.returncode == 0 and "removed" in r.stdout, r.stderr
    assert py(env, "-c", CHECK).stdout.split()[0] == "False"
    r = py(env, "-m", "kvcore.lmcache", "uninstall", "--user")
    assert r.returncode == 1 and "is not there" in r.stderr


def test_install_in_a_program_before_or_after_import_lmcache(env):
    before = "import kvcore.lmcache as k; k.install(); " + CHECK
    after = textwrap.dedent("""\
        import sys, lmcache, lmcache.sub
        import kvcore.lmcache as k
        assert k.install()
        """) + CHECK.replace("; ", "\n")
    for code in (before, after):
        r = py(env, "-c", code)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["True", "True", "True", "kvcore.lmcache_ops", "fallback"], (code, r.stdout, r.stderr)


def test_where_kvcore_cannot_start_lmcache_keeps_its_ops(env, tmp_path):
    r = py(env, "-m", "kvcore.lmcache", "install", "--user")
    assert r.returncode == 0, r.stderr
    r = py(env, "-c", CHECK, KVCORE_LIBRARY=str(tmp_path / "missing" / "libkvcore.so"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[:4] == ["False", "True", "False", "lmcache.python_ops_fallback"], r.stdout
    assert "LMCache keeps its own ops" in r.stderr and "cannot load libkvcore" in r.stderr, r.stderr
    r = py(env, "-c", CHECK, KVCORE_BACKEND="nosuchbackend")
    assert r.stdout.split()[0] == "False" and "LMCache keeps its own ops" in r.stderr, r.stdout + r.stderr


def test_install_reports_a_directory_it_cannot_write(env, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("running as a user who can write a read-only directory (root)")
        r = py(env, "-m", "kvcore.lmcache", "install", "--site-dir", str(ro))
        assert r.returncode == 1 and "cannot write" in r.stderr and "--user" in r.stderr, r.stderr
    finally:
        ro.chmod(0o755)

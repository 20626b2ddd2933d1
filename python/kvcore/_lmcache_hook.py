# SPDX-License-Identifier: BSD-3-Clause
"""The import hook behind `python3 -m kvcore.lmcache install`. Its source is written into a .pth file
in site-packages and run at every interpreter start, so it imports nothing of kvcore (loading
libkvcore waits until LMCache is imported) and costs one finder on sys.meta_path. When `lmcache`
is imported, LMCache's __init__ runs first and picks its ops (its fallback on a host without
CUDA); right after it, kvcore.lmcache.wire() puts kvcore's ops in their place."""


def arm() -> None:
    """Register the finder (once), unless KVCORE_LMCACHE=0 or lmcache is already imported."""
    import os
    import sys

    if os.environ.get("KVCORE_LMCACHE", "1") == "0" or "lmcache" in sys.modules:
        return
    if any(getattr(f, "kvcore_lmcache_hook", False) for f in sys.meta_path):
        return
    import importlib.abc
    import importlib.util

    class _Finder(importlib.abc.MetaPathFinder):
        kvcore_lmcache_hook = True

        def find_spec(self, name, path=None, target=None):  # type: ignore[no-untyped-def]
            if name != "lmcache":
                return None
            sys.meta_path.remove(self)  # once: the rest of the path finds LMCache as usual
            spec = importlib.util.find_spec(name)
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            run_init = spec.loader.exec_module

            def exec_module(module):  # type: ignore[no-untyped-def]
                run_init(module)  # LMCache's __init__: it sets sys.modules["lmcache.c_ops"]
                try:
                    from kvcore.lmcache import wire
                except Exception as e:  # kvcore not importable here: LMCache keeps its own ops
                    import logging
                    logging.getLogger("kvcore.lmcache").warning(
                        "kvcore: LMCache keeps its own ops: kvcore cannot be imported (%s)", e)
                    return
                wire(module)
            spec.loader.exec_module = exec_module  # type: ignore[assignment]
            return spec

    sys.meta_path.insert(0, _Finder())

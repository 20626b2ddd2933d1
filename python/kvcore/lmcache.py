# SPDX-License-Identifier: BSD-3-Clause
"""kvcore's ops in an unmodified LMCache: LMCache's `lmcache.c_ops` becomes kvcore.lmcache_ops.

    python3 -m kvcore.lmcache install [--user | --site-dir DIR]   every program of this python
    python3 -m kvcore.lmcache status                                 what is installed, what LMCache gets
    python3 -m kvcore.lmcache uninstall [--user | --site-dir DIR]

or, in one program, `import kvcore.lmcache; kvcore.lmcache.install()` before or after `import lmcache`.

`install` writes kvcore-lmcache.pth into site-packages (the virtual environment's, or the system's
when run as root, or the user's with --user): at interpreter start it registers an import hook
(kvcore._lmcache_hook) that loads nothing until LMCache is imported. LMCache's __init__ picks its
own ops first (its pure-Python fallback on a host without CUDA); right after it, the ops of
kvcore.lmcache_ops replace those of the same name in a copy of LMCache's module, installed as
sys.modules["lmcache.c_ops"] and lmcache.c_ops, so an op kvcore lacks stays LMCache's. One log line
(LMCache's logger) says what was done. Where kvcore cannot start (libkvcore not found, no
backend), LMCache keeps its own ops and a warning says why. KVCORE_LMCACHE=0 turns the hook off.
Tested against LMCache at LMCACHE_COMMIT (docs/LMCACHE.md)."""
import argparse
import os
import site
import sys
import sysconfig
import types
from typing import Any, List, Optional

# The LMCache commit whose surface kvcore.lmcache_ops has and whose test suite it passes.
LMCACHE_COMMIT = "9f5cee0c4923cd65a5c6708f356097f5be7b10ac"
PTH_NAME = "kvcore-lmcache.pth"
_MARK = "__kvcore__"  # set on the module wire() installs


def _log(level: str, msg: str, *args: Any) -> None:
    """One line through LMCache's logger when it has one, else Python's logging."""
    try:
        from lmcache.logging import init_logger
        logger = init_logger("lmcache.kvcore")
    except Exception:
        import logging
        logger = logging.getLogger("kvcore.lmcache")
        if not logger.hasHandlers():  # logging not set up: the line still goes to stderr
            h = logging.StreamHandler()
            h.setFormatter(logging.Formatter("%(name)s %(levelname)s: %(message)s"))
            logger.addHandler(h)
            logger.setLevel(logging.INFO)
    getattr(logger, level)(msg, *args)


def wire(lmcache_module: Optional[types.ModuleType] = None) -> bool:
    """Make lmcache.c_ops kvcore's ops now (LMCache must be imported); True when it is. Modules of
    LMCache that already hold the old module (`import lmcache.c_ops as lmc_ops`) are pointed at
    the new one, so the order of imports does not matter."""
    lmc = lmcache_module or sys.modules.get("lmcache")
    if lmc is None:
        raise RuntimeError("kvcore.lmcache.wire(): lmcache is not imported (use install())")
    old = sys.modules.get("lmcache.c_ops")
    if getattr(old, _MARK, False):
        return True
    try:
        from . import lmcache_ops as ops
        ctx = ops._context()  # start kvcore now: a failure leaves LMCache's ops in place
    except Exception as e:
        _log("warning", "kvcore: LMCache keeps its own ops (%s): %s", getattr(old, "__name__", "none"), e)
        return False
    new = types.ModuleType("lmcache.c_ops", ops.__doc__)
    if old is not None:
        new.__dict__.update(old.__dict__)
    for name in ops.__all__:
        new.__dict__[name] = getattr(ops, name)
    new.__name__, new.__file__ = "lmcache.c_ops", ops.__file__
    setattr(new, _MARK, True)
    sys.modules["lmcache.c_ops"] = new
    lmc.c_ops = new  # type: ignore[attr-defined]
    if old is not None:
        _rebind(old, new)
    kept = sorted(n for n, v in new.__dict__.items() if not n.startswith("_") and callable(v) and
                  n not in ops.__all__ and old is not None and getattr(v, "__module__", "") == old.__name__)
    from . import __version__, library_path
    _log("info", "kvcore %s: lmcache.c_ops = kvcore.lmcache_ops (%d ops on %s, %s) in place of %s%s",
         __version__, len(ops.__all__), ctx.backend, library_path, getattr(old, "__name__", "nothing"),
         f"; kept from it: {', '.join(kept)}" if kept else "")
    return True


def _rebind(old: types.ModuleType, new: types.ModuleType) -> None:
    """Point every lmcache.* module attribute holding old (or one of its functions) at new's."""
    old_ops = {id(v): n for n, v in vars(old).items() if callable(v) and not n.startswith("_")}
    for name, mod in list(sys.modules.items()):
        if not (name == "lmcache" or name.startswith("lmcache.")) or mod is None or mod is new or mod is old:
            continue
        for attr, v in list(vars(mod).items()):
            if v is old:  # import lmcache.c_ops as lmc_ops
                setattr(mod, attr, new)
            elif id(v) in old_ops:  # from lmcache.c_ops import get_gpu_pci_bus_id
                setattr(mod, attr, getattr(new, old_ops[id(v)]))


def install() -> bool:
    """In this program: kvcore's ops for LMCache, whether lmcache is imported already (wired now)
    or later (wired right after its __init__). True when wired now or armed."""
    if "lmcache" in sys.modules:
        return wire(sys.modules["lmcache"])
    from . import _lmcache_hook
    _lmcache_hook.arm()
    return True


# ---------------------------------------------------------------- the .pth file

def _pth_text() -> str:
    """The .pth line: the hook's source, run at interpreter start without importing kvcore."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lmcache_hook.py")
    with open(path) as f:
        src = f.read()
    return ("import sys; exec(compile(%r, %r, 'exec'), {'__name__': '_kvcore_lmcache_hook'}); "
            "sys.modules.pop('_kvcore_lmcache_hook', None)" % (src + "\narm()\n", "kvcore-lmcache.pth")) + "\n"


def _site_dir(user: bool, site_dir: Optional[str]) -> str:
    if site_dir:
        return site_dir
    if user:
        return site.getusersitepackages()
    return sysconfig.get_paths()["purelib"]  # the venv's, or the system's (Debian: /usr/local/.../dist-packages)


def _installed() -> List[str]:
    """Every kvcore-lmcache.pth on this interpreter's site directories."""
    dirs = list(site.getsitepackages()) + [site.getusersitepackages(), sysconfig.get_paths()["purelib"]]
    seen: List[str] = []
    for d in dirs:
        p = os.path.join(d, PTH_NAME)
        if os.path.isfile(p) and p not in seen:
            seen.append(p)
    return seen


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m kvcore.lmcache",
                                 description="Make an unmodified LMCache use kvcore's ops as lmcache.c_ops.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, what in (("install", "write the hook into site-packages"), ("uninstall", "remove it")):
        g = sub.add_parser(name, help=what).add_mutually_exclusive_group()
        g.add_argument("--user", action="store_true", help="the user's site-packages (no root needed)")
        g.add_argument("--site-dir", metavar="DIR", help="this site directory")
    sub.add_parser("status", help="where the hook is, and what `import lmcache` gets now")
    a = ap.parse_args(argv)
    if a.cmd == "install":
        d = _site_dir(a.user, a.site_dir)
        if a.user and not site.ENABLE_USER_SITE:
            print(f"kvcore.lmcache: this python does not read the user site directory ({d}); "
                  "install without --user", file=sys.stderr)
            return 1
        try:
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, PTH_NAME), "w") as f:
                f.write(_pth_text())
        except OSError as e:
            print(f"kvcore.lmcache: cannot write {os.path.join(d, PTH_NAME)}: {e.strerror}"
                  f"{'' if a.user else ' (try --user)'}", file=sys.stderr)
            return 1
        print(f"installed {os.path.join(d, PTH_NAME)}: LMCache imported by {sys.executable} uses kvcore's ops "
              f"(tested with LMCache {LMCACHE_COMMIT[:12]}; KVCORE_LMCACHE=0 turns it off)")
        return 0
    if a.cmd == "uninstall":
        pth = os.path.join(_site_dir(a.user, a.site_dir), PTH_NAME)
        if not os.path.exists(pth):
            print(f"kvcore.lmcache: {pth} is not there (installed: {', '.join(_installed()) or 'nowhere'})",
                  file=sys.stderr)
            return 1
        os.remove(pth)
        print(f"removed {pth}")
        return 0
    found = _installed()
    for pth in found:
        with open(pth) as f:
            current = f.read() == _pth_text()
        print(f"hook: {pth}{'' if current else ' (from another kvcore version: run install again)'}")
    if not found:
        print("hook: not installed (python3 -m kvcore.lmcache install)")
    if os.environ.get("KVCORE_LMCACHE", "1") == "0":
        print("hook: off in this environment (KVCORE_LMCACHE=0)")
    print(f"tested with LMCache {LMCACHE_COMMIT}")
    try:
        import lmcache  # noqa: F401  (the hook, when installed, wires kvcore in right after its __init__)
    except Exception as e:
        print(f"lmcache: cannot be imported here ({type(e).__name__}: {e})")
        return 0
    ops = sys.modules.get("lmcache.c_ops")
    print(f"lmcache: {os.path.dirname(lmcache.__file__ or '')} ({getattr(lmcache, '__version__', 'unknown')}); "
          f"lmcache.c_ops is {'kvcore.lmcache_ops' if getattr(ops, _MARK, False) else getattr(ops, '__name__', None)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

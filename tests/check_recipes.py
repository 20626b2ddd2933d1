#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Checks the Spack and EasyBuild recipes in contrib/ against this source tree (TAP on stdout).

  check_recipes.py SRCDIR CONFIGURE_HELP_FILE       the checks (tests/check-recipes.sh runs them)
  check_recipes.py --eb-paths EASYCONFIG             print an easyconfig's sanity_check_paths, one
                                                     "f PATH" / "d PATH" a line (make installcheck)

The recipes are loaded the way their tools load them: package.py is imported with a stand-in for
the `spack.package` module that records the directives, then configure_args() runs for several
specs; an easyconfig is executed with EasyBuild's constants. Every configure option either passes
must appear in `./configure --help`, so a renamed or removed option breaks `make check`."""

import glob
import os
import re
import sys
import types

# ---------------------------------------------------------------- configure --help


def configure_options(help_text):
    """{("enable"|"with"|"plain", name)} for every option configure documents."""
    opts = set()
    for m in re.finditer(r"^\s+--([a-z0-9][a-z0-9-]*)(?=[\[= ,]|$)", help_text, re.M):
        opts.add(option_key("--" + m.group(1)))
    return opts


def option_key(opt):
    """--enable-x / --disable-x -> ("enable", x); --with-x / --without-x -> ("with", x)."""
    name = opt[2:].split("=", 1)[0]
    for prefix, family in (("enable-", "enable"), ("disable-", "enable"), ("with-", "with"), ("without-", "with")):
        if name.startswith(prefix):
            return (family, name[len(prefix):])
    return ("plain", name)


def options_in(text):
    return re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*(?:=[^\s'\"]*)?)", text)


# ---------------------------------------------------------------- a stand-in for spack.package


class Directives:
    def __init__(self):
        self.calls = []

    def record(self, name):
        def directive(*args, **kwargs):
            self.calls.append((name, args, kwargs))
        return directive


class FakeVariant:
    def __init__(self, value):
        self.value = value


class FakeDep:
    def __init__(self, name):
        self.prefix = "/spack/opt/" + name


class FakeSpec:
    """Just what configure_args() uses: satisfies("+v" / "~v"), spec[dep].prefix, variants."""

    def __init__(self, on, variants):
        self.on = set(on)
        self.variants = {k: FakeVariant(v) for k, v in variants.items()}

    def satisfies(self, constraint):
        assert re.fullmatch(r"[+~]\w+", constraint), "unsupported constraint in the stand-in: " + constraint
        return (constraint[1:] in self.on) == (constraint[0] == "+")

    def __getitem__(self, dep):
        return FakeDep(dep)


def load_spack_package(path):
    d = Directives()
    mod = types.ModuleType("spack.package")

    class PackageBase:
        def with_or_without(self, name, activation_value=None):
            raise AssertionError("with_or_without is not modelled by this stand-in")

        enable_or_disable = with_or_without

    for cls in ("AutotoolsPackage", "CudaPackage", "ROCmPackage"):
        setattr(mod, cls, type(cls, (PackageBase,), {}))
    for name in ("version", "variant", "depends_on", "conflicts", "license", "maintainers", "patch", "provides",
                 "requires", "resource"):
        setattr(mod, name, d.record(name))
    mod.which = lambda *a, **k: None
    mod.__all__ = [n for n in dir(mod) if not n.startswith("_")]
    spack = types.ModuleType("spack")
    spack.package = mod
    saved = {k: sys.modules.get(k) for k in ("spack", "spack.package")}
    sys.modules["spack"], sys.modules["spack.package"] = spack, mod
    try:
        ns = {"__name__": "kvcore_package"}
        with open(path) as f:
            exec(compile(f.read(), path, "exec"), ns)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return ns["Kvcore"], d.calls


# ---------------------------------------------------------------- easyconfigs


def load_easyconfig(path):
    ns = {"SOURCE_TAR_GZ": "%(name)s-%(version)s.tar.gz", "SHLIB_EXT": "so", "SYSTEM": {"name": "system"}}
    with open(path) as f:
        exec(compile(f.read(), path, "exec"), ns)
    return ns


def eb_templates(ec):
    t = {"name": ec["name"], "version": ec["version"]}
    for dep in ec.get("dependencies", []):
        if dep[0] == "CUDA":
            t["cudaver"] = dep[1]
    return t


def syntax_check(path):
    """What `python3 -m py_compile` does, without writing a .pyc next to the source."""
    with open(path) as f:
        compile(f.read(), path, "exec")


# ---------------------------------------------------------------- TAP


class Tap:
    def __init__(self):
        self.n = 0
        self.failed = 0

    def check(self, cond, desc, why=""):
        self.n += 1
        if cond:
            print("ok %d - %s" % (self.n, desc))
        else:
            self.failed += 1
            print("not ok %d - %s" % (self.n, desc))
            for line in str(why).splitlines():
                print("# " + line)


def check_spack(tap, srcdir, opts):
    try:
        with open(os.path.join(srcdir, "contrib/spack/repo.yaml")) as f:
            repo = f.read()
    except OSError as e:
        repo = repr(e)
    tap.check(re.search(r"^repo:\s*\n\s+namespace:\s*\w+", repo, re.M) is not None,
              "spack: contrib/spack/repo.yaml names the repository's namespace", repo)
    path = os.path.join(srcdir, "contrib/spack/packages/kvcore/package.py")
    try:
        syntax_check(path)
        tap.check(True, "spack: package.py compiles")
    except SyntaxError as e:
        tap.check(False, "spack: package.py compiles", e)
        return
    try:
        cls, calls = load_spack_package(path)
    except Exception as e:  # a failure to load is the test's finding, with its message
        tap.check(False, "spack: package.py loads with the spack.package stand-in", repr(e))
        return
    bases = {b.__name__ for b in cls.__bases__}
    tap.check(bases == {"AutotoolsPackage", "CudaPackage", "ROCmPackage"},
              "spack: AutotoolsPackage + CudaPackage + ROCmPackage", bases)
    licences = [a[0] for n, a, k in calls if n == "license"]
    tap.check(licences == ["BSD-3-Clause"], "spack: license(\"BSD-3-Clause\")", licences)
    deps = {a[0]: k for n, a, k in calls if n == "depends_on"}
    want = {"hwloc@2:+pci": None, "sleef": None, "zlib-api": None, "pkgconfig": "build", "criterion": "test",
            "autoconf": "build", "automake": "build", "libtool": "build"}
    bad = [d for d, t in want.items() if d not in deps or deps[d].get("type") != t]
    tap.check(not bad, "spack: dependencies and their types", "missing or wrong type: %s" % bad)
    git_only = [d for d in ("autoconf", "automake", "libtool") if deps.get(d, {}).get("when") != "@main"]
    tap.check(not git_only, "spack: autotools only for the git version (@main)", git_only)

    specs = [
        ("default (~cuda ~rocm +openmp)", ["openmp"], {}, ["--without-cuda", "--without-hip"], ["--disable-openmp"]),
        ("+cuda cuda_arch=80,90", ["openmp", "cuda"], {"cuda_arch": ("80", "90")},
         ["--with-cuda=/spack/opt/cuda", "--with-cuda-arch=80 90", "--without-hip"], []),
        ("+rocm amdgpu_target=gfx90a,gfx942", ["openmp", "rocm"], {"amdgpu_target": ("gfx90a", "gfx942")},
         ["--with-hip=/spack/opt/hip", "--with-amdgpu-target=gfx90a gfx942", "--without-cuda"], []),
        ("~openmp", [], {}, ["--disable-openmp"], []),
    ]
    for desc, on, variants, must, must_not in specs:
        pkg = cls.__new__(cls)
        pkg.spec = FakeSpec(on, variants)
        try:
            args = pkg.configure_args()
        except Exception as e:
            tap.check(False, "spack %s: configure_args() runs" % desc, repr(e))
            continue
        unknown = [a for a in args if option_key(a) not in opts]
        tap.check(not unknown, "spack %s: every option exists in configure --help" % desc, unknown)
        wrong = [m for m in must if m not in args] + [m for m in must_not if m in args]
        tap.check(not wrong, "spack %s: arguments %s" % (desc, args), "expected / unexpected: %s" % wrong)


def check_easybuild(tap, srcdir, opts, version):
    files = sorted(glob.glob(os.path.join(srcdir, "contrib/easybuild/*.eb")))
    tap.check(len(files) >= 1, "easybuild: easyconfigs found", "none under contrib/easybuild")
    for path in files:
        base = os.path.basename(path)
        try:
            syntax_check(path)
            ec = load_easyconfig(path)
        except Exception as e:
            tap.check(False, "easybuild %s: parses" % base, repr(e))
            continue
        tap.check(ec.get("easyblock") == "ConfigureMake" and ec.get("name") == "kvcore",
                  "easybuild %s: ConfigureMake, name kvcore" % base)
        tap.check(ec.get("version") == version, "easybuild %s: version is VERSION's (%s)" % (base, version),
                  ec.get("version"))
        t = eb_templates(ec)
        suffix = ec.get("versionsuffix", "") % t
        tc = ec.get("toolchain", {})
        want_name = "%s-%s-%s-%s%s.eb" % (ec.get("name"), ec.get("version"), tc.get("name"), tc.get("version"), suffix)
        tap.check(base == want_name, "easybuild %s: file name matches its fields" % base, "expected " + want_name)
        deps = [d[0] for d in ec.get("dependencies", [])]
        missing = [d for d in ("hwloc", "SLEEF", "zlib") if d not in deps]
        tap.check(not missing, "easybuild %s: dependencies" % base, missing)
        used = options_in(ec.get("configopts", ""))
        unknown = [o for o in used if option_key(o) not in opts]
        tap.check(used and not unknown, "easybuild %s: every option in configopts exists in configure --help" % base,
                  unknown or "no options")
        scp = ec.get("sanity_check_paths", {})
        tap.check(scp.get("files") and "dirs" in scp, "easybuild %s: sanity_check_paths has files and dirs" % base)


def main(argv):
    if len(argv) == 3 and argv[1] == "--eb-paths":
        ec = load_easyconfig(argv[2])
        scp = ec["sanity_check_paths"]
        for f in scp["files"]:
            print("f " + f)
        for d in scp["dirs"]:
            print("d " + d)
        return 0
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    srcdir, help_file = argv[1], argv[2]
    with open(help_file) as f:
        opts = configure_options(f.read())
    with open(os.path.join(srcdir, "VERSION")) as f:
        version = re.search(r"^version=(\S+)", f.read(), re.M).group(1)
    tap = Tap()
    tap.check(("with", "cuda-arch") in opts and ("enable", "openmp") in opts,
              "configure --help lists kvcore's options (--with-cuda-arch, --disable-openmp)")
    check_spack(tap, srcdir, opts)
    check_easybuild(tap, srcdir, opts, version)
    print("1..%d" % tap.n)
    return 1 if tap.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Checks the Spack and EasyBuild recipes in contrib/ against this source tree (TAP on stdout).

  check_recipes.py SRCDIR CONFIGURE_HELP_FILE       the checks (tests/lint/check_recipes.sh runs them)
  check_recipes.py --eb-paths EASYCONFIG             print an easyconfig's sanity_check_paths, one
                                                     "f PATH" / "d PATH" a line (make installcheck;
                                                     paths with EasyBuild templates are left out)

The recipes are loaded the way their tools load them: package.py is imported with stand-ins for
`spack.package` and spack_repo.builtin's build systems that record the directives, then configure_args() runs for several
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


class FakeVariant:
    def __init__(self, value):
        self.value = value


class FakeDep:
    def __init__(self, name):
        self.prefix = "/spack/opt/" + name
        self.command = FakeExecutable(self.prefix + "/bin/" + name)


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


class FakeExecutable:
    """Executable(path)(*args, **kwargs): records the call; answers FakeExecutable.output."""

    calls = []
    output = ""

    def __init__(self, path):
        self.path = path

    def __call__(self, *args, **kwargs):
        FakeExecutable.calls.append((self.path, args, kwargs))
        return FakeExecutable.output


class FakeEnv:
    """EnvironmentModifications: the prepend_path / set / append_path calls, in order."""

    def __init__(self):
        self.mods = []

    def __getattr__(self, op):
        return lambda *args, **kwargs: self.mods.append((op,) + args)


def load_spack_package(path):
    """Imports package.py (API v2: build systems from spack_repo.builtin.build_systems) against
    stand-ins for spack.package and those modules; returns the class and its directive calls, each
    with the `when` of enclosing `with when(...)` blocks merged into its keywords."""
    calls = []
    mod = types.ModuleType("spack.package")
    whens = []

    class When:
        def __init__(self, cond):
            self.cond = cond

        def __enter__(self):
            whens.append(self.cond)

        def __exit__(self, *exc):
            whens.pop()

    def record(name):
        def directive(*args, **kwargs):
            if whens and "when" not in kwargs:
                kwargs["when"] = " ".join(whens)
            calls.append((name, args, kwargs))
        return directive

    class PackageBase:
        def enable_or_disable(self, variant):
            return ["--%s-%s" % ("enable" if self.spec.satisfies("+" + variant) else "disable", variant)]

        def with_or_without(self, name, activation_value=None):
            assert activation_value is None, "with_or_without(activation_value=...) is not modelled"
            return ["--%s-%s" % ("with" if self.spec.satisfies("+" + name) else "without", name)]

    build_systems = {"autotools": "AutotoolsPackage", "cuda": "CudaPackage", "rocm": "ROCmPackage"}
    modules = {"spack": types.ModuleType("spack"), "spack.package": mod,
               "spack_repo": types.ModuleType("spack_repo"),
               "spack_repo.builtin": types.ModuleType("spack_repo.builtin"),
               "spack_repo.builtin.build_systems": types.ModuleType("spack_repo.builtin.build_systems")}
    for file, cls in build_systems.items():
        m = types.ModuleType("spack_repo.builtin.build_systems." + file)
        setattr(m, cls, type(cls, (PackageBase,), {}))
        modules[m.__name__] = m
    for name in ("version", "variant", "depends_on", "conflicts", "license", "maintainers", "patch", "provides",
                 "requires", "resource", "extends"):
        setattr(mod, name, record(name))
    mod.when = When
    mod.which = lambda *a, **k: None
    mod.join_path = os.path.join
    mod.Executable = FakeExecutable
    mod.__all__ = [n for n in dir(mod) if not n.startswith("_")]
    saved = {k: sys.modules.get(k) for k in modules}
    sys.modules.update(modules)
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
    return ns["Kvcore"], calls


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


SPACK_REPO = "contrib/spack/spack_repo/kvcore"


def check_spack(tap, srcdir, opts):
    try:
        with open(os.path.join(srcdir, SPACK_REPO, "repo.yaml")) as f:
            repo = f.read()
    except OSError as e:
        repo = repr(e)
    tap.check(re.search(r"^repo:\s*\n\s+namespace:\s*kvcore\s*\n\s+api:\s*v2\.\d+\s*$", repo, re.M) is not None,
              "spack: repo.yaml names namespace kvcore and package API v2", repo)
    path = os.path.join(srcdir, SPACK_REPO, "packages/kvcore/package.py")
    try:
        syntax_check(path)
        tap.check(True, "spack: package.py compiles")
    except (SyntaxError, OSError) as e:
        tap.check(False, "spack: package.py compiles", e)
        return
    with open(path) as f:
        long_lines = [i + 1 for i, line in enumerate(f.read().splitlines()) if len(line) > 99]
    tap.check(not long_lines, "spack: package.py lines are at most 99 columns (flake8 E501)", long_lines)
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
    maint = [a for n, a, k in calls if n == "maintainers"]
    tap.check(maint and all(maint), "spack: maintainers(...) names someone", maint)
    with open(os.path.join(srcdir, "VERSION")) as f:
        version = re.search(r"^version=(\S+)", f.read(), re.M).group(1)
    sums = [k.get("sha256", "") for n, a, k in calls if n == "version" and a[0] == version]
    tap.check(len(sums) == 1 and re.fullmatch(r"[0-9a-f]{64}", sums[0]) is not None and cls.url.endswith(
              "/kvcore-%s.tar.gz" % version), "spack: url and version(\"%s\", sha256=...) of the release tarball"
              % version, sums)
    deps = {}
    for n, a, k in calls:
        if n == "depends_on":
            deps.setdefault(a[0], []).append(k)
    want = {"hwloc@2:+pci": None, "sleef": None, "zlib-api": None, "libdeflate": None, "pkgconfig": "build",
            "autoconf": "build", "automake": "build", "libtool": "build", "m4": "build"}
    bad = [d for d, t in want.items() if d not in deps or deps[d][0].get("type") != t]
    tap.check(not bad, "spack: dependencies and their types", "missing or wrong type: %s" % bad)
    git_only = [d for d in ("autoconf", "automake", "libtool", "m4") if deps.get(d, [{}])[0].get("when") != "@main"]
    tap.check(not git_only, "spack: autotools only for the git version (@main)", git_only)
    # Spack has no criterion package: a test dependency on it fails `spack audit packages`.
    # ROCmPackage already depends on hip +rocm.
    tap.check("criterion" not in deps and "hip" not in deps, "spack: no criterion nor duplicate hip dependency",
              sorted(deps))
    variants = {a[0]: k for n, a, k in calls if n == "variant"}
    tap.check(variants.get("libdeflate", {}).get("default") is True and
              [k.get("when") for k in deps.get("libdeflate", [])] == ["+libdeflate"],
              "spack: variant libdeflate (default on), libdeflate only when +libdeflate",
              (variants.get("libdeflate"), deps.get("libdeflate")))
    ext = [k.get("when") for n, a, k in calls if n == "extends" and a[0] == "python"]
    tap.check(ext == ["+python"] and any(k.get("when") == "+python" for k in deps.get("py-numpy", [])),
              "spack: extends(\"python\") and py-numpy when +python", ext)
    tests = sorted(n for n in vars(cls) if n.startswith("test_"))
    tap.check({"test_version", "test_demo", "test_python"} <= set(tests), "spack: stand-alone tests %s" % tests)

    hidden = ["--without-criterion", "--disable-fuzzers"]
    specs = [
        ("default (~cuda ~rocm +openmp ~python +libdeflate)", ["openmp", "libdeflate"], {},
         hidden + ["--without-cuda", "--without-hip", "--enable-openmp", "--disable-python", "--with-libdeflate"],
         ["--without-libdeflate"]),
        ("+cuda cuda_arch=80,90", ["openmp", "cuda", "libdeflate"], {"cuda_arch": ("80", "90")},
         hidden + ["--with-cuda=/spack/opt/cuda", "--with-cuda-arch=80 90", "--without-hip"], []),
        ("+rocm amdgpu_target=gfx90a,gfx942", ["openmp", "rocm", "libdeflate"], {"amdgpu_target": ("gfx90a", "gfx942")},
         hidden + ["--with-hip=/spack/opt/hip", "--with-amdgpu-target=gfx90a gfx942", "--without-cuda"], []),
        ("~openmp +python ~libdeflate", ["python"], {},
         hidden + ["--disable-openmp", "--enable-python", "PYTHON=/spack/opt/python/bin/python", "--without-libdeflate"],
         ["--with-libdeflate"]),
    ]
    for desc, on, variants, must, must_not in specs:
        pkg = cls.__new__(cls)
        pkg.spec = FakeSpec(on, variants)
        try:
            args = pkg.configure_args()
        except Exception as e:
            tap.check(False, "spack %s: configure_args() runs" % desc, repr(e))
            continue
        unknown = [a for a in args if not a.startswith("PYTHON=") and option_key(a) not in opts]
        tap.check(not unknown, "spack %s: every option exists in configure --help" % desc, unknown)
        wrong = [m for m in must if m not in args] + [m for m in must_not if m in args]
        tap.check(not wrong, "spack %s: arguments %s" % (desc, args), "expected / unexpected: %s" % wrong)
    check_spack_run_environment(tap, cls)


def check_spack_run_environment(tap, cls):
    """`spack load` / modules / `spack test run`: the run environment finds the Python package
    wherever automake put it; the stand-alone test relies on it; `spack external find` works."""
    import tempfile
    with tempfile.TemporaryDirectory() as prefix:
        sites = [os.path.join(prefix, "lib", "python3.11", d) for d in ("dist-packages", "site-packages")]
        os.makedirs(os.path.join(sites[0], "kvcore"))
        os.makedirs(sites[1])  # no kvcore in it: not added
        for on, want in ((["python"], [("prepend_path", "PYTHONPATH", sites[0])]), ([], [])):
            pkg = cls.__new__(cls)
            pkg.spec = FakeSpec(on, {})
            pkg.prefix = types.SimpleNamespace(lib=os.path.join(prefix, "lib"))
            env = FakeEnv()
            try:
                pkg.setup_run_environment(env)
                got = env.mods
            except Exception as e:
                got = repr(e)
            tap.check(got == want, "spack %s: setup_run_environment puts the installed package on PYTHONPATH"
                      % ("+python" if on else "~python"), "got %s, want %s" % (got, want))
    pkg = cls.__new__(cls)
    pkg.spec = FakeSpec(["python"], {})
    FakeExecutable.calls = []
    try:
        pkg.test_python()
        calls = FakeExecutable.calls
    except Exception as e:
        calls = repr(e)
    tap.check(isinstance(calls, list) and len(calls) == 1 and not calls[0][2],
              "spack: test_python imports kvcore with no environment of its own (the run environment's)", calls)
    exes = getattr(cls, "executables", [])
    FakeExecutable.output = "kvcore 0.1.0\n"
    try:
        found = cls.determine_version("/usr/bin/kvcore")
    except Exception as e:
        found = repr(e)
    FakeExecutable.output = "something else 2.0\n"
    try:
        other = cls.determine_version("/usr/bin/kvcore")
    except Exception as e:
        other = repr(e)
    tap.check(any(re.search(e, "kvcore") for e in exes) and found == "0.1.0" and other is None,
              "spack: executables and determine_version (spack external find kvcore)", (exes, found, other))


def check_placeholders(tap, srcdir):
    """example.invalid is a placeholder: each recipe names it so, on one line a site changes."""
    paths = [os.path.join(srcdir, SPACK_REPO, "packages/kvcore/package.py")] + sorted(
        glob.glob(os.path.join(srcdir, "contrib/easybuild/kvcore-*.eb")))
    for path in paths:
        with open(path) as f:
            lines = f.read().splitlines()
        hits = [i for i, line in enumerate(lines) if "example.invalid" in line]
        marked = len(hits) == 1 and any("PLACEHOLDER" in line for line in lines[max(0, hits[0] - 3):hits[0]])
        tap.check(marked, "%s: the placeholder address is one line, marked PLACEHOLDER" % os.path.basename(path),
                  [lines[i] for i in hits])


def eb_cuda_templates(ec, cuda_cc):
    """EasyBuild's cuda_* templates, defined only when compute capabilities are known: the
    option (--cuda-compute-capabilities) or else the easyconfig's cuda_compute_capabilities."""
    cc = cuda_cc or ec.get("cuda_compute_capabilities")
    if not cc:
        return {}
    return {"cuda_compute_capabilities": ",".join(cc), "cuda_cc_cmake": ";".join(c.replace(".", "") for c in cc)}


def run_preconfig(ec, cuda_cc):
    """The CUDA easyconfig's preconfigopts as EasyBuild renders them, run in front of `true`:
    (status, output), or (None, why) when a template does not resolve."""
    import subprocess
    t = dict(eb_templates(ec), **eb_cuda_templates(ec, cuda_cc))
    try:
        pre = ec.get("preconfigopts", "") % t
    except KeyError as e:
        return None, "Failed to resolve all templates: %s" % e
    r = subprocess.run(["sh", "-c", pre + " true"], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def check_easybuild(tap, srcdir, opts, version):
    files = sorted(glob.glob(os.path.join(srcdir, "contrib/easybuild/*.eb")))
    kvcore = [f for f in files if os.path.basename(f).startswith("kvcore-")]
    tap.check(kvcore, "easybuild: kvcore easyconfigs found", "none under contrib/easybuild")
    shipped = {}
    for path in files:
        base = os.path.basename(path)
        try:
            syntax_check(path)
            ec = load_easyconfig(path)
        except Exception as e:
            tap.check(False, "easybuild %s: parses" % base, repr(e))
            continue
        shipped[ec.get("name")] = ec
        t = eb_templates(ec)
        suffix = ec.get("versionsuffix", "") % t
        tc = ec.get("toolchain", {})
        want_name = "%s-%s-%s-%s%s.eb" % (ec.get("name"), ec.get("version"), tc.get("name"), tc.get("version"), suffix)
        tap.check(base == want_name, "easybuild %s: file name matches its fields" % base, "expected " + want_name)
        # The easyconfigs repository's own tests: no MPI/BLAS means GCCcore, with binutils to build.
        bdeps = [d[0] for d in ec.get("builddependencies", [])]
        tap.check(tc.get("name") == "GCCcore" and "binutils" in bdeps,
                  "easybuild %s: GCCcore toolchain with binutils as build dependency" % base, (tc, bdeps))
        sums = ec.get("checksums", [])
        tap.check(len(sums) == len(ec.get("sources", [])) and all(re.fullmatch(r"[0-9a-f]{64}", c) for c in sums),
                  "easybuild %s: a sha256 for every source" % base, sums)
        tap.check("modextrapaths" not in ec, "easybuild %s: no modextrapaths (EasyBuild 5 sets the paths)" % base)
        scp = ec.get("sanity_check_paths", {})
        tap.check(scp.get("files") and "dirs" in scp, "easybuild %s: sanity_check_paths has files and dirs" % base)
    for path in kvcore:
        base = os.path.basename(path)
        ec = load_easyconfig(path)
        tap.check(ec.get("easyblock") == "ConfigureMake", "easybuild %s: ConfigureMake" % base)
        tap.check(ec.get("version") == version, "easybuild %s: version is VERSION's (%s)" % (base, version),
                  ec.get("version"))
        deps = {d[0]: d for d in ec.get("dependencies", [])}
        missing = [d for d in ("hwloc", "SLEEF", "zlib", "libdeflate", "Python") if d not in deps]
        tap.check(not missing, "easybuild %s: dependencies" % base, missing)
        sleef = shipped.get("SLEEF", {})
        tap.check("SLEEF" in deps and deps["SLEEF"][1] == sleef.get("version") and
                  sleef.get("toolchain") == ec.get("toolchain") and sleef.get("easyblock") == "CMakeMake",
                  "easybuild %s: its SLEEF is the shipped CMakeMake easyconfig" % base, deps.get("SLEEF"))
        configopts = ec.get("configopts", "")
        used = options_in(configopts)
        unknown = [o for o in used if option_key(o) not in opts]
        tap.check(used and not unknown, "easybuild %s: every option in configopts exists in configure --help" % base,
                  unknown or "no options")
        hidden = [o for o in ("--without-criterion", "--disable-fuzzers", "--with-libdeflate", "--enable-python") if o not in used]
        tap.check(not hidden and "PYTHON=$EBROOTPYTHON/bin/python3" in configopts,
                  "easybuild %s: no undeclared Criterion/libFuzzer, the Python dependency's interpreter" % base,
                  hidden)
        # libdeflate is the default; `local_libdeflate = False` builds against zlib alone.
        with open(path) as f:
            text = f.read()
        flipped = text.replace("local_libdeflate = True", "local_libdeflate = False")
        try:
            ns = {"SOURCE_TAR_GZ": "%(name)s-%(version)s.tar.gz", "SHLIB_EXT": "so", "SYSTEM": {"name": "system"}}
            exec(compile(flipped, path, "exec"), ns)
            off_deps = [d[0] for d in ns.get("dependencies", [])]
            off_opts = options_in(ns.get("configopts", ""))
        except Exception as e:
            off_deps, off_opts = repr(e), []
        tap.check(flipped != text and "libdeflate" not in off_deps and "--without-libdeflate" in off_opts and
                  "--with-libdeflate" not in off_opts,
                  "easybuild %s: local_libdeflate = False drops libdeflate (--without-libdeflate)" % base,
                  (off_deps, off_opts))
        if "CUDA" in deps:
            # Without compute capabilities the configure step stops with kvcore's message, not
            # with EasyBuild's unresolved template; with them configure gets the SM list.
            st, out = run_preconfig(ec, None)
            tap.check(st not in (None, 0) and "--cuda-compute-capabilities" in out,
                      "easybuild %s: without compute capabilities, kvcore's message stops the build" % base,
                      "status %s: %s" % (st, out))
            st, out = run_preconfig(ec, ["8.0", "9.0"])
            arch = configopts % dict(eb_templates(ec), **eb_cuda_templates(ec, ["8.0", "9.0"]))
            tap.check(st == 0 and '--with-cuda-arch="80;90"' in arch,
                      "easybuild %s: --cuda-compute-capabilities=8.0,9.0 reaches configure as 80;90" % base,
                      "status %s: %s %s" % (st, out, arch))


def main(argv):
    if len(argv) == 3 and argv[1] == "--eb-paths":
        ec = load_easyconfig(argv[2])
        scp = ec["sanity_check_paths"]
        # Paths under EasyBuild's Python (%(pyshortver)s) depend on its interpreter, not this prefix's.
        for kind, paths in (("f", scp["files"]), ("d", scp["dirs"])):
            for p in paths:
                if "%(" not in p:
                    print(kind + " " + p)
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
    check_placeholders(tap, srcdir)
    print("1..%d" % tap.n)
    return 1 if tap.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

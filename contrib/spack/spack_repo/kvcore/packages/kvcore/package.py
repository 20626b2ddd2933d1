# SPDX-License-Identifier: BSD-3-Clause
# Spack recipe for kvcore (package API v2, the layout of spack-packages). Use it with
#   spack repo add /path/to/kvcore/contrib/spack/spack_repo/kvcore
#   spack install kvcore +cuda cuda_arch=90      (or +rocm amdgpu_target=gfx942, +python)
# docs/PACKAGING.md says how the release checksum is made and how the recipe is checked.

import glob
import os
import re

from spack_repo.builtin.build_systems.autotools import AutotoolsPackage
from spack_repo.builtin.build_systems.cuda import CudaPackage
from spack_repo.builtin.build_systems.rocm import ROCmPackage

from spack.package import *

# PLACEHOLDER: kvcore has no public address yet. This is the one line a site changes: the address
# of its mirror, which holds releases/kvcore-X.Y.Z.tar.gz (`make dist`) and kvcore.git.
SITE = "https://example.invalid/kvcore"


class Kvcore(AutotoolsPackage, CudaPackage, ROCmPackage):
    """KV-cache compute kernels for LLM serving: transfers between an engine's paged KV cache and
    contiguous host chunks (LMCache's layouts), the CacheGen codec (bit-exact with LMCache), RoPE
    key re-rotation and pinned, NUMA-placed host memory. The CPU backend (OpenMP + SIMD) is built
    into libkvcore; the CUDA and HIP backends are modules loaded at run time, so one install
    serves CPU-only and GPU nodes."""

    homepage = SITE
    url = f"{SITE}/releases/kvcore-0.1.0.tar.gz"
    git = f"{SITE}.git"

    # PLACEHOLDER: the GitHub account of whoever maintains this recipe at your site.
    maintainers("kvcore-dev")

    # `spack external find kvcore`: an installed kvcore is found by its program.
    executables = [r"^kvcore$"]

    license("BSD-3-Clause")

    version("main", branch="main")
    version("0.1.0", sha256="df6501e05e515345e4062426280f73b5ac9330956fde2216863db25209ce472b")

    variant("openmp", default=True, description="Multi-threaded CPU backend (OpenMP)")
    variant("python", default=False, description="Install the Python package (ctypes, numpy)")
    variant(
        "libdeflate",
        default=True,
        description="The container's CRC-32 by libdeflate (faster); without it, by zlib",
    )

    depends_on("c", type="build")
    # configure probes a C++ compiler: nvcc and hipcc use it as their host compiler.
    depends_on("cxx", type="build")
    depends_on("pkgconfig", type="build")
    # A git checkout has no configure script: autoreconf runs first.
    with when("@main"):
        depends_on("autoconf", type="build")
        depends_on("automake", type="build")
        depends_on("libtool", type="build")
        depends_on("m4", type="build")

    # hwloc must discover PCI devices: GPU backends are chosen by the devices hwloc sees.
    depends_on("hwloc@2:+pci")
    depends_on("sleef")
    depends_on("zlib-api")
    # The container's CRC-32 (zlib's checksum, computed with carry-less multiplies).
    depends_on("libdeflate", when="+libdeflate")

    with when("+python"):
        extends("python")
        depends_on("python@3.7:", type=("build", "run"))
        depends_on("py-numpy", type="run")

    conflicts("cuda_arch=none", when="+cuda", msg="kvcore +cuda needs at least one cuda_arch")

    def configure_args(self):
        spec = self.spec
        # The C test suite needs Criterion (no Spack package) and `make fuzz` needs clang's
        # libFuzzer: neither is a dependency, so configure must not pick them up from the system.
        args = ["--without-criterion", "--disable-fuzzers"]
        args.extend(self.with_or_without("libdeflate"))
        args.extend(self.enable_or_disable("openmp"))
        args.extend(self.enable_or_disable("python"))
        if spec.satisfies("+python"):
            args.append(f"PYTHON={spec['python'].command.path}")
        if spec.satisfies("+cuda"):
            args.append(f"--with-cuda={spec['cuda'].prefix}")
            args.append(f"--with-cuda-arch={' '.join(spec.variants['cuda_arch'].value)}")
        else:
            args.append("--without-cuda")
        if spec.satisfies("+rocm"):
            args.append(f"--with-hip={spec['hip'].prefix}")
            targets = " ".join(spec.variants["amdgpu_target"].value)
            args.append(f"--with-amdgpu-target={targets}")
        else:
            args.append("--without-hip")
        return args

    @classmethod
    def determine_version(cls, exe):
        out = Executable(exe)("--version", output=str, error=str)
        match = re.match(r"kvcore (\d+\.\d+\.\d+)", out)
        return match.group(1) if match else None

    def python_sites(self):
        """The directories under the prefix where `make install` put the Python package (automake
        picks lib/pythonX.Y/site-packages or dist-packages after the interpreter's scheme)."""
        pattern = join_path(self.prefix.lib, "python*", "*-packages", "kvcore")
        return sorted(os.path.dirname(d) for d in glob.glob(pattern))

    def setup_run_environment(self, env):
        # `spack load` and the generated modules: the site's python (Debian's /usr/bin/python3
        # included) does not search this prefix by itself.
        if self.spec.satisfies("+python"):
            for site in self.python_sites():
                env.prepend_path("PYTHONPATH", site)

    def check(self):
        """Build-time test (`spack install --test=root`): `make check` needs Criterion, so run the
        built program's self-checking demo instead (exit status 0 only when its results verify)."""
        with working_dir(self.build_directory):
            Executable("./kvcore")("demo")

    def test_version(self):
        """kvcore --version names the installed version"""
        out = Executable(self.prefix.bin.kvcore)("--version", output=str.split, error=str.split)
        expected = "kvcore " + (str(self.spec.version) if not self.spec.satisfies("@main") else "")
        assert out.startswith(expected), f"kvcore --version printed {out!r}"

    def test_demo(self):
        """kvcore demo runs the library's self-checking demonstration"""
        Executable(self.prefix.bin.kvcore)("demo")

    def test_python(self):
        """import kvcore from the installed Python package"""
        if not self.spec.satisfies("+python"):
            raise SkipTest("kvcore was built without +python")
        # No PYTHONPATH of its own: the run environment (setup_run_environment) must provide it.
        python = self.spec["python"].command
        python("-c", "import kvcore; print(kvcore.library_path)")

# SPDX-License-Identifier: BSD-3-Clause
# Spack recipe for kvcore. Use it from a repository of your own:
#   spack repo add /path/to/kvcore/contrib/spack
#   spack install kvcore@main +cuda cuda_arch=90      (or +rocm amdgpu_target=gfx942, or neither)
# tests/check-recipes.sh (run by `make check`) checks that every configure option used here exists.

from spack.package import *


class Kvcore(AutotoolsPackage, CudaPackage, ROCmPackage):
    """KV-cache compute kernels for LLM serving: transfers between an engine's paged KV cache and
    contiguous host chunks (LMCache's layouts), the CacheGen codec (bit-exact with LMCache), RoPE
    key re-rotation and pinned, NUMA-placed host memory. The CPU backend (OpenMP + SIMD) is built
    into libkvcore; the CUDA and HIP backends are modules loaded at run time, so one install
    serves CPU-only and GPU nodes."""

    # kvcore has no public address yet: replace these with your site's mirror of the repository
    # (or run `spack develop kvcore@main` in a checkout).
    homepage = "https://example.invalid/kvcore"
    git = "https://example.invalid/kvcore.git"

    license("BSD-3-Clause")

    version("main", branch="main")

    variant("openmp", default=True, description="Multi-threaded CPU backend (OpenMP)")

    depends_on("c", type="build")
    # configure probes a C++ compiler: nvcc and hipcc use it as their host compiler.
    depends_on("cxx", type="build")
    depends_on("pkgconfig", type="build")
    # A git checkout has no configure script: autoreconf runs first.
    depends_on("autoconf", type="build", when="@main")
    depends_on("automake", type="build", when="@main")
    depends_on("libtool", type="build", when="@main")

    # hwloc must discover PCI devices: GPU backends are chosen by the devices hwloc sees.
    depends_on("hwloc@2:+pci")
    depends_on("sleef")
    depends_on("zlib-api")
    # The test suite needs Criterion (`spack install --test=root`); builtin Spack has no package
    # for it, so declare an external one in packages.yaml.
    depends_on("criterion", type="test")

    depends_on("hip", when="+rocm")

    conflicts("cuda_arch=none", when="+cuda", msg="kvcore +cuda needs at least one cuda_arch")
    conflicts("amdgpu_target=none", when="+rocm", msg="kvcore +rocm needs at least one amdgpu_target")

    def configure_args(self):
        spec = self.spec
        args = []
        if spec.satisfies("+cuda"):
            args.append("--with-cuda={0}".format(spec["cuda"].prefix))
            args.append("--with-cuda-arch={0}".format(" ".join(spec.variants["cuda_arch"].value)))
        else:
            args.append("--without-cuda")
        if spec.satisfies("+rocm"):
            args.append("--with-hip={0}".format(spec["hip"].prefix))
            args.append("--with-amdgpu-target={0}".format(" ".join(spec.variants["amdgpu_target"].value)))
        else:
            args.append("--without-hip")
        if spec.satisfies("~openmp"):
            args.append("--disable-openmp")
        return args

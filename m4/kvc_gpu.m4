# SPDX-License-Identifier: BSD-3-Clause
# GPU backend modules. Both follow one template (KVC_GPU_WITH): --with-X[=DIR] defaults to "guess"
# (build the module when the compiler is found); an explicit --with-X that cannot be met stops configure.
# The core library never links a GPU runtime: these flags are used only by the module targets.

# KVC_GPU_WITH(NAME, COMPILER, DEFAULT-DIRS, REMEDY)
# Sets kvc_NAME_cc (full path of the compiler or empty) and kvc_NAME_dir.
AC_DEFUN([KVC_GPU_WITH], [
  AC_ARG_WITH([$1],
    [AS_HELP_STRING([--with-$1@<:@=DIR@:>@], [build the $1 backend module (default: when $2 is found)])],
    [], [with_$1=guess])
  kvc_$1_cc=
  kvc_$1_dir=
  AS_CASE([$with_$1],
    [no], [],
    [yes|guess], [for kvc_d in $3; do
                    AS_IF([test -x "$kvc_d/bin/$2"], [kvc_$1_dir="$kvc_d"; kvc_$1_cc="$kvc_d/bin/$2"; break])
                  done
                  AS_IF([test -z "$kvc_$1_cc"], [AC_PATH_PROG([kvc_$1_path], [$2], [])
                    AS_IF([test -n "$kvc_$1_path"], [kvc_$1_cc="$kvc_$1_path"
                                                    kvc_$1_dir=`dirname "$kvc_$1_path"`; kvc_$1_dir=`dirname "$kvc_$1_dir"`])])],
    [AS_IF([test -x "$with_$1/bin/$2"], [kvc_$1_dir="$with_$1"; kvc_$1_cc="$with_$1/bin/$2"])])
  AC_MSG_CHECKING([for the $1 compiler])
  AS_IF([test -n "$kvc_$1_cc"], [AC_MSG_RESULT([$kvc_$1_cc])], [AC_MSG_RESULT([no])])
  AS_IF([test -z "$kvc_$1_cc" && test "$with_$1" != no && test "$with_$1" != guess],
        [AC_MSG_ERROR([--with-$1=$with_$1 was requested but $2 was not found there: $4])])
])

AC_DEFUN([KVC_CHECK_CUDA], [
  KVC_GPU_WITH([cuda], [nvcc], [/usr/local/cuda /opt/cuda],
               [pass --with-cuda=DIR (the CUDA Toolkit root, holding bin/nvcc) or --without-cuda])
  AC_ARG_WITH([cuda-arch],
    [AS_HELP_STRING([--with-cuda-arch=LIST], [CUDA SM list, e.g. "80 90" (default: 75 80 86 89 90 and the newest SM nvcc knows, PTX of 90 and of the newest)])],
    [], [with_cuda_arch=default])
  kvc_build_cuda=no
  AS_IF([test -n "$kvc_cuda_cc"], [
    # Link the CUDA runtime statically into the module (as NCCL does): a GPU node needs only the driver.
    AS_IF([test -f "$kvc_cuda_dir/lib64/libcudart_static.a"], [CUDA_LIBDIR="$kvc_cuda_dir/lib64"],
          [test -f "$kvc_cuda_dir/lib/libcudart_static.a"], [CUDA_LIBDIR="$kvc_cuda_dir/lib"],
          [AS_IF([test "$with_cuda" != guess], [AC_MSG_ERROR([libcudart_static.a not found under $kvc_cuda_dir])])
           kvc_cuda_cc=])
  ])
  AS_IF([test -n "$kvc_cuda_cc"], [
    kvc_nvcc_archs=`"$kvc_cuda_cc" --list-gpu-arch 2>/dev/null | sed -n 's/^compute_//p' | tr '\n' ' '`
    # The newest SM this nvcc knows (CUDA 13.0: 121), so a current GPU runs native code.
    kvc_nvcc_newest=`echo $kvc_nvcc_archs | tr ' ' '\n' | sort -n | tail -1`
    kvc_ptx_extra=
    AS_IF([test "$with_cuda_arch" = default || test "$with_cuda_arch" = yes],
          [kvc_want="75 80 86 89 90"
           AS_IF([test -n "$kvc_nvcc_newest" && test "$kvc_nvcc_newest" -gt 90],
                 [kvc_want="$kvc_want $kvc_nvcc_newest"
                  # PTX of sm_90 too: the GPUs between 90 and the newest (sm_100, sm_103, sm_120, ...) JIT it.
                  kvc_ptx_extra=90])],
          [kvc_want=`echo "$with_cuda_arch" | tr ',;' '  '`])
    CUDA_GENCODE=
    kvc_last=
    for kvc_a in $kvc_want; do
      AS_CASE([" $kvc_nvcc_archs "], [*" $kvc_a "*],
        [CUDA_GENCODE="$CUDA_GENCODE -gencode arch=compute_$kvc_a,code=sm_$kvc_a"; kvc_last=$kvc_a],
        [AS_IF([test "$with_cuda_arch" != default],
               [AC_MSG_ERROR([CUDA architecture sm_$kvc_a is not supported by $kvc_cuda_cc (it knows: $kvc_nvcc_archs)])])])
    done
    AS_IF([test -z "$kvc_last"], [AC_MSG_ERROR([no usable CUDA architecture (nvcc knows: $kvc_nvcc_archs)])])
    # PTX of the newest architecture for forward compatibility.
    AS_IF([test -n "$kvc_ptx_extra"],
          [CUDA_GENCODE="$CUDA_GENCODE -gencode arch=compute_$kvc_ptx_extra,code=compute_$kvc_ptx_extra"])
    CUDA_GENCODE="$CUDA_GENCODE -gencode arch=compute_$kvc_last,code=compute_$kvc_last"
    NVCC="$kvc_cuda_cc"
    CUDA_CPPFLAGS="-I$kvc_cuda_dir/include"
    CUDA_LDFLAGS="-L$CUDA_LIBDIR"
    CUDA_LIBS="-lcudart_static -ldl -lrt -lpthread"
    kvc_build_cuda=yes
  ])
  AC_SUBST([NVCC])
  AC_SUBST([CUDA_GENCODE])
  AC_SUBST([CUDA_CPPFLAGS])
  AC_SUBST([CUDA_LDFLAGS])
  AC_SUBST([CUDA_LIBS])
  AM_CONDITIONAL([KVC_BUILD_CUDA], [test "$kvc_build_cuda" = yes])
  AS_IF([test "$kvc_build_cuda" = yes],
        [KVC_SUMMARY_ADD([CUDA module], [yes ($NVCC;$CUDA_GENCODE)])],
        [KVC_SUMMARY_ADD([CUDA module], [no])])
])

AC_DEFUN([KVC_CHECK_HIP], [
  KVC_GPU_WITH([hip], [hipcc], [/opt/rocm],
               [pass --with-hip=DIR (the ROCm root, holding bin/hipcc) or --without-hip; Debian: apt-get install hipcc])
  AC_ARG_WITH([amdgpu-target],
    [AS_HELP_STRING([--with-amdgpu-target=LIST], [AMD GPU targets (default: gfx90a gfx942 gfx1030, those the compiler knows)])],
    [], [with_amdgpu_target=default])
  kvc_build_hip=no
  AS_IF([test -n "$kvc_hip_cc"], [
    AS_IF([test "$with_amdgpu_target" = default || test "$with_amdgpu_target" = yes],
          [kvc_targets="gfx90a gfx942 gfx1030"], [kvc_targets=`echo "$with_amdgpu_target" | tr ',;' '  '`])
    # Each target is tried on a one-line kernel: a default target this hipcc does not know (gfx942,
    # MI300, needs a newer ROCm than Debian's 5.2) is left out and said so; a requested one is an error.
    HIP_OFFLOAD=
    kvc_hip_dropped=
    printf '#include <hip/hip_runtime.h>\n__global__ void k(int *p) { p@<:@threadIdx.x@:>@ = 1; }\n' >conftest.hip
    for kvc_t in $kvc_targets; do
      AC_MSG_CHECKING([whether $kvc_hip_cc compiles for $kvc_t])
      AS_IF(["$kvc_hip_cc" -x hip --offload-arch=$kvc_t -c conftest.hip -o conftest.$OBJEXT >/dev/null 2>&1],
        [AC_MSG_RESULT([yes]); HIP_OFFLOAD="$HIP_OFFLOAD --offload-arch=$kvc_t"],
        [AC_MSG_RESULT([no])
         AS_IF([test "$with_amdgpu_target" != default && test "$with_amdgpu_target" != yes],
               [AC_MSG_ERROR([$kvc_hip_cc cannot compile for the requested AMD target $kvc_t])])
         kvc_hip_dropped="$kvc_hip_dropped $kvc_t"])
    done
    rm -f conftest.hip conftest.$OBJEXT
    AS_IF([test -z "$HIP_OFFLOAD"], [AC_MSG_ERROR([$kvc_hip_cc compiles for none of: $kvc_targets])])
    # The module links the HIP runtime by SONAME; search the ROCm root first, then the system.
    kvc_save_LDFLAGS="$LDFLAGS"
    HIP_LDFLAGS=
    AS_IF([test -d "$kvc_hip_dir/lib"], [HIP_LDFLAGS="-L$kvc_hip_dir/lib"])
    LDFLAGS="$LDFLAGS $HIP_LDFLAGS"
    AC_CHECK_LIB([amdhip64], [hipGetDeviceCount], [kvc_build_hip=yes],
      [AS_IF([test "$with_hip" != guess], [AC_MSG_ERROR([libamdhip64 not found for --with-hip=$with_hip])])])
    LDFLAGS="$kvc_save_LDFLAGS"
    HIPCC="$kvc_hip_cc"
    HIP_LIBS="-lamdhip64"
  ])
  AC_SUBST([HIPCC])
  AC_SUBST([HIP_OFFLOAD])
  AC_SUBST([HIP_LDFLAGS])
  AC_SUBST([HIP_LIBS])
  AM_CONDITIONAL([KVC_BUILD_HIP], [test "$kvc_build_hip" = yes])
  AS_IF([test "$kvc_build_hip" = yes],
        [KVC_SUMMARY_ADD([HIP module], [yes ($HIPCC;$HIP_OFFLOAD${kvc_hip_dropped:+; left out, unknown to this hipcc:$kvc_hip_dropped})])],
        [KVC_SUMMARY_ADD([HIP module], [no])])
])

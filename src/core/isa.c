/* SPDX-License-Identifier: BSD-3-Clause */
/* ISA detection: CPUID feature bits *and* XCR0 (the OS must save the wider registers), as Highway
 * does; CPUID alone would pick AVX-512 on kernels that disable it. */
#include "config.h"

#include <pthread.h>
#include <string.h>
#include <strings.h>

#include "env.h"
#include "isa.h"
#include "log.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static unsigned long long read_xcr0(void)
{
    unsigned eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}

kvc_isa_t kvc_isa_detect(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return KVC_ISA_SCALAR;
    const int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1, avx = (c >> 28) & 1;
    const int popcnt = (c >> 23) & 1;
    if (!osxsave || !avx) return KVC_ISA_SCALAR;
    const unsigned long long xcr0 = read_xcr0();
    if ((xcr0 & 0x6) != 0x6) return KVC_ISA_SCALAR; /* XMM and YMM state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return KVC_ISA_SCALAR;
    const int avx2 = (b >> 5) & 1, bmi1 = (b >> 3) & 1, bmi2 = (b >> 8) & 1;
    const int avx512f = (b >> 16) & 1, avx512dq = (b >> 17) & 1, avx512bw = (b >> 30) & 1, avx512vl = (b >> 31) & 1;
    const int avx512cd = (b >> 28) & 1; /* vplzcntd: the lane-parallel arithmetic decoder */
    unsigned ea, eb, ec, ed;
    const int lzcnt = __get_cpuid(0x80000001u, &ea, &eb, &ec, &ed) && ((ec >> 5) & 1);
    /* The avx2 tier's kernels are compiled with all of these (KVC_AVX2_FLAGS in Makefile.am). */
    if (!(avx2 && fma && f16c && bmi1 && bmi2 && popcnt && lzcnt)) return KVC_ISA_SCALAR;
    if (avx512f && avx512cd && avx512dq && avx512bw && avx512vl && (xcr0 & 0xe0) == 0xe0) return KVC_ISA_AVX512;
    return KVC_ISA_AVX2;
}
#elif defined(__aarch64__)
kvc_isa_t kvc_isa_detect(void) { return KVC_ISA_NEON; }
#else
kvc_isa_t kvc_isa_detect(void) { return KVC_ISA_SCALAR; }
#endif

const char *kvc_isa_name(kvc_isa_t isa)
{
    switch (isa) {
    case KVC_ISA_AVX512: return "avx512";
    case KVC_ISA_AVX2: return "avx2";
    case KVC_ISA_NEON: return "neon";
    default: return "scalar";
    }
}

int kvc_isa_parse(const char *name)
{
    if (!name || !*name || !strcasecmp(name, "best")) return (int)kvc_isa_detect();
    static const kvc_isa_t all[] = { KVC_ISA_SCALAR, KVC_ISA_NEON, KVC_ISA_AVX2, KVC_ISA_AVX512 };
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (!strcasecmp(name, kvc_isa_name(all[i]))) return (int)all[i];
    return -1;
}

kvc_isa_t kvc_isa_select(void)
{
    const kvc_isa_t best = kvc_isa_detect();
    const char *cap = kvc_env_get("KVCORE_ISA");
    int want = kvc_isa_parse(cap);
    if (want < 0) {
        KVC_WARN("KVCORE_ISA=%s is not scalar|avx2|avx512|neon|best; using %s", cap, kvc_isa_name(best));
        want = (int)best;
    }
    /* A cap never raises the tier above what the CPU supports; NEON and x86 tiers do not mix. */
    if (want == KVC_ISA_NEON && best != KVC_ISA_NEON) want = KVC_ISA_SCALAR;
    if (best == KVC_ISA_NEON && want > KVC_ISA_NEON) want = KVC_ISA_NEON;
    return (kvc_isa_t)want > best ? best : (kvc_isa_t)want;
}

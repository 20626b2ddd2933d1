/* SPDX-License-Identifier: BSD-3-Clause */
/* The one table of environment knobs; `kvcore info` prints it. */
#include "config.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include <kvcore/context.h>

#include "env.h"

typedef struct {
    const char *name;
    const char *default_value;
    const char *help;
} knob_t;

static const knob_t knobs[] = {
    { "KVCORE_BACKEND", "auto", "force a backend: auto|cpu|cuda|hip (a forced backend that cannot start is an error)" },
    { "KVCORE_MODULE_PATH", KVC_MODULE_DIR, "directory searched for the GPU backend modules kvcore_<name>.so" },
    { "KVCORE_LOG_LEVEL", "off", "log level: off|error|warn|info|debug|trace (to stderr)" },
    { "KVCORE_ISA", "best", "cap the CPU SIMD tier: scalar|avx2|avx512|neon|best" },
    { "KVCORE_NUM_THREADS", "OpenMP default", "CPU threads used by the CPU backend (at most 4 per usable CPU)" },
    { "KVCORE_DEVICE", "0", "device ordinal used by a GPU backend" },
    { "KVCORE_STREAM_MIN_BYTES", "3/4 of the LLC", "CPU transfers moving more bytes than this write with streaming stores" },
    { "HWLOC_XMLFILE", "(real machine)", "load the topology from an hwloc XML file instead (testing)" },
};

const char *kvc_env_get(const char *name)
{
#ifndef NDEBUG
    int found = 0;
    for (size_t i = 0; i < sizeof(knobs) / sizeof(knobs[0]); i++)
        if (!strcmp(knobs[i].name, name)) found = 1;
    assert(found && "environment knob missing from the table in env.c");
#endif
    return getenv(name);
}

KVC_API size_t kvc_env_knob_count(void) { return sizeof(knobs) / sizeof(knobs[0]); }

KVC_API kvc_status_t kvc_env_knob_get(size_t index, kvc_env_knob_t *out)
{
    if (!out || index >= kvc_env_knob_count()) return KVC_ERR_INVALID_ARG;
    out->name = knobs[index].name;
    out->default_value = knobs[index].default_value;
    out->help = knobs[index].help;
    out->value = getenv(knobs[index].name);
    return KVC_OK;
}

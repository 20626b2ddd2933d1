/* SPDX-License-Identifier: BSD-3-Clause */
/* Logging (KVCORE_LOG_LEVEL) and the per-thread last-error message. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <pthread.h>

#include <kvcore/context.h>

#include "env.h"
#include "log.h"

int kvc_log_level_g = KVC_LOG_OFF;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static _Thread_local char last_error[512];

static const char *const level_names[] = { "off", "error", "warn", "info", "debug", "trace" };

static void log_init_once(void)
{
    const char *v = kvc_env_get("KVCORE_LOG_LEVEL");
    if (!v || !*v) return;
    for (int i = 0; i <= KVC_LOG_TRACE; i++)
        if (!strcasecmp(v, level_names[i])) { kvc_log_level_g = i; return; }
    char *end;
    long n = strtol(v, &end, 10);
    if (*end == '\0' && n >= 0 && n <= KVC_LOG_TRACE) kvc_log_level_g = (int)n;
    else fprintf(stderr, "kvcore: warn: KVCORE_LOG_LEVEL=%s is not one of off|error|warn|info|debug|trace\n", v);
}

void kvc_log_init(void) { pthread_once(&log_once, log_init_once); }

int kvc_log_enabled(int level) { return kvc_log_level_g >= level; }

static void vemit(int level, const char *component, const char *fmt, va_list ap)
{
    char buf[1024];
    vsnprintf(buf, sizeof(buf), fmt, ap);
    fprintf(stderr, "kvcore[%s] %s: %s\n", component, level_names[level < 0 ? 0 : level > 5 ? 5 : level], buf);
}

void kvc_log_emit(int level, const char *component, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vemit(level, component, fmt, ap);
    va_end(ap);
}

kvc_status_t kvc_error(kvc_status_t status, const char *fmt, ...)
{
    /* Format into a copy first: callers may pass kvc_last_error() itself as an argument (a
     * backend's reason wrapped with the core's context), which would overlap the output. */
    char msg[sizeof(last_error)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    memcpy(last_error, msg, sizeof(msg));
    if (kvc_log_level_g >= KVC_LOG_ERROR)
        kvc_log_emit(KVC_LOG_ERROR, "core", "%s: %s", kvc_status_name(status), last_error);
    return status;
}

KVC_API const char *kvc_last_error(void) { return last_error; }

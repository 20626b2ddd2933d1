/* SPDX-License-Identifier: BSD-3-Clause */
/* Logging and error reporting inside the core. Logging is off by default and costs one integer
 * compare when off (the level check happens before any formatting). */
#ifndef KVC_CORE_LOG_H
#define KVC_CORE_LOG_H

#include <kvcore/status.h>

enum { KVC_LOG_OFF = 0, KVC_LOG_ERROR = 1, KVC_LOG_WARN = 2, KVC_LOG_INFO = 3, KVC_LOG_DEBUG = 4, KVC_LOG_TRACE = 5 };

extern int kvc_log_level_g;

void kvc_log_init(void);
int kvc_log_enabled(int level);
void kvc_log_emit(int level, const char *component, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define KVC_LOG(level, ...)                                                                                  \
    do {                                                                                                     \
        if (__builtin_expect(kvc_log_level_g >= (level), 0)) kvc_log_emit((level), "core", __VA_ARGS__);     \
    } while (0)
#define KVC_ERROR(...) KVC_LOG(KVC_LOG_ERROR, __VA_ARGS__)
#define KVC_WARN(...) KVC_LOG(KVC_LOG_WARN, __VA_ARGS__)
#define KVC_INFO(...) KVC_LOG(KVC_LOG_INFO, __VA_ARGS__)
#define KVC_DEBUG(...) KVC_LOG(KVC_LOG_DEBUG, __VA_ARGS__)

/* Record the detailed message of an error (kvc_last_error) and log it at debug level; returns
 * status so call sites read `return kvc_error(KVC_ERR_OUT_OF_RANGE, "slot_mapping[%zu] = ...", ...)`. */
kvc_status_t kvc_error(kvc_status_t status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Map an errno value to a status (the one place that does it). */
kvc_status_t kvc_status_from_errno(int err);

#endif

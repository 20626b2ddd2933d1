/* SPDX-License-Identifier: BSD-3-Clause */
/* Symbol export macro: the library is built with -fvisibility=hidden; only KVC_API symbols are exported. */
#ifndef KVCORE_EXPORT_H
#define KVCORE_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define KVC_API __attribute__((visibility("default")))
#else
#define KVC_API
#endif

#endif

/* SPDX-License-Identifier: BSD-3-Clause */
/* Embedded demo data: real K/V caches of stories260K (data/README.md). */
#ifndef KVC_CLI_DEMO_DATA_H
#define KVC_CLI_DEMO_DATA_H

extern const unsigned char kvc_demo_k_npy[], kvc_demo_k_npy_end[];
extern const unsigned char kvc_demo_v_npy[], kvc_demo_v_npy_end[];

#endif

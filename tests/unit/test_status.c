/* SPDX-License-Identifier: BSD-3-Clause */
/* Status codes: every value has a distinct name and string; unknown values are handled. */
#include <string.h>

#include <criterion/criterion.h>
#include <kvcore.h>

Test(status, every_code_has_name_and_text)
{
    for (int s = 0; s >= KVC_STATUS_MIN; s--) {
        const char *name = kvc_status_name((kvc_status_t)s);
        const char *text = kvc_status_string((kvc_status_t)s);
        cr_assert_str_neq(name, "KVC_UNKNOWN", "status %d has no name", s);
        cr_assert_str_neq(text, "unknown status", "status %d has no text", s);
        for (int t = s + 1; t <= 0; t++) {
            cr_assert_str_neq(name, kvc_status_name((kvc_status_t)t), "duplicate name for %d and %d", s, t);
            cr_assert_str_neq(text, kvc_status_string((kvc_status_t)t), "duplicate text for %d and %d", s, t);
        }
    }
}

Test(status, known_values_are_stable)
{
    cr_assert_eq(KVC_OK, 0);
    cr_assert_eq(KVC_ERR_INVALID_ARG, -1);
    cr_assert_eq(KVC_ERR_UNSUPPORTED, -3);
    cr_assert_eq(KVC_ERR_CORRUPT, -7);
    cr_assert_str_eq(kvc_status_name(KVC_ERR_NO_SPACE), "KVC_ERR_NO_SPACE");
    cr_assert_str_eq(kvc_status_string(KVC_ERR_OUT_OF_RANGE), "index out of range");
}

Test(status, unknown_values)
{
    cr_assert_str_eq(kvc_status_string((kvc_status_t)1), "unknown status");
    cr_assert_str_eq(kvc_status_string((kvc_status_t)(KVC_STATUS_MIN - 1)), "unknown status");
    cr_assert_str_eq(kvc_status_name((kvc_status_t)12345), "KVC_UNKNOWN");
}

Test(status, version)
{
    cr_assert_eq(kvc_version(), KVC_VERSION_NUMBER);
    cr_assert_str_eq(kvc_version_string(), KVC_VERSION_STRING);
}

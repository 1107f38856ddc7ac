/* Unit tests: error names and version. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "rcpipe.h"

START_TEST(strerror_distinct)
{
    int i, j;
    for (i = 0; i < RCP_ERR__COUNT; i++) {
        ck_assert_ptr_nonnull(rcp_strerror(i));
        ck_assert_int_gt((int)strlen(rcp_strerror(i)), 0);
        for (j = 0; j < i; j++)
            ck_assert_str_ne(rcp_strerror(i), rcp_strerror(j));
    }
    ck_assert_str_eq(rcp_strerror(-1), "unknown error code");
    ck_assert_str_eq(rcp_strerror(RCP_ERR__COUNT), "unknown error code");
    ck_assert_str_eq(rcp_strerror(RCP_OK), "success");
}
END_TEST

START_TEST(version)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%d.%d.%d", RCP_VERSION_MAJOR, RCP_VERSION_MINOR, RCP_VERSION_PATCH);
    ck_assert_str_eq(rcp_version(), buf);
    ck_assert_int_eq(rcp_version_number(), RCP_VERSION_NUMBER);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("errors");
    TCase *tc = rcptest_tcase(s, "core", 0);

    RCPTEST_ADD(tc, strerror_distinct, version);
    return rcptest_run(s) ? 1 : 0;
}

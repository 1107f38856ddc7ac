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

START_TEST(names_of_codes_and_events)
{
    int i, j;
    ck_assert_str_eq(rcp_err_name(RCP_OK), "RCP_OK");
    ck_assert_str_eq(rcp_err_name(RCP_ERR_IO), "RCP_ERR_IO");
    ck_assert_str_eq(rcp_err_name(RCP_ERR_REDIRECT_LIMIT), "RCP_ERR_REDIRECT_LIMIT");
    ck_assert_str_eq(rcp_err_name(RCP_ERR_CANCELLED), "RCP_ERR_CANCELLED");
    ck_assert_str_eq(rcp_err_name(RCP_ERR_SINK), "RCP_ERR_SINK");
    /* Appended only: a released code keeps its number. */
    ck_assert_int_eq(RCP_ERR_TYPE, 18);
    ck_assert_int_eq(RCP_ERR_CANCELLED, 19);
    ck_assert_int_eq(RCP_ERR_SINK, 20);
    ck_assert_str_eq(rcp_err_name(-1), "RCP_ERR_UNKNOWN");
    ck_assert_str_eq(rcp_err_name(RCP_ERR__COUNT), "RCP_ERR_UNKNOWN");
    for (i = 1; i < RCP_ERR__COUNT; i++) {
        ck_assert_msg(strncmp(rcp_err_name(i), "RCP_ERR_", 8) == 0 &&
                          strcmp(rcp_err_name(i), "RCP_ERR_UNKNOWN") != 0,
                      "code %d has no name", i);
        for (j = 0; j < i; j++)
            ck_assert_str_ne(rcp_err_name(i), rcp_err_name(j));
    }
    ck_assert_str_eq(rcp_event_name(RCP_EVENT_CONNECTED), "RCP_EVENT_CONNECTED");
    ck_assert_str_eq(rcp_event_name(RCP_EVENT_CLOSED), "RCP_EVENT_CLOSED");
    ck_assert_str_eq(rcp_event_name(RCP_EVENT_MAP_UPDATED), "RCP_EVENT_MAP_UPDATED");
    ck_assert_str_eq(rcp_event_name(RCP_EVENT_REFRESH_FAILED), "RCP_EVENT_REFRESH_FAILED");
    ck_assert_str_eq(rcp_event_name(RCP_EVENT_PUBSUB_INTERRUPTED), "RCP_EVENT_PUBSUB_INTERRUPTED");
    ck_assert_str_eq(rcp_event_name(RCP_EVENT_PUBSUB_RESUBSCRIBED),
                     "RCP_EVENT_PUBSUB_RESUBSCRIBED");
    ck_assert_str_eq(rcp_event_name(0), "RCP_EVENT_UNKNOWN");
    ck_assert_str_eq(rcp_event_name(5), "RCP_EVENT_UNKNOWN");
    ck_assert_str_eq(rcp_event_name(34), "RCP_EVENT_UNKNOWN");
    ck_assert_str_eq(rcp_event_name(-3), "RCP_EVENT_UNKNOWN");
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

    RCPTEST_ADD(tc, strerror_distinct, names_of_codes_and_events, version);
    return rcptest_run(s) ? 1 : 0;
}

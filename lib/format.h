/* lib/format.h: RESP request formatting and the check that refuses
 * commands a shared pipelined connection cannot carry. */
#ifndef RCP_FORMAT_H
#define RCP_FORMAT_H

#include <stdarg.h>
#include <stddef.h>

/* Bytes of the RESP encoding of argv (argvlen NULL: strlen of each). */
size_t rcp__format_len(int argc, const char **argv, const size_t *argvlen);

/* Writes exactly rcp__format_len bytes to dst; returns dst + that length. */
char *rcp__format_write(char *dst, int argc, const char **argv, const size_t *argvlen);

/* The head of a command whose last argument streams from a source
 * (conn_source.c): "*<argc+1>", argv, then "$<vlen>\r\n". Its length,
 * and the writer of exactly that many bytes (returns dst + that). */
size_t rcp__format_source_len(int argc, const char **argv, const size_t *argvlen, size_t vlen);
char *rcp__format_source_write(char *dst, int argc, const char **argv, const size_t *argvlen,
                               size_t vlen);

/* Formats argv into dst in one pass when it surely fits in cap bytes,
 * returning the length written; 0 (nothing usable written) when it may
 * not fit: the caller then sizes a buffer with rcp__format_len and calls
 * rcp__format_write. For a caller with a buffer at hand (a wrapped
 * future's inline bytes, a stack buffer), it saves the length pass. */
size_t rcp__format_try(char *dst, size_t cap, int argc, const char **argv,
                       const size_t *argvlen);

/* printf-like formatting with hiredis's conventions: arguments separated
 * by spaces; %s a C string, %b a pointer and a size_t length (binary
 * safe), %% a percent sign, and integer (d i o u x X, with hh h l ll) and
 * double (e f g a) conversions. On success RCP_OK and a buffer from the
 * library allocator in *out, *outlen bytes. A NULL %s, a NULL %b pointer
 * with a non-zero length, an unknown conversion or an empty command give
 * RCP_ERR_INVALID with *why (if why is not NULL) naming the argument. */
int rcp__format_vprintf(char **out, size_t *outlen, const char *fmt, va_list ap,
                        const char **why);

/* A command built from a hiredis-style format: the formatted bytes (from
 * the library allocator, the caller frees buf) and its arguments split back
 * out of them (pointers into buf), for screening and routing. */
#define RCP__FMT_MAX_ARGS 256
typedef struct rcp__fmt_cmd {
    char *buf;
    size_t len;
    int argc;
    const char *argv[RCP__FMT_MAX_ARGS];
    size_t argvlen[RCP__FMT_MAX_ARGS];
} rcp__fmt_cmd;

/* RCP_OK and *out filled, or an error (nothing to free) with *why set when
 * there is more to say than the code. */
int rcp__format_command(rcp__fmt_cmd *out, const char *fmt, va_list ap, const char **why);

/* Splits a request we formatted ourselves back into arguments: at most
 * `max` of them are reported (pointers into buf); returns the total argc,
 * or -1 if buf is not a RESP array of bulk strings. */
int rcp__format_split(const char *buf, size_t len, const char **argv, size_t *argvlen, int max);

/* RCP_OK, RCP_ERR_BLOCKING_COMMAND or RCP_ERR_UNSUPPORTED; *why gets static
 * text explaining a refusal. The command table's rcp__cmd_screen, for a
 * caller that has not looked the command up. */
int rcp__command_check(int argc, const char **argv, const size_t *argvlen, const char **why);

/* A command for a dedicated use (a queued transaction or batch command, a
 * node-wide command): argv checked (argc >= 1, no NULL element), screened
 * (rcp__command_check), at most max_bytes formatted, then formatted into a
 * new buffer from the library allocator. RCP_OK and *buf, *len, or the
 * refusal's code and nothing allocated. */
int rcp__format_new(int argc, const char **argv, const size_t *argvlen, size_t max_bytes,
                    char **buf, size_t *len);

/* Case-insensitive compare of a counted string with a C string. */
int rcp__arg_is(const char *arg, size_t len, const char *word);

#endif

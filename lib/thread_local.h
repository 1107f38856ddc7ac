/* lib/thread_local.h: RCP__THREAD_LOCAL, for the small per-thread state
 * read on every request (the last command looked up, the reply cache, the
 * "on a loop thread" mark, the replica seed). In a shared library a plain
 * _Thread_local is reached through __tls_get_addr (about 100 instructions
 * per cluster request in all); the initial-exec model makes each access one
 * load from the thread pointer. The cost: these variables take static TLS
 * space, which a program that dlopen()s librcpipe draws from glibc's
 * reserve (rtld.optional_static_tls, 512 bytes by default); they hold
 * about 110 bytes (the command look-up's memory of the last name and of
 * rcp__cmd_key1's answer, one struct, are 56 of them). Larger per-thread
 * buffers (refusal messages) stay plain _Thread_local. */
#ifndef RCP_THREAD_LOCAL_H
#define RCP_THREAD_LOCAL_H

#if defined(__GNUC__) || defined(__clang__)
#define RCP__THREAD_LOCAL _Thread_local __attribute__((tls_model("initial-exec")))
#else
#define RCP__THREAD_LOCAL _Thread_local
#endif

#endif

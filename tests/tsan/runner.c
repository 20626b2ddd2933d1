/* SPDX-License-Identifier: BSD-3-Clause */
/* Runner of the Criterion stand-in (criterion/criterion.h): every registered test in a forked
 * child, TAP on stdout. A ThreadSanitizer report makes the child exit with TSan's exitcode (66)
 * and the test fail. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "criterion/criterion.h"

#define MAX_TESTS 256

static kvc_shim_test_t tests[MAX_TESTS];
static int ntests;

void kvc_shim_register(const char *suite, const char *name, void (*fn)(void))
{
    if (ntests == MAX_TESTS) {
        fprintf(stderr, "too many tests\n");
        abort();
    }
    tests[ntests++] = (kvc_shim_test_t){ suite, name, fn };
}

void kvc_shim_msg(const char *fmt, ...)
{
    if (!*fmt) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int main(void)
{
    int failed = 0;
    printf("1..%d\n", ntests);
    fflush(stdout);
    for (int i = 0; i < ntests; i++) {
        const pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 99;
        }
        if (pid == 0) {
            tests[i].fn();
            exit(0);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (code == 0) printf("ok %d - %s::%s\n", i + 1, tests[i].suite, tests[i].name);
        else if (code == 77) printf("ok %d - %s::%s # SKIP\n", i + 1, tests[i].suite, tests[i].name);
        else {
            printf("not ok %d - %s::%s (exit %d%s)\n", i + 1, tests[i].suite, tests[i].name, code,
                   code == 66 ? ": ThreadSanitizer report" : "");
            failed = 1;
        }
        fflush(stdout);
    }
    return failed;
}

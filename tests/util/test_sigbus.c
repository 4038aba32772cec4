/* test_sigbus.c — the CLI's SIGBUS report (tools/dsv4/sigbus.c): a child maps a file,
 * the file is truncated, the child touches a page past the new end; it must exit with
 * status 1 (not die by the signal) after naming the file and the offset. */
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model/model_tmp.h"
#include "sigbus.h"
#include "test.h"

int main(void) {
    char dir[256], path[512], log[512];
    CHECK(tmp_dir(dir, sizeof dir, "sigbus") != NULL);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(log, sizeof log, "%s/stderr.txt", dir);
    static char page[3 * 4096];
    memset(page, 7, sizeof page);
    CHECK(write_all(path, page, sizeof page) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        int lf = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(lf, 2);
        cli_install_sigbus();
        int fd = open(path, O_RDONLY);
        const volatile char *p = mmap(NULL, sizeof page, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) _exit(9);
        if (truncate(path, 4096) != 0) _exit(8);
        char c = p[2 * 4096 + 100]; /* past the new end: SIGBUS */
        _exit(c == 7 ? 7 : 6);       /* not reached */
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 1, "child status 0x%x", st);
    size_t n = 0;
    char *out = read_all(log, &n);
    CHECK_MSG(out && strstr(out, "SIGBUS reading ") && strstr(out, path) && strstr(out, "at offset 8292") &&
                  strstr(out, "changed (truncated or rewritten)"),
              "stderr: %s", out ? out : "(none)");
    free(out);
    tmp_rm(dir);
    return test_report();
}

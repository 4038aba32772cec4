/* sigbus.c — the SIGBUS report (see sigbus.h). Everything in the handler is async-signal-
 * safe: no stdio, no malloc; /proc/self/maps is parsed from a fixed buffer. */
#include "sigbus.h"

#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

static void put(const char *s) { (void)!write(2, s, strlen(s)); }

static void put_hex(uintptr_t v) {
    char b[2 + 16 + 1], *p = b + sizeof b - 1;
    *p = 0;
    do { *--p = "0123456789abcdef"[v & 15]; v >>= 4; } while (v);
    *--p = 'x';
    *--p = '0';
    put(p);
}

static void put_dec(uint64_t v) {
    char b[24], *p = b + sizeof b - 1;
    *p = 0;
    do { *--p = (char)('0' + v % 10); v /= 10; } while (v);
    put(p);
}

static uintptr_t parse_hex(const char **s) {
    uintptr_t v = 0;
    for (;; (*s)++) {
        const char c = **s;
        const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return v;
        v = v << 4 | (uintptr_t)d;
    }
}

/* One line of /proc/self/maps: "lo-hi perms offset dev inode   path". If addr is in
 * [lo, hi) reports it and returns 1. */
static int check_line(const char *line, uintptr_t addr) {
    const char *s = line;
    const uintptr_t lo = parse_hex(&s);
    if (*s++ != '-') return 0;
    const uintptr_t hi = parse_hex(&s);
    if (addr < lo || addr >= hi) return 0;
    while (*s && *s != ' ') s++; /* perms */
    while (*s == ' ') s++;
    const uintptr_t off = parse_hex(&s);
    for (int field = 0; field < 2; field++) { /* dev, inode */
        while (*s == ' ') s++;
        while (*s && *s != ' ') s++;
    }
    while (*s == ' ') s++;
    put("dsv4: SIGBUS reading ");
    put(*s ? s : "an anonymous mapping");
    put(" at offset ");
    put_dec((uint64_t)(addr - lo + off));
    put(": the file changed (truncated or rewritten) while it was mapped; do not modify a "
        "checkpoint while dsv4 uses it\n");
    return 1;
}

static void on_sigbus(int sig, siginfo_t *si, void *ctx) {
    (void)sig; (void)ctx;
    const uintptr_t addr = (uintptr_t)si->si_addr;
    int found = 0;
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        static char buf[8192]; /* the handler runs once: a static buffer is its stack */
        size_t have = 0;
        for (;;) {
            ssize_t got = read(fd, buf + have, sizeof buf - 1 - have);
            if (got <= 0) break;
            have += (size_t)got;
            buf[have] = 0;
            char *line = buf, *nl;
            while (!found && (nl = strchr(line, '\n'))) {
                *nl = 0;
                found = check_line(line, addr);
                line = nl + 1;
            }
            if (found) break;
            have = (size_t)(buf + have - line); /* keep the partial last line */
            memmove(buf, line, have);
            if (have == sizeof buf - 1) have = 0; /* a line longer than the buffer */
        }
        close(fd);
    }
    if (!found) {
        put("dsv4: SIGBUS at address ");
        put_hex(addr);
        put(": a memory-mapped file changed (truncated or rewritten) while it was mapped\n");
    }
    _exit(1);
}

int cli_install_sigbus(void) {
    static char stack[1 << 16]; /* the handler may run after a stack overflow elsewhere */
    stack_t ss = {.ss_sp = stack, .ss_size = sizeof stack, .ss_flags = 0};
    if (sigaltstack(&ss, NULL) != 0) return -1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    return sigaction(SIGBUS, &sa, NULL);
}

/* test_util_file.c — files that are not regular (issue 14 item 6) and read errors with
 * their reason (item 5): a FIFO named config.json, model.safetensors or tokenizer.json is
 * refused at once (an alarm fails the test if anything blocks), so are directories; the
 * general reader (prompt files: pipes allowed) names the reason of a read error. */
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dsv4.h"
#include "dsv4_text.h"
#include "model/model_tmp.h"
#include "test.h"
#include "util/file.h"

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "test_util_file: blocked on a FIFO\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(1);
}

/* dir with config.json copied from the tiny golden and `fifo` created as a FIFO. */
static void model_with_fifo(const char *dir, const char *fifo) {
    char src[1024], p[1200];
    size_t n = 0;
    snprintf(p, sizeof p, "%s/config.json", test_shared("golden/tiny_s0/model", src, sizeof src));
    char *cfg = read_all(p, &n);
    CHECK(cfg != NULL);
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (strcmp(fifo, "config.json") != 0) CHECK(cfg && write_all(p, cfg, n) == 0);
    free(cfg);
    snprintf(p, sizeof p, "%s/%s", dir, fifo);
    CHECK(mkfifo(p, 0600) == 0);
}

int main(void) {
    signal(SIGALRM, on_alarm);
    alarm(20);
    const char *names[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        char dir[256];
        CHECK(tmp_dir(dir, sizeof dir, "fifo") != NULL);
        model_with_fifo(dir, names[i]);
        dsv4_model *m = NULL;
        dsv4_err err = {0};
        int rc = dsv4_model_open(dir, &m, &err);
        CHECK_MSG(rc != 0 && strstr(err.msg, names[i]) && strstr(err.msg, "is a FIFO, not a regular file"),
                  "%s: rc %d '%s'", names[i], rc, err.msg);
        dsv4_model_close(m);
        tmp_rm(dir);
    }
    /* a FIFO or a directory as tokenizer.json */
    char dir[256], p[512];
    CHECK(tmp_dir(dir, sizeof dir, "tokfifo") != NULL);
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    CHECK(mkfifo(p, 0600) == 0);
    dsv4_err err = {0};
    dsv4_tokenizer *t = NULL;
    int rc = dsv4_tokenizer_load(p, &t, &err);
    CHECK_MSG(rc != 0 && strstr(err.msg, "is a FIFO"), "tokenizer FIFO: rc %d '%s'", rc, err.msg);
    dsv4_tokenizer_free(t);
    unlink(p);
    CHECK(mkdir(p, 0700) == 0);
    rc = dsv4_tokenizer_load(p, &t, &err);
    CHECK_MSG(rc != 0 && strstr(err.msg, "is a directory"), "tokenizer dir: rc %d '%s'", rc, err.msg);
    /* the general reader allows a directory to be opened, then names why it cannot read */
    size_t n = 0;
    char *txt = dsv4_read_file(p, 0, &n, &err);
    CHECK_MSG(!txt && strstr(err.msg, "cannot read: Is a directory"), "read dir: '%s'", err.msg);
    free(txt);
    rmdir(p);
    txt = dsv4_read_regular_file("/nonexistent/dsv4/x.json", 0, &n, &err);
    CHECK_MSG(!txt && strstr(err.msg, "cannot open: No such file or directory"), "'%s'", err.msg);
    tmp_rm(dir);
    return test_report();
}

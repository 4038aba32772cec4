/* cmd_run.c — placeholder until the command lands. */
#include <stdio.h>

#include "commands.h"

int cmd_run(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "dsv4: 'run' is not implemented yet\n");
    return 1;
}

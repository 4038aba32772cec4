/* cmd_generate.c — placeholder until the command lands. */
#include <stdio.h>

#include "commands.h"

int cmd_generate(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "dsv4: 'generate' is not implemented yet\n");
    return 1;
}

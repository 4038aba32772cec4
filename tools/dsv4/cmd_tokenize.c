/* cmd_tokenize.c — placeholder until the command lands. */
#include <stdio.h>

#include "commands.h"

int cmd_tokenize(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "dsv4: 'tokenize' is not implemented yet\n");
    return 1;
}

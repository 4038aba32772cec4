/* cmd_detokenize.c — placeholder until the command lands. */
#include <stdio.h>

#include "commands.h"

int cmd_detokenize(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "dsv4: 'detokenize' is not implemented yet\n");
    return 1;
}

/* cmd_info.c — placeholder until the command lands. */
#include <stdio.h>

#include "commands.h"

int cmd_info(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "dsv4: 'info' is not implemented yet\n");
    return 1;
}

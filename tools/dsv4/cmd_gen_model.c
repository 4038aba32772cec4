/* cmd_gen_model.c — placeholder until the command lands. */
#include <stdio.h>

#include "commands.h"

int cmd_gen_model(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "dsv4: 'gen_model' is not implemented yet\n");
    return 1;
}

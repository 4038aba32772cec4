/* cmd_chat.c — placeholder until the command lands. */
#include <stdio.h>

#include "commands.h"

int cmd_chat(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "dsv4: 'chat' is not implemented yet\n");
    return 1;
}

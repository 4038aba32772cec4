/* commands.h — the dsv4 subcommands; each lives in its own cmd_*.c file.
 * Each returns the process exit status: 0 ok, 1 runtime failure, 2 bad usage. */
#ifndef DSV4_TOOLS_COMMANDS_H
#define DSV4_TOOLS_COMMANDS_H

int cmd_info(int argc, char **argv);
int cmd_gen_model(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv);

#endif

/* The zinc command's subcommands. Each returns the process exit status:
 * 0 success, 1 runtime failure, ZN_EXIT_USAGE (2) usage error. argv[0] is the subcommand. */
#ifndef ZN_CLI_H
#define ZN_CLI_H

int zn_cmd_train(int argc, char **argv);
int zn_cmd_estimate(int argc, char **argv);
int zn_cmd_info(int argc, char **argv);
int zn_cmd_tokenize(int argc, char **argv);
int zn_cmd_generate(int argc, char **argv);
int zn_cmd_merge(int argc, char **argv);
int zn_cmd_bench_nvme(int argc, char **argv);
int zn_cmd_bench_adam(int argc, char **argv);
int zn_cmd_bench_step(int argc, char **argv);

#endif

/*
 * test_config.c - the configuration loader (lib/config.h): every error case
 * is one row of bad_cases[] with the exact message expected, run as its own
 * cmocka test; good cases check the resolved values and defaults; a few
 * tests write files to exercise the *_load() paths.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "strbuf.h"

struct bad_case {
	const char *name;
	const char *kind;     /* cluster, job or sweep */
	const char *yaml;
	const char *want;     /* the whole error line */
};

static const struct bad_case bad_cases[] = {
	/* backend: slurm (docs/slurm-backend.md) */
	{ "backend_unknown", "cluster",
	  "shared_dir: /nfs\nbackend: pbs\nnodes: [local]\n",
	  "t.yaml:2:10: key 'backend': expected 'agents' or 'slurm', found 'pbs'" },
	{ "slurm_with_nodes", "cluster",
	  "shared_dir: /nfs\nbackend: slurm\nnodes: [local]\n",
	  "t.yaml:3:8: key 'nodes': with 'backend: slurm' the nodes come from Slurm (sinfo); "
	  "remove 'nodes:'" },
	{ "partition_without_slurm", "cluster",
	  "shared_dir: /nfs\npartition: gpu\nnodes: [local]\n",
	  "t.yaml:2:12: key 'partition': only with 'backend: slurm' (add it, or remove "
	  "'partition:')" },
	{ "partition_dash", "cluster",
	  "shared_dir: /nfs\nbackend: slurm\npartition: -x\n",
	  "t.yaml:3:12: key 'partition': expected a Slurm name of at most 64 letters, digits, '.', "
	  "'-' and '_' (not starting with '-'), found '-x'" },
	{ "account_space", "cluster",
	  "shared_dir: /nfs\nbackend: slurm\naccount: \"a b\"\n",
	  "t.yaml:3:10: key 'account': expected a Slurm name of at most 64 letters, digits, '.', "
	  "'-' and '_' (not starting with '-'), found 'a b'" },
	{ "slurm_reserved_time", "cluster",
	  "shared_dir: /nfs\nbackend: slurm\nslurm: {constraint: a100, time: 5}\n",
	  "t.yaml:3:27: key 'slurm.time': --time is set by dtctl from the job's timeout:; "
	  "remove it here" },
	{ "slurm_reserved_partition", "cluster",
	  "shared_dir: /nfs\nbackend: slurm\nslurm:\n  partition: gpu\n",
	  "t.yaml:4:3: key 'slurm.partition': --partition is set by dtctl from the top-level key "
	  "'partition:'; remove it here" },
	{ "slurm_short_option", "cluster",
	  "shared_dir: /nfs\nbackend: slurm\nslurm: {C: a100}\n",
	  "t.yaml:3:9: key 'slurm.C': 'C' is not an sbatch option name (a long option without "
	  "its dashes, e.g. 'constraint' for --constraint)" },
	{ "slurm_dashes", "cluster",
	  "shared_dir: /nfs\nbackend: slurm\nslurm: {--mem: 4G}\n",
	  "t.yaml:3:9: key 'slurm.--mem': '--mem' is not an sbatch option name (a long option "
	  "without its dashes, e.g. 'constraint' for --constraint)" },
	{ "slurm_list_value", "cluster",
	  "shared_dir: /nfs\nbackend: slurm\nslurm: {constraint: [a, b]}\n",
	  "t.yaml:3:21: key 'slurm.constraint': expected a single value (true for a flag), found "
	  "a list" },
	{ "slurm_newline_value", "cluster",
	  "shared_dir: /nfs\nbackend: slurm\nslurm: {comment: \"a\\nb\"}\n",
	  "t.yaml:3:18: key 'slurm.comment': expected a value without control characters, found "
	  "'a...'" },
	/* Slurm's warning before the time limit: dtctl's keys in slurm: */
	{ "slurm_warn_signal_term", "cluster",
	  "shared_dir: /nfs\nbackend: slurm\nslurm: {signal: TERM}\n",
	  "t.yaml:3:17: key 'slurm.signal': expected 'USR1', 'USR2', 'SIGUSR1' or 'SIGUSR2', "
	  "found 'TERM'" },
	{ "slurm_warn_s_negative", "cluster",
	  "shared_dir: /nfs\nbackend: slurm\nslurm:\n  warn_s: -5\n",
	  "t.yaml:4:11: key 'slurm.warn_s': expected seconds before the time limit, 0 to 65535 "
	  "(0: no warning), found '-5'" },
	{ "slurm_warn_s_too_big", "cluster",
	  "shared_dir: /nfs\nbackend: slurm\nslurm: {warn_s: 70000}\n",
	  "t.yaml:3:17: key 'slurm.warn_s': expected seconds before the time limit, 0 to 65535 "
	  "(0: no warning), found '70000'" },
	{ "slurm_not_map", "cluster",
	  "shared_dir: /nfs\nbackend: slurm\nslurm: --exclusive\n",
	  "t.yaml:3:8: key 'slurm': expected a mapping of sbatch options, e.g. {constraint: a100}, "
	  "found '--exclusive'" },
	/* values that reach ssh_config, paths or a shell-like context (issue 26, C1-C6) */
	{ "user_newline_proxycommand", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "user: \"dtu\\n    ProxyCommand touch /tmp/x\"\n"
	  "nodes: [local]\n",
	  "t.yaml:3:7: key 'user': expected a user name of at most 32 letters, digits, '.', '_' "
	  "and '-' (not first), found 'dtu...'" },
	{ "node_user_space", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "nodes: [{host: a, user: \"a b\"}]\n",
	  "t.yaml:3:25: key 'nodes[0].user': expected a user name of at most 32 letters, digits, "
	  "'.', '_' and '-' (not first), found 'a b'" },
	{ "user_leading_dash", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "user: -oProxyCommand=x\n"
	  "nodes: [local]\n",
	  "t.yaml:3:7: key 'user': expected a user name of at most 32 letters, digits, '.', '_' "
	  "and '-' (not first), found '-oProxyCommand=x'" },
	{ "shared_dir_newline", "cluster",
	  "cluster: lab\n"
	  "shared_dir: \"/nfs\\nx\"\n"
	  "nodes: [local]\n",
	  "t.yaml:2:13: key 'shared_dir': expected a path without control characters (newline, "
	  "tab), found '/nfs...'" },
	{ "shared_dir_dotdot", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs/../etc\n"
	  "nodes: [local]\n",
	  "t.yaml:2:13: key 'shared_dir': expected a path without a '..' component, found "
	  "'/nfs/../etc'" },
	{ "host_over_253", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "nodes: [{host: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa}]\n",
	  "t.yaml:3:16: key 'nodes[0].host': host 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...' is "
	  "not a host name or address (at most 253 letters, digits, '.', '-', '_' or ':')" },
	{ "identity_newline", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "ssh: {identity: \"/k\\ney\"}\n"
	  "nodes: [local]\n",
	  "t.yaml:3:17: key 'ssh.identity': expected a path without control characters (newline, "
	  "tab), found '/k...'" },
	{ "identity_quote", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "ssh: {identity: '/k\"ey'}\n"
	  "nodes: [local]\n",
	  "t.yaml:3:17: key 'ssh.identity': expected a path without quotes or backslashes, found "
	  "'/k\"ey'" },
	{ "head_address_space", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "head: {address: \"a b\"}\n"
	  "nodes: [local]\n",
	  "t.yaml:3:17: key 'head.address': expected a host name or address (at most 253 letters, "
	  "digits, '.', '-', '_' or ':'), found 'a b'" },
	{ "yaml_tag_binary", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "user: !!binary aGk=\n"
	  "nodes: [local]\n",
	  "t.yaml:3:7: YAML tags ('!!binary') are not supported; write the value without one" },
	{ "yaml_tag_local_map", "job",
	  "command: [x]\n"
	  "env: !mine {A: b}\n",
	  "t.yaml:2:6: YAML tags ('!mine') are not supported; write the value without one" },
	{ "sweep_placeholder_unknown", "sweep",
	  "method: grid\n"
	  "parameters: {lr: {values: [1, 2]}}\n"
	  "job: {command: [python, t.py, \"--lr={lr}\", \"{y}\"]}\n",
	  "t.yaml:3:44: key 'job.command[3]': placeholder '{y}' names no parameter (parameters: lr)" },
	{ "sweep_placeholder_open", "sweep",
	  "method: grid\n"
	  "parameters: {lr: {values: [1, 2]}}\n"
	  "job: {command: [python, t.py, \"{\"]}\n",
	  "t.yaml:3:31: key 'job.command[2]': '{' opens a placeholder that does not close: write "
	  "'{name}' of a parameter (lr)" },
	{ "sweep_placeholder_conversion", "sweep",
	  "method: grid\n"
	  "parameters: {lr: {values: [1, 2]}}\n"
	  "job: {command: [python, t.py], env: {LR: \"{lr!r}\"}}\n",
	  "t.yaml:3:42: key 'job.env.LR': placeholder '{lr!r}': only '{name}' of a parameter is "
	  "replaced, without conversion or format (lr)" },
	{ "fanout_not_int", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "ssh: {fanout: lots}\n"
	  "nodes: [local]\n",
	  "t.yaml:3:15: key 'ssh.fanout': expected a positive integer, found 'lots'" },
	{ "fanout_block", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "ssh:\n"
	  "  port: 22\n"
	  "  fanout: lots\n"
	  "nodes: [local]\n",
	  "t.yaml:5:11: key 'ssh.fanout': expected a positive integer, found 'lots'" },
	{ "fanout_zero", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "ssh: {fanout: 0}\n"
	  "nodes: [local]\n",
	  "t.yaml:3:15: key 'ssh.fanout': expected a positive integer, found '0'" },
	{ "unknown_key_suggest", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "ssh:\n"
	  "  fanot: 3\n"
	  "nodes: [local]\n",
	  "t.yaml:4:3: unknown key 'ssh.fanot'; did you mean 'ssh.fanout'?" },
	{ "unknown_top_suggest", "cluster",
	  "cluster: lab\n"
	  "shared_dirs: /nfs\n"
	  "nodes: [local]\n",
	  "t.yaml:2:1: unknown key 'shared_dirs'; did you mean 'shared_dir'?" },
	{ "unknown_key_no_suggest", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "colour: red\n"
	  "nodes: [local]\n",
	  "t.yaml:3:1: unknown key 'colour' (expected 'cluster', 'user', 'shared_dir', 'ssh', 'nodes', 'setup', 'install', 'agent', 'head', 'network', 'mpi', 'health', 'job_files', 'notify', 'fairshare', 'backend', 'partition', 'account', 'qos', 'slurm', 'mode', 'admin_group')" },
	{ "duration_plain_number", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "ssh: {connect_timeout: 30}\n"
	  "nodes: [local]\n",
	  "t.yaml:3:24: key 'ssh.connect_timeout': expected a duration with a unit, found '30'; write '30s' for seconds (units: ms, s, m, h, d)" },
	{ "duration_junk", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "agent:\n"
	  "  heartbeat: soon\n"
	  "nodes: [local]\n",
	  "t.yaml:4:14: key 'agent.heartbeat': expected a duration such as '90s', '500ms' or '1h30m', found 'soon'" },
	{ "port_range", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "ssh: {port: 70000}\n"
	  "nodes: [local]\n",
	  "t.yaml:3:13: key 'ssh.port': expected a port number (1-65535), found '70000'" },
	{ "host_key_policy", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "ssh: {host_key_policy: yolo}\n"
	  "nodes: [local]\n",
	  "t.yaml:3:24: key 'ssh.host_key_policy': expected 'tofu' or 'strict', found 'yolo'" },
	{ "install_mode", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "install: nfs\n"
	  "nodes: [local]\n",
	  "t.yaml:3:10: key 'install': expected 'local' or 'shared', found 'nfs'" },
	{ "orted_launch", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "mpi: {orted_launch: rsh}\n"
	  "nodes: [local]\n",
	  "t.yaml:3:21: key 'mpi.orted_launch': expected 'agent' or 'ssh', found 'rsh'" },
	{ "mpi_unknown_key", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "mpi: {launcher: ssh}\n"
	  "nodes: [local]\n",
	  "t.yaml:3:7: unknown key 'mpi.launcher' (expected 'orted_launch')" },
	{ "missing_shared_dir", "cluster",
	  "cluster: lab\n"
	  "nodes: [local]\n",
	  "t.yaml:1:1: missing required key 'shared_dir' (the directory all nodes share, e.g. an NFS mount)" },
	{ "relative_shared_dir", "cluster",
	  "cluster: lab\n"
	  "shared_dir: nfs/dt\n"
	  "nodes: [local]\n",
	  "t.yaml:2:13: key 'shared_dir': expected an absolute path (the same on every node), found 'nfs/dt'" },
	{ "fake_health_relative", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "nodes: [local]\n"
	  "agent: {fake_health: faults.json}\n",
	  "t.yaml:4:22: key 'agent.fake_health': expected an absolute path on the nodes, found 'faults.json'" },
	{ "missing_nodes", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n",
	  "t.yaml:1:1: missing required key 'nodes'" },
	{ "empty_nodes", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "nodes: []\n",
	  "t.yaml:3:8: key 'nodes': the node list is empty; add at least one node (host: local for this machine)" },
	{ "dup_node_after_expansion", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "nodes:\n"
	  "  - host: gpu[01-03]\n"
	  "  - host: gpu02\n",
	  "t.yaml:5:11: key 'nodes[1].host': duplicate node name 'gpu02' (also at line 4, column 11)" },
	{ "dup_node_names", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "nodes:\n"
	  "  - {host: 10.0.0.1, name: big}\n"
	  "  - {host: 10.0.0.2, name: big}\n",
	  "t.yaml:5:28: key 'nodes[1].name': duplicate node name 'big' (also at line 4, column 28)" },
	{ "dup_host_port", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "nodes:\n"
	  "  - {host: 10.0.0.1, name: a}\n"
	  "  - {host: 10.0.0.1, name: b, port: 22}\n",
	  "t.yaml:5:12: key 'nodes[1].host': duplicate host '10.0.0.1' with port 22 (also at line 4, column 12)" },
	{ "local_twice", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "nodes:\n"
	  "  - host: local\n"
	  "  - {host: local, name: me}\n",
	  "t.yaml:5:12: key 'nodes[1].host': 'host: local' may appear only once (also at line 4, column 11)" },
	{ "name_with_range", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "nodes:\n"
	  "  - {host: 'gpu[1-4]', name: g}\n",
	  "t.yaml:4:30: key 'nodes[0].name': 'name' cannot be used when 'host' expands to 4 hosts; node names are the host names" },
	{ "host_range_reversed", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "nodes:\n"
	  "  - host: gpu[3-1]\n",
	  "t.yaml:4:11: key 'nodes[0].host': invalid host range 'gpu[3-1]': reversed range '3-1' at column 5" },
	{ "host_range_unclosed", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "nodes:\n"
	  "  - host: gpu[1-3\n",
	  "t.yaml:4:11: key 'nodes[0].host': invalid host range 'gpu[1-3': unclosed '[' at column 4" },
	{ "node_without_host", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "nodes:\n"
	  "  - gpus: 4\n",
	  "t.yaml:4:5: missing required key 'nodes[0].host'" },
	{ "node_key_typo", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "nodes:\n"
	  "  - {host: a, gpu: 4}\n",
	  "t.yaml:4:15: unknown key 'nodes[0].gpu'; did you mean 'nodes[0].gpus'?" },
	{ "gpus_bad", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "nodes:\n"
	  "  - {host: a, gpus: many}\n",
	  "t.yaml:4:21: key 'nodes[0].gpus': expected 'auto' or a number of GPUs, found 'many'" },
	{ "node_port_zero", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "nodes:\n"
	  "  - {host: a, port: 0}\n",
	  "t.yaml:4:21: key 'nodes[0].port': expected a port number (1-65535), found '0'" },
	{ "labels_not_scalar", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "nodes:\n"
	  "  - host: a\n"
	  "    labels: {rack: [1, 2]}\n",
	  "t.yaml:5:20: key 'nodes[0].labels.rack': expected a single value, found a list" },
	{ "dup_key_top", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "nodes: [local]\n"
	  "cluster: other\n",
	  "t.yaml:4:1: duplicate key 'cluster' (first at line 1, column 1)" },
	{ "dup_key_nested", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "ssh:\n"
	  "  port: 22\n"
	  "  port: 2222\n"
	  "nodes: [local]\n",
	  "t.yaml:5:3: duplicate key 'ssh.port' (first at line 4, column 3)" },
	{ "tab_indent", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "ssh:\n"
	  "\tport: 22\n",
	  "t.yaml:4:1: tab character: YAML indentation must use spaces" },
	{ "empty_file", "cluster",
	  "",
	  "t.yaml:1:1: file is empty; expected a mapping of settings" },
	{ "comments_only", "cluster",
	  "# nothing here\n"
	  "\n",
	  "t.yaml:1:1: file is empty; expected a mapping of settings" },
	{ "non_utf8", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "user: caf\xe9" "\n"
	  "nodes: [local]\n",
	  "t.yaml:3:10: invalid UTF-8 byte 0xe9; save the file as UTF-8" },
	{ "control_char", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "user: a\x07" "b\n",
	  "t.yaml:3:8: control character U+0007 is not allowed" },
	{ "anchor", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "ssh: &s {port: 22}\n"
	  "nodes: [local]\n",
	  "t.yaml:3:6: YAML anchors ('&s') are not supported; write the value out" },
	{ "alias", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "user: *who\n"
	  "nodes: [local]\n",
	  "t.yaml:3:7: YAML aliases ('*who') are not supported; write the value out" },
	{ "top_list", "cluster",
	  "- a\n"
	  "- b\n",
	  "t.yaml:1:1: expected a mapping of settings at the top level, found a list" },
	{ "top_scalar", "cluster",
	  "hello\n",
	  "t.yaml:1:1: expected a mapping of settings at the top level, found a single value" },
	{ "two_documents", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "nodes: [local]\n"
	  "---\n"
	  "cluster: b\n",
	  "t.yaml:4:1: a second YAML document; put one configuration per file" },
	{ "undefined_var", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "user: ${DTCTL_TEST_UNSET_VAR}\n"
	  "nodes: [local]\n",
	  "t.yaml:3:7: key 'user': environment variable 'DTCTL_TEST_UNSET_VAR' is not set (use '${DTCTL_TEST_UNSET_VAR:-default}' for a default)" },
	{ "bad_var_name", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "user: ${1X}\n"
	  "nodes: [local]\n",
	  "t.yaml:3:7: key 'user': invalid variable name '1X' in '${...}'" },
	{ "unterminated_var", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "user: \"a${HOME\"\n"
	  "nodes: [local]\n",
	  "t.yaml:3:7: key 'user': unterminated '${' (write '$${' for a literal '${')" },
	{ "env_name", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "setup:\n"
	  "  env: {1BAD: x}\n"
	  "nodes: [local]\n",
	  "t.yaml:4:9: key 'setup.env.1BAD': '1BAD' is not a valid environment variable name" },
	{ "dead_after_short", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "agent: {heartbeat: 5s, dead_after: 5s}\n"
	  "nodes: [local]\n",
	  "t.yaml:3:36: key 'agent.dead_after': must be longer than agent.heartbeat (5s), found '5s'" },
	{ "health_max_failures", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "health: {max_failures: -1}\n"
	  "nodes: [local]\n",
	  "t.yaml:3:24: key 'health.max_failures': expected an integer from 0 (never drain) to "
	  "1000000, found '-1'" },
	{ "health_window_zero", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "health:\n"
	  "  failure_window: 0s\n"
	  "nodes: [local]\n",
	  "t.yaml:4:19: key 'health.failure_window': expected a duration longer than 0, e.g. 1h, "
	  "found '0s'" },
	{ "health_fabric_fraction", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "health: {fabric_fraction: 1.5}\n"
	  "nodes: [local]\n",
	  "t.yaml:3:27: key 'health.fabric_fraction': expected a number in (0, 1], e.g. 0.5, "
	  "found '1.5'" },
	{ "health_unknown", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "health: {max_failure: 2}\n"
	  "nodes: [local]\n",
	  "t.yaml:3:10: unknown key 'health.max_failure'; did you mean 'health.max_failures'?" },
	{ "yaml_syntax", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "nodes: [local\n",
	  "t.yaml:4:1: invalid YAML: did not find expected ',' or ']' (while parsing a flow sequence at line 3, column 8)" },
	{ "yaml_syntax_colon", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "ssh:\n"
	  "  port: 22\n"
	  " fanout: 3\n",
	  "t.yaml:5:2: invalid YAML: did not find expected key (while parsing a block mapping at line 1, column 1)" },
	{ "nested_too_deep", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "setup: {vars: [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}\n",
	  "t.yaml:3:77: nesting deeper than 64 levels" },
	{ "nodes_not_list", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "nodes: gpu01\n",
	  "t.yaml:3:8: key 'nodes': expected a list of nodes, found 'gpu01'" },
	{ "ssh_not_map", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "ssh: 22\n"
	  "nodes: [local]\n",
	  "t.yaml:3:6: key 'ssh': expected a mapping, found '22'" },
	{ "complex_key", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "? [a, b]\n"
	  ": 1\n",
	  "t.yaml:3:3: keys must be plain strings, found a list" },
	{ "trainer_and_command", "job",
	  "trainer: {model: mlp}\n"
	  "command: [python, t.py]\n",
	  "t.yaml:2:10: key 'command': cannot be used together with 'trainer'; a job runs either the built-in trainer or a command" },
	{ "neither", "job",
	  "name: x\n"
	  "nodes: 2\n",
	  "t.yaml:1:1: missing required key 'trainer' or 'command' (what the job runs)" },
	{ "command_string", "job",
	  "command: python train.py --lr 3\n",
	  "t.yaml:1:10: key 'command': expected a list of arguments such as [python, train.py], found a string; write it as a list, or set 'shell: true' to run it with /bin/sh -c" },
	{ "elastic_too_many", "job",
	  "command: [x]\n"
	  "nodes: 2\n"
	  "elastic: {min_nodes: 3}\n",
	  "t.yaml:3:22: key 'elastic.min_nodes': must be at most 'nodes' (2), found '3'" },
	{ "elastic_zero", "job",
	  "command: [x]\n"
	  "elastic:\n"
	  "  min_nodes: 0\n",
	  "t.yaml:3:14: key 'elastic.min_nodes': expected a positive number of nodes, found '0'" },
	{ "gpus_and_procs", "job",
	  "command: [x]\n"
	  "gpus_per_node: 4\n"
	  "procs_per_node: 2\n",
	  "t.yaml:3:17: key 'procs_per_node': cannot be used together with 'gpus_per_node'; use one of them" },
	{ "launcher_bad", "job",
	  "command: [x]\n"
	  "launcher: torchrun\n",
	  "t.yaml:2:11: key 'launcher': expected 'agent' or 'mpi', found 'torchrun'" },
	{ "timeout_number", "job",
	  "command: [x]\n"
	  "timeout: 3600\n",
	  "t.yaml:2:10: key 'timeout': expected a duration with a unit, found '3600'; write '3600s' for seconds (units: ms, s, m, h, d)" },
	{ "include_nodes_bad", "job",
	  "command: [x]\n"
	  "include_nodes: gpu[1-]\n",
	  "t.yaml:2:16: key 'include_nodes': invalid host range 'gpu[1-]': expected a number at column 7, found ']'" },
	{ "trainer_nested", "job",
	  "trainer:\n"
	  "  model: mlp\n"
	  "  opt: {lr: 1}\n",
	  "t.yaml:3:8: key 'trainer.opt': expected a value or a list of values, found a mapping" },
	{ "command_empty", "job",
	  "command: []\n",
	  "t.yaml:1:10: key 'command': expected a non-empty list of arguments, found an empty list" },
	{ "command_item_list", "job",
	  "command: [python, [a, b]]\n",
	  "t.yaml:1:19: key 'command[1]': expected a string, found a list" },
	{ "retries_negative", "job",
	  "command: [x]\n"
	  "retries: -1\n",
	  "t.yaml:2:10: key 'retries': expected a number of retries (0 or more), found '-1'" },
	{ "nodes_zero", "job",
	  "command: [x]\n"
	  "nodes: 0\n",
	  "t.yaml:2:8: key 'nodes': expected a positive number of nodes, found '0'" },
	{ "key_typo", "job",
	  "command: [x]\n"
	  "gpu_per_node: 2\n",
	  "t.yaml:2:1: unknown key 'gpu_per_node'; did you mean 'gpus_per_node'?" },
	{ "shell_not_bool", "job",
	  "command: [x]\n"
	  "shell: maybe\n",
	  "t.yaml:2:8: key 'shell': expected true or false, found 'maybe'" },
	/* pack: allocation (backend: slurm, docs/slurm-backend.md) */
	{ "sweep_pack_unknown", "sweep",
	  "method: random\nmax_trials: 2\nparameters: {x: {values: [1]}}\n"
	  "job: {command: [a]}\npack: nodes\n",
	  "t.yaml:5:7: key 'pack': expected 'jobs', 'allocation' or 'array', found 'nodes'" },
	/* pack: array: a job array needs the trials known up front */
	{ "sweep_pack_array_bayes", "sweep",
	  "method: bayes\nmax_trials: 2\nmetric: {name: loss}\nparameters: {x: {values: [1]}}\n"
	  "job: {command: [a]}\npack: array\n",
	  "t.yaml:6:7: key 'pack': a job array needs its trials known up front (method grid or "
	  "random); bayes suggests each trial after earlier results (use pack: jobs)" },
	{ "sweep_pack_no_size", "sweep",
	  "method: random\nmax_trials: 2\nparameters: {x: {values: [1]}}\n"
	  "job: {command: [a]}\npack: allocation\n",
	  "t.yaml:5:7: key 'pack': an allocation needs a size: give 'parallel:' (trials at once) "
	  "or 'allocation: {nodes, gpus}'" },
	{ "sweep_allocation_without_pack", "sweep",
	  "method: random\nmax_trials: 2\nparameters: {x: {values: [1]}}\n"
	  "job: {command: [a]}\nallocation: {nodes: 2, gpus: 4}\n",
	  "t.yaml:5:13: key 'allocation': only with 'pack: allocation' (add it, or remove "
	  "'allocation:')" },
	{ "sweep_allocation_no_nodes", "sweep",
	  "method: random\nmax_trials: 2\nparameters: {x: {values: [1]}}\n"
	  "job: {command: [a]}\npack: allocation\nallocation: {gpus: 4}\n",
	  "t.yaml:6:13: missing required key 'allocation.nodes'" },
	{ "sweep_allocation_zero_nodes", "sweep",
	  "method: random\nmax_trials: 2\nparameters: {x: {values: [1]}}\n"
	  "job: {command: [a]}\npack: allocation\nallocation: {nodes: 0, gpus: 4}\n",
	  "t.yaml:6:21: key 'allocation.nodes': expected a number of nodes (1 to 256), found '0'" },
	{ "min_gt_max", "sweep",
	  "method: random\n"
	  "max_trials: 5\n"
	  "job: {command: [x]}\n"
	  "parameters:\n"
	  "  lr: {min: 0.5, max: 0.1}\n",
	  "t.yaml:5:13: key 'parameters.lr': min (0.5) is greater than max (0.1)" },
	{ "log_at_zero", "sweep",
	  "method: random\n"
	  "max_trials: 5\n"
	  "job: {command: [x]}\n"
	  "parameters:\n"
	  "  lr: {distribution: log_uniform_values, min: 0, max: 1}\n",
	  "t.yaml:5:47: key 'parameters.lr.min': log_uniform_values needs min > 0, found '0'" },
	{ "log_below_zero", "sweep",
	  "method: random\n"
	  "max_trials: 5\n"
	  "job: {command: [x]}\n"
	  "parameters:\n"
	  "  lr: {distribution: log_uniform_values, min: -1, max: 1}\n",
	  "t.yaml:5:47: key 'parameters.lr.min': log_uniform_values needs min > 0, found '-1'" },
	{ "wandb_controller", "sweep",
	  "program: train.py\n"
	  "controller: {type: local}\n",
	  "t.yaml:2:1: W&B key 'controller' is unsupported by dtctl: dtsched is the controller; remove it" },
	{ "wandb_macro", "sweep",
	  "program: train.py\n"
	  "command:\n"
	  "  - ${interpreter}\n"
	  "  - ${args_yaml}\n",
	  "t.yaml:4:5: key 'command[1]': macro '${args_yaml}' is unsupported (W&B's agent knows ${env}, ${interpreter}, ${program}, ${args}, ${args_no_hyphens}, ${args_no_equals}, ${args_no_boolean_flags}, ${args_json}, ${args_json_file} and ${envvar:NAME})" },
	{ "wandb_no_program", "sweep",
	  "method: random\n"
	  "run_cap: 5\n"
	  "command: [python, train.py]\n"
	  "parameters: {a: {values: [1]}}\n"
	  "job: {command: [x]}\n",
	  "t.yaml:5:16: key 'job.command': cannot be used with the sweep's 'program:'/'command:', which say what each trial runs; keep only the job's shape (nodes, gpus_per_node, env, ...) here" },
	{ "wandb_program_macro", "sweep",
	  "method: random\n"
	  "run_cap: 5\n"
	  "command:\n"
	  "  - ${program}\n"
	  "parameters: {a: {values: [1]}}\n",
	  "t.yaml:1:1: missing required key 'program' (the training script ${program} names in the command)" },
	{ "wandb_log_uniform", "sweep",
	  "method: random\n"
	  "max_trials: 5\n"
	  "parameters:\n"
	  "  lr: {distribution: log_uniform, min: -9, max: 800}\n",
	  "t.yaml:4:40: key 'parameters.lr': log_uniform takes natural logs as bounds; e^-9 .. e^800 is outside a double (use log_uniform_values with the values themselves)" },
	{ "wandb_q_log_uniform", "sweep",
	  "method: random\n"
	  "max_trials: 5\n"
	  "parameters:\n"
	  "  lr: {distribution: q_log_uniform_values, min: 0, max: 9}\n",
	  "t.yaml:4:49: key 'parameters.lr.min': q_log_uniform_values needs min > 0, found '0'" },
	{ "wandb_beta", "sweep",
	  "method: random\n"
	  "max_trials: 5\n"
	  "parameters:\n"
	  "  d: {distribution: beta, a: 0, b: 2}\n",
	  "t.yaml:4:30: key 'parameters.d.a': expected a positive number, found '0'" },
	{ "wandb_q_unused", "sweep",
	  "method: random\n"
	  "max_trials: 5\n"
	  "parameters:\n"
	  "  d: {distribution: log_normal, q: 2}\n",
	  "t.yaml:4:33: key 'parameters.d.q': not used by distribution 'log_normal'" },
	{ "unknown_distribution", "sweep",
	  "method: random\n"
	  "max_trials: 5\n"
	  "parameters:\n"
	  "  lr: {distribution: gaussian, mu: 0}\n",
	  "t.yaml:4:22: key 'parameters.lr.distribution': expected one of constant, categorical, categorical_w_probabilities, uniform, int_uniform, log_uniform_values, log_uniform, inv_log_uniform_values, inv_log_uniform, q_uniform, q_log_uniform_values, q_log_uniform, normal, q_normal, log_normal, q_log_normal, beta, q_beta, found 'gaussian'" },
	{ "unknown_method", "sweep",
	  "method: hyperopt\n",
	  "t.yaml:1:9: key 'method': expected 'grid', 'random' or 'bayes', found 'hyperopt'" },
	{ "empty_values", "sweep",
	  "method: grid\n"
	  "parameters:\n"
	  "  a: {values: []}\n",
	  "t.yaml:3:15: key 'parameters.a.values': expected a non-empty list of values, found an empty list" },
	{ "grid_continuous", "sweep",
	  "method: grid\n"
	  "job: {command: [x]}\n"
	  "parameters:\n"
	  "  a: {values: [1, 2]}\n"
	  "  lr: {min: 0.1, max: 0.5}\n",
	  "t.yaml:5:7: key 'parameters.lr': grid search needs discrete values, but 'uniform' is continuous; use 'values:'" },
	{ "grid_too_large", "sweep",
	  "method: grid\n"
	  "max_trials: 20\n"
	  "job: {command: [x]}\n"
	  "parameters:\n"
	  "  a: {values: [1, 2, 3, 4]}\n"
	  "  b: {values: [1, 2, 3, 4]}\n"
	  "  c: {values: [x, y, z]}\n",
	  "t.yaml:2:13: key 'max_trials': grid has 48 points but max_trials is 20" },
	{ "random_no_max_trials", "sweep",
	  "method: random\n"
	  "job: {command: [x]}\n"
	  "parameters:\n"
	  "  a: {values: [1, 2]}\n",
	  "t.yaml:1:1: missing required key 'max_trials' (or W&B's 'run_cap': random and bayes sweeps run until it is reached)" },
	{ "bayes_no_metric", "sweep",
	  "method: bayes\n"
	  "max_trials: 5\n"
	  "job: {command: [x]}\n"
	  "parameters:\n"
	  "  a: {values: [1, 2]}\n",
	  "t.yaml:1:1: missing required key 'metric' (bayes search needs a metric to optimise)" },
	{ "metric_impute", "sweep",
	  "method: bayes\n"
	  "metric: {name: acc, goal: maximize, impute: worst}\n",
	  "t.yaml:2:37: W&B key 'metric.impute' is unsupported by dtctl: failed trials are left out of the bayes model; remove it" },
	{ "metric_target_text", "sweep",
	  "method: bayes\n"
	  "metric: {name: acc, goal: maximize, target: high}\n",
	  "t.yaml:2:45: key 'metric.target': expected a number, found 'high'" },
	{ "metric_goal", "sweep",
	  "method: bayes\n"
	  "metric: {name: acc, goal: up}\n",
	  "t.yaml:2:27: key 'metric.goal': expected 'minimize' or 'maximize', found 'up'" },
	{ "probabilities_sum", "sweep",
	  "method: random\n"
	  "parameters:\n"
	  "  a: {values: [1, 2], probabilities: [0.5, 0.6]}\n",
	  "t.yaml:3:38: key 'parameters.a.probabilities': the probabilities add up to 1.1, not 1" },
	{ "probabilities_count", "sweep",
	  "method: random\n"
	  "parameters:\n"
	  "  a: {values: [1, 2], probabilities: [1]}\n",
	  "t.yaml:3:38: key 'parameters.a.probabilities': expected a list of 2 probabilities, one per value" },
	{ "int_uniform_float", "sweep",
	  "method: random\n"
	  "max_trials: 5\n"
	  "parameters:\n"
	  "  a: {distribution: int_uniform, min: 1.5, max: 4}\n",
	  "t.yaml:4:39: key 'parameters.a.min': expected an integer for int_uniform, found '1.5'" },
	{ "job_missing", "sweep",
	  "method: random\n"
	  "max_trials: 5\n"
	  "parameters:\n"
	  "  a: {values: [1, 2]}\n",
	  "t.yaml:1:1: missing required key 'job' (the job.yaml each trial runs, or W&B's 'program:')" },
	{ "job_file_missing", "sweep",
	  "method: random\n"
	  "max_trials: 5\n"
	  "parameters:\n"
	  "  a: {values: [1, 2]}\n"
	  "job: no-such-job.yaml\n",
	  "t.yaml:5:6: key 'job': cannot read 'no-such-job.yaml': No such file or directory" },
	{ "nested_extra_keys", "sweep",
	  "method: random\n"
	  "max_trials: 5\n"
	  "parameters:\n"
	  "  opt:\n"
	  "    parameters: {lr: {value: 1}}\n"
	  "    value: 2\n",
	  "t.yaml:5:5: key 'parameters.opt': a parameter with 'parameters:' (a nested group) has no other keys" },
	{ "et_type", "sweep",
	  "method: random\n"
	  "early_terminate: {type: envelope}\n",
	  "t.yaml:2:25: key 'early_terminate.type': expected 'hyperband' (the only early termination dtctl has), found 'envelope'" },
	{ "et_s", "sweep",
	  "method: random\n"
	  "early_terminate: {type: hyperband, s: 2}\n",
	  "t.yaml:2:39: key 'early_terminate.s': needs 'max_iter' (W&B's bands are max_iter / eta^k for k = 1..s)" },
	{ "et_eta_one", "sweep",
	  "method: random\n"
	  "early_terminate: {type: hyperband, min_iter: 1, eta: 1}\n",
	  "t.yaml:2:54: key 'early_terminate.eta': expected a number above 1, found '1'" },
	{ "inline_job_error", "sweep",
	  "method: random\n"
	  "max_trials: 5\n"
	  "parameters:\n"
	  "  a: {values: [1, 2]}\n"
	  "job:\n"
	  "  command: [x]\n"
	  "  nodes: two\n",
	  "t.yaml:7:10: key 'job.nodes': expected a positive number of nodes, found 'two'" },
	{ "value_and_values", "sweep",
	  "method: random\n"
	  "max_trials: 5\n"
	  "parameters:\n"
	  "  a: {value: 1, values: [1, 2]}\n",
	  "t.yaml:4:25: key 'parameters.a.values': cannot be used together with 'value'" },
	{ "q_in_uniform", "sweep",
	  "method: random\n"
	  "max_trials: 5\n"
	  "parameters:\n"
	  "  a: {distribution: uniform, min: 0, max: 1, q: 0.1}\n",
	  "t.yaml:4:46: key 'parameters.a.q': not used by distribution 'uniform'" },
	{ "no_parameters", "sweep",
	  "method: random\n"
	  "max_trials: 5\n"
	  "parameters: {}\n",
	  "t.yaml:3:13: key 'parameters': no parameters to search" },
	{ "param_not_map", "sweep",
	  "method: random\n"
	  "max_trials: 5\n"
	  "parameters:\n"
	  "  lr: 0.1\n",
	  "t.yaml:4:7: key 'parameters.lr': expected a mapping such as {values: [...]} or {min: ..., max: ...}, found '0.1'" },
	{ "min_without_max", "sweep",
	  "method: random\n"
	  "max_trials: 5\n"
	  "parameters:\n"
	  "  lr: {min: 0.1}\n",
	  "t.yaml:4:7: missing required key 'parameters.lr.max'" },
	{ "dup_param_flattened", "sweep",
	  "method: random\n"
	  "max_trials: 5\n"
	  "parameters:\n"
	  "  opt:\n"
	  "    parameters:\n"
	  "      lr: {value: 1}\n"
	  "  opt.lr: {value: 2}\n",
	  "t.yaml:7:11: key 'parameters.opt.lr': parameter 'opt.lr' is given twice (also at line 6, column 11)" },
	{ "dup_key_big_map", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "nodes: [local]\n"
	  "setup:\n"
	  "  env:\n"
	  "    K0: v\n"
	  "    K1: v\n"
	  "    K2: v\n"
	  "    K3: v\n"
	  "    K4: v\n"
	  "    K5: v\n"
	  "    K6: v\n"
	  "    K7: v\n"
	  "    K8: v\n"
	  "    K9: v\n"
	  "    K10: v\n"
	  "    K11: v\n"
	  "    K12: v\n"
	  "    K13: v\n"
	  "    K14: v\n"
	  "    K15: v\n"
	  "    K16: v\n"
	  "    K17: v\n"
	  "    K18: v\n"
	  "    K19: v\n"
	  "    K20: v\n"
	  "    K21: v\n"
	  "    K22: v\n"
	  "    K23: v\n"
	  "    K24: v\n"
	  "    K25: v\n"
	  "    K26: v\n"
	  "    K27: v\n"
	  "    K28: v\n"
	  "    K29: v\n"
	  "    K30: v\n"
	  "    K31: v\n"
	  "    K32: v\n"
	  "    K33: v\n"
	  "    K34: v\n"
	  "    K35: v\n"
	  "    K36: v\n"
	  "    K37: v\n"
	  "    K38: v\n"
	  "    K39: v\n"
	  "    K3: again\n",
	  "t.yaml:46:5: duplicate key 'setup.env.K3' (first at line 9, column 5)" },
	{ "dup_label", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "nodes:\n"
	  "  - host: a\n"
	  "    labels: {rack: a, rack: b}\n",
	  "t.yaml:5:23: duplicate key 'nodes[0].labels.rack' (first at line 5, column 14)" },
	{ "key_with_newline", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "nodes: [local]\n"
	  "\"ss\\nh\": 1\n",
	  "t.yaml:4:1: unknown key 'ss\\nh'; did you mean 'ssh'?" },
	{ "hostrange_tab_in_quoted", "cluster",
	  "cluster: lab\n"
	  "shared_dir: /nfs\n"
	  "nodes:\n"
	  "  - host: \"a\\tb\"\n",
	  "t.yaml:4:11: key 'nodes[0].host': expected a host name, address or host range (use 'user:' for the login name), found 'a\\tb'" },
	{ "include_nodes_newline", "job",
	  "command: [x]\n"
	  "include_nodes: \"a[1-\\n]\"\n",
	  "t.yaml:2:16: key 'include_nodes': invalid host range 'a[1-\\n]': expected a number at column 5, found byte 0x0a" },
	{ "trainer_dup", "job",
	  "trainer: {lr: 1, lr: 2}\n",
	  "t.yaml:1:18: duplicate key 'trainer.lr' (first at line 1, column 11)" },
	{ "param_dup", "sweep",
	  "method: random\n"
	  "parameters:\n"
	  "  a: {value: 1}\n"
	  "  a: {value: 2}\n",
	  "t.yaml:4:3: duplicate key 'parameters.a' (first at line 3, column 3)" },
};

/* Parse yaml as kind; return the loader's result, err holds the message. */
static int parse_as(const char *kind, const char *yaml, size_t len, struct strbuf *err)
{
	int r;

	if (!strcmp(kind, "cluster")) {
		struct cluster_config c;

		r = cluster_config_parse(&c, yaml, len, "t.yaml", err);
		if (!r)
			cluster_config_release(&c);
		else
			assert_null(c.nodes);   /* released on error */
	} else if (!strcmp(kind, "job")) {
		struct job_config j;

		r = job_config_parse(&j, yaml, len, "t.yaml", err);
		if (!r)
			job_config_release(&j);
		else
			assert_null(j.name);
	} else {
		struct sweep_config s;

		r = sweep_config_parse(&s, yaml, len, "t.yaml", err);
		if (!r)
			sweep_config_release(&s);
		else
			assert_null(s.params);
	}
	return r;
}

static void run_bad_case(void **state)
{
	const struct bad_case *bc = *state;
	struct strbuf err = STRBUF_INIT;

	unsetenv("DTCTL_TEST_UNSET_VAR");
	if (parse_as(bc->kind, bc->yaml, strlen(bc->yaml), &err) == 0)
		fail_msg("%s: loaded, expected \"%s\"", bc->name, bc->want);
	assert_string_equal(err.buf, bc->want);
	assert_null(strchr(err.buf, '\n'));
	strbuf_release(&err);
}

/* ------------------------------------------------------------- good ones */

static void test_cluster_full(void **state)
{
	static const char yaml[] =
		"cluster: lab\n"
		"user: alice\n"
		"shared_dir: /mnt/nfs/dtctl/\n"
		"ssh: {port: 2222, fanout: 8, connect_timeout: 5s, host_key_policy: strict}\n"
		"nodes:\n"
		"  - host: gpu[01-03].lab\n"
		"    gpus: auto\n"
		"    labels: {rack: a}\n"
		"  - {host: 10.0.0.21, name: big1, user: bob, port: 22, gpus: 8, slots: 64}\n"
		"  - local\n"
		"setup: {template: tpl/setup.sh, timeout: 1h30m, env: {NCCL_DEBUG: WARN}}\n"
		"install: shared\n"
		"agent: {port: 9000, heartbeat: 500ms, dead_after: 3s}\n"
		"head: {address: 10.0.0.1, port: 9001}\n"
		"network: {interface: eth0}\n"
		"mpi: {orted_launch: ssh}\n"
		"health: {max_failures: 5, failure_window: 30m, fabric_fraction: 0.25}\n";
	struct cluster_config c;
	struct strbuf err = STRBUF_INIT;

	assert_int_equal(cluster_config_parse(&c, yaml, strlen(yaml), "conf/c.yaml", &err), 0);
	assert_string_equal(c.name, "lab");
	assert_string_equal(c.user, "alice");
	assert_string_equal(c.shared_dir, "/mnt/nfs/dtctl");
	assert_int_equal(c.ssh.port, 2222);
	assert_int_equal(c.ssh.fanout, 8);
	assert_int_equal(c.ssh.connect_timeout_ms, 5000);
	assert_int_equal(c.ssh.command_timeout_ms, 600000);
	assert_int_equal(c.ssh.host_key_policy, HOST_KEY_STRICT);
	assert_int_equal(c.mpi.orted_ssh, 1);
	assert_int_equal(c.health.max_failures, 5);
	assert_int_equal(c.health.failure_window_ms, 30 * 60 * 1000);
	assert_true(c.health.fabric_fraction == 0.25);
	assert_int_equal(c.nr_nodes, 5);
	assert_string_equal(c.nodes[0].name, "gpu01.lab");
	assert_string_equal(c.nodes[2].host, "gpu03.lab");
	assert_string_equal(c.nodes[2].user, "alice");
	assert_int_equal(c.nodes[2].port, 2222);
	assert_int_equal(c.nodes[2].gpus, GPUS_AUTO);
	assert_string_equal(kvlist_get(&c.nodes[1].labels, "rack"), "a");
	assert_int_equal(c.nodes[0].pos.line, 6);
	assert_int_equal(c.nodes[0].pos.col, 5);
	assert_string_equal(c.nodes[3].name, "big1");
	assert_string_equal(c.nodes[3].host, "10.0.0.21");
	assert_string_equal(c.nodes[3].user, "bob");
	assert_int_equal(c.nodes[3].port, 22);
	assert_int_equal(c.nodes[3].gpus, 8);
	assert_int_equal(c.nodes[3].slots, 64);
	assert_int_equal(c.nodes[3].labels.nr, 0);
	assert_string_equal(c.nodes[4].name, "local");
	assert_string_equal(c.nodes[4].host, "local");
	assert_string_equal(c.setup.template, "conf/tpl/setup.sh");
	assert_int_equal(c.setup.timeout_ms, 5400000);
	assert_string_equal(kvlist_get(&c.setup.env, "NCCL_DEBUG"), "WARN");
	assert_int_equal(c.install, INSTALL_SHARED);
	assert_int_equal(c.agent.port, 9000);
	assert_int_equal(c.agent.heartbeat_ms, 500);
	assert_int_equal(c.agent.dead_after_ms, 3000);
	assert_string_equal(c.head.address, "10.0.0.1");
	assert_int_equal(c.head.port, 9001);
	assert_string_equal(c.network.interface, "eth0");
	assert_int_equal(cluster_find_node(&c, "big1"), 3);
	assert_int_equal(cluster_find_node(&c, "nope"), -1);
	cluster_config_release(&c);
	strbuf_release(&err);
}

static void test_cluster_slurm(void **state)
{
	struct cluster_config c;
	struct strbuf err = STRBUF_INIT;
	const char *y = "shared_dir: /nfs\nbackend: slurm\npartition: gpu\naccount: ml\n"
			"qos: high\nslurm: {constraint: a100, overcommit: true, contiguous: false,\n"
			"        mem: 64G}\n";
	json_t *js;

	(void)state;
	assert_int_equal(cluster_config_parse(&c, y, strlen(y), "t.yaml", &err), 0);
	assert_int_equal(c.backend, BACKEND_SLURM);
	assert_int_equal(c.nr_nodes, 0);
	assert_string_equal(c.slurm.partition, "gpu");
	assert_int_equal(c.slurm.partition_pos.line, 3);
	assert_int_equal(c.slurm.partition_pos.col, 12);
	assert_string_equal(c.slurm.account, "ml");
	assert_string_equal(c.slurm.qos, "high");
	/* in file order; false flags left out, true ones without a value */
	assert_int_equal(c.slurm.nr_options, 3);
	assert_string_equal(c.slurm.options[0].name, "constraint");
	assert_string_equal(c.slurm.options[0].value, "a100");
	assert_int_equal(c.slurm.options[0].pos.line, 6);
	assert_int_equal(c.slurm.options[0].pos.col, 21);
	assert_string_equal(c.slurm.options[1].name, "overcommit");
	assert_null(c.slurm.options[1].value);
	assert_string_equal(c.slurm.options[2].name, "mem");
	assert_string_equal(c.slurm.options[2].value, "64G");
	js = cluster_config_to_json(&c);
	assert_string_equal(json_string_value(json_object_get(js, "backend")), "slurm");
	assert_true(json_is_true(json_object_get(json_object_get(js, "slurm"), "overcommit")));
	json_decref(js);
	cluster_config_release(&c);
	strbuf_release(&err);
}

static void test_cluster_defaults(void **state)
{
	static const char yaml[] = "shared_dir: /nfs\nnodes: [gpu1]\n";
	struct cluster_config c;
	struct strbuf err = STRBUF_INIT;
	json_t *j;

	setenv("USER", "tester", 1);
	assert_int_equal(cluster_config_parse(&c, yaml, strlen(yaml), "t.yaml", &err), 0);
	assert_string_equal(c.name, "dtctl");
	assert_string_equal(c.user, "tester");
	assert_int_equal(c.ssh.port, 22);
	assert_int_equal(c.ssh.fanout, 32);
	assert_int_equal(c.ssh.connect_timeout_ms, 10000);
	assert_int_equal(c.ssh.host_key_policy, HOST_KEY_TOFU);
	assert_null(c.ssh.identity);
	assert_int_equal(c.nodes[0].port, 22);
	assert_string_equal(c.nodes[0].user, "tester");
	assert_int_equal(c.nodes[0].slots, 0);
	assert_null(c.setup.template);
	assert_int_equal(c.setup.timeout_ms, 600000);
	assert_int_equal(c.install, INSTALL_LOCAL);
	assert_int_equal(c.agent.port, 7070);
	assert_int_equal(c.agent.heartbeat_ms, 2000);
	assert_int_equal(c.agent.dead_after_ms, 10000);
	assert_int_equal(c.head.port, 7071);
	assert_null(c.head.address);
	assert_int_equal(c.health.max_failures, 3);
	assert_int_equal(c.health.failure_window_ms, 3600000);
	assert_true(c.health.fabric_fraction == 0.5);

	j = cluster_config_to_json(&c);
	assert_string_equal(json_string_value(json_object_get(json_object_get(j, "ssh"),
							       "connect_timeout")), "10s");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "agent"),
							    "dead_after_ms")), 10000);
	assert_string_equal(json_string_value(json_object_get(
		json_array_get(json_object_get(j, "nodes"), 0), "gpus")), "auto");
	assert_string_equal(json_string_value(json_object_get(json_object_get(j, "health"),
							       "failure_window")), "1h");
	json_decref(j);
	cluster_config_release(&c);
	strbuf_release(&err);
}

static void test_env_expansion(void **state)
{
	static const char yaml[] =
		"shared_dir: ${DT_T_DIR}/dt\n"
		"user: ${DT_T_UNSET:-nobody}\n"
		"ssh: {port: '${DT_T_PORT}'}\n"
		"setup:\n"
		"  env: {LITERAL: \"$${HOME} and $$HOME\", EMPTYDEF: \"${DT_T_EMPTY:-d}\"}\n"
		"nodes: [local]\n";
	struct cluster_config c;
	struct strbuf err = STRBUF_INIT;

	setenv("DT_T_DIR", "/scratch", 1);
	setenv("DT_T_PORT", "2200", 1);
	setenv("DT_T_EMPTY", "", 1);
	unsetenv("DT_T_UNSET");
	assert_int_equal(cluster_config_parse(&c, yaml, strlen(yaml), "t.yaml", &err), 0);
	assert_string_equal(c.shared_dir, "/scratch/dt");
	assert_string_equal(c.user, "nobody");
	assert_int_equal(c.ssh.port, 2200);
	assert_string_equal(kvlist_get(&c.setup.env, "LITERAL"), "${HOME} and $$HOME");
	assert_string_equal(kvlist_get(&c.setup.env, "EMPTYDEF"), "d");
	cluster_config_release(&c);
	strbuf_release(&err);
}

static void test_env_bad_value_found(void **state)
{
	static const char yaml[] = "shared_dir: /n\nssh: {port: '${DT_T_PORT}'}\nnodes: [local]\n";
	struct cluster_config c;
	struct strbuf err = STRBUF_INIT;

	setenv("DT_T_PORT", "ssh", 1);
	assert_int_equal(cluster_config_parse(&c, yaml, strlen(yaml), "t.yaml", &err), -1);
	assert_string_equal(err.buf, "t.yaml:2:13: key 'ssh.port': expected a port number "
			    "(1-65535), found 'ssh'");
	strbuf_release(&err);
}

static void test_job_trainer(void **state)
{
	static const char yaml[] =
		"nodes: 2\n"
		"gpus_per_node: 4\n"
		"trainer: {model: mlp, hidden: [1024, 512], lr: 0.01, epochs: 5}\n"
		"env: {NCCL_DEBUG: WARN}\n"
		"timeout: 2h\n"
		"retries: 1\n"
		"include_nodes: gpu[01-04]\n"
		"labels: {rack: a}\n"
		"elastic: {min_nodes: 1}\n";
	struct job_config j;
	struct strbuf err = STRBUF_INIT;
	json_t *js;

	assert_int_equal(job_config_parse(&j, yaml, strlen(yaml), "t.yaml", &err), 0);
	assert_string_equal(j.name, "mlp");
	assert_int_equal(j.nodes, 2);
	assert_int_equal(j.gpus_per_node, 4);
	assert_int_equal(j.procs_per_node, 0);
	assert_int_equal(j.launcher, LAUNCHER_MPI);
	assert_true(j.has_trainer);
	assert_int_equal(j.trainer.nr, 4);
	assert_string_equal(j.trainer.items[0].key, "model");
	assert_string_equal(j.trainer.items[1].key, "hidden");
	assert_string_equal(j.trainer.items[1].value, "1024,512");
	assert_string_equal(j.trainer.items[3].value, "5");
	assert_int_equal(j.command.nr, 0);
	assert_int_equal(j.timeout_ms, 7200000);
	assert_int_equal(j.stall_after_ms, 0);
	assert_int_equal(j.retries, 1);
	assert_string_equal(j.node_include, "gpu[01-04]");
	assert_null(j.node_exclude);
	assert_string_equal(kvlist_get(&j.labels, "rack"), "a");
	assert_int_equal(j.elastic_min_nodes, 1);
	js = job_config_to_json(&j);
	assert_int_equal(json_integer_value(json_object_get(js, "elastic_min_nodes")), 1);
	assert_string_equal(json_string_value(json_object_get(js, "timeout")), "2h");
	assert_string_equal(json_string_value(json_object_get(js, "launcher")), "mpi");
	assert_true(json_is_null(json_object_get(js, "command")));
	json_decref(js);
	job_config_release(&j);
	strbuf_release(&err);
}

static void test_job_command(void **state)
{
	static const char yaml[] =
		"command: [/usr/bin/python3, train.py, --lr, \"{lr}\"]\n"
		"workdir: /src\n"
		"stall_after: 10m\n";
	struct job_config j;
	struct strbuf err = STRBUF_INIT;

	assert_int_equal(job_config_parse(&j, yaml, strlen(yaml), "t.yaml", &err), 0);
	assert_string_equal(j.name, "python3");
	assert_int_equal(j.nodes, 1);
	assert_int_equal(j.gpus_per_node, 0);
	assert_int_equal(j.procs_per_node, 1);
	assert_int_equal(j.launcher, LAUNCHER_AGENT);
	assert_false(j.has_trainer);
	assert_int_equal(j.command.nr, 4);
	assert_string_equal(j.command.v[3], "{lr}");
	assert_null(j.command.v[4]);
	assert_string_equal(j.workdir, "/src");
	assert_int_equal(j.stall_after_ms, 600000);
	job_config_release(&j);
	strbuf_release(&err);
}

static void test_job_shell(void **state)
{
	static const char yaml[] = "name: s\ncommand: echo hi | tee out\nshell: true\n"
				   "launcher: mpi\nprocs_per_node: 3\n";
	struct job_config j;
	struct strbuf err = STRBUF_INIT;

	assert_int_equal(job_config_parse(&j, yaml, strlen(yaml), "t.yaml", &err), 0);
	assert_true(j.shell);
	assert_int_equal(j.command.nr, 1);
	assert_string_equal(j.command.v[0], "echo hi | tee out");
	assert_int_equal(j.launcher, LAUNCHER_MPI);
	assert_int_equal(j.procs_per_node, 3);
	job_config_release(&j);
	strbuf_release(&err);
}

static void test_job_init(void **state)
{
	struct job_config j;

	job_config_init(&j);
	assert_int_equal(j.nodes, 1);
	assert_int_equal(j.procs_per_node, 1);
	assert_int_equal(j.command.nr, 0);
	assert_non_null(j.command.v);
	job_config_release(&j);
	job_config_release(&j);   /* twice is harmless */
}

static const struct sweep_param *find_param(const struct sweep_config *s, const char *name)
{
	for (size_t i = 0; i < s->nr_params; i++)
		if (!strcmp(s->params[i].name, name))
			return &s->params[i];
	fail_msg("no parameter '%s'", name);
	return NULL;
}

static void test_sweep_bayes(void **state)
{
	static const char yaml[] =
		"name: my sweep\n"
		"method: bayes\n"
		"metric: {name: val_loss}\n"
		"parameters:\n"
		"  lr: {distribution: log_uniform_values, min: 1.0e-4, max: 1.0e-1}\n"
		"  hidden: {values: [256, 512, 1024]}\n"
		"  batch: {min: 64, max: 512}\n"
		"  dropout: {min: 0, max: 0.5}\n"
		"  fixed: {value: adam}\n"
		"  noise: {distribution: normal, mu: 1, sigma: 0.5}\n"
		"  steps: {distribution: q_uniform, min: 0, max: 100, q: 10}\n"
		"  opt:\n"
		"    parameters:\n"
		"      momentum: {values: [0.9, 0.99]}\n"
		"      inner: {parameters: {beta: {value: 2}}}\n"
		"early_terminate: {type: hyperband, min_iter: 2}\n"
		"job:\n"
		"  command: [python, train.py, --lr, '{lr}']\n"
		"max_trials: 50\n"
		"parallel: 8\n"
		"seed: 42\n";
	struct sweep_config s;
	struct strbuf err = STRBUF_INIT;
	const struct sweep_param *p;
	json_t *j;

	assert_int_equal(sweep_config_parse(&s, yaml, strlen(yaml), "t.yaml", &err), 0);
	assert_int_equal(s.method, SWEEP_BAYES);
	assert_string_equal(s.metric_name, "val_loss");
	assert_int_equal(s.goal, GOAL_MINIMIZE);
	assert_int_equal(s.nr_params, 9);
	p = find_param(&s, "lr");
	assert_int_equal(p->kind, PARAM_LOG_UNIFORM);
	assert_true(p->min == 1.0e-4 && p->max == 1.0e-1);
	assert_int_equal(p->pos.line, 5);
	p = find_param(&s, "hidden");
	assert_int_equal(p->kind, PARAM_VALUES);
	assert_int_equal(p->values.nr, 3);
	assert_string_equal(p->values.v[2], "1024");
	assert_int_equal(find_param(&s, "batch")->kind, PARAM_INT_UNIFORM);
	assert_int_equal(find_param(&s, "dropout")->kind, PARAM_UNIFORM);
	p = find_param(&s, "fixed");
	assert_int_equal(p->kind, PARAM_VALUE);
	assert_string_equal(p->values.v[0], "adam");
	p = find_param(&s, "noise");
	assert_int_equal(p->kind, PARAM_NORMAL);
	assert_true(p->mu == 1.0 && p->sigma == 0.5);
	p = find_param(&s, "steps");
	assert_int_equal(p->kind, PARAM_Q_UNIFORM);
	assert_true(p->q == 10.0);
	assert_string_equal(find_param(&s, "opt.momentum")->values.v[1], "0.99");
	assert_int_equal(find_param(&s, "opt.inner.beta")->kind, PARAM_VALUE);
	assert_true(s.early_terminate);
	assert_int_equal(s.et_min_iter, 2);
	assert_int_equal(s.et_eta, 3);
	assert_int_equal(s.et_max_iter, 0);
	assert_int_equal(s.max_trials, 50);
	assert_int_equal(s.parallel, 8);
	assert_int_equal(s.seed, 42);
	assert_int_equal(s.max_failures, 3);
	assert_int_equal(s.job.command.nr, 4);
	assert_int_equal(s.job.launcher, LAUNCHER_AGENT);
	assert_int_equal(sweep_grid_size(&s), -1);
	j = sweep_config_to_json(&s);
	assert_string_equal(json_string_value(json_object_get(json_object_get(
		json_object_get(j, "parameters"), "batch"), "distribution")), "int_uniform");
	assert_int_equal(json_integer_value(json_array_get(json_object_get(json_object_get(
		json_object_get(j, "parameters"), "hidden"), "values"), 0)), 256);
	json_decref(j);
	sweep_config_release(&s);
	strbuf_release(&err);
}

/* A W&B file as W&B's docs write it: everything it holds is read, as W&B means it. */
static void test_sweep_wandb(void **state)
{
	static const char yaml[] =
		"program: train.py\n"
		"project: p\n"
		"entity: e\n"
		"description: d\n"
		"method: random\n"
		"metric: {name: loss, goal: maximize, target: 0.9}\n"
		"run_cap: 7\n"
		"early_terminate: {type: hyperband, max_iter: 100, s: 2, eta: 3.0}\n"
		"parameters:\n"
		"  lr: {distribution: log_uniform, min: -2, max: 0}\n"
		"  inv: {distribution: inv_log_uniform, min: 0, max: 2}\n"
		"  w: {distribution: q_log_uniform_values, min: 1, max: 8, q: 1}\n"
		"  f: {values: [true, 'true', 0.10, 1e-3, null, [1, 2], {k: v}]}\n"
		"  c: {values: [a, b], probabilities: [0.25, 0.75]}\n"
		"  opt: {parameters: {lr: {value: 0.1}}}\n";
	struct sweep_config s;
	struct strbuf err = STRBUF_INIT, warn = STRBUF_INIT;
	const struct sweep_param *p;

	(void)state;
	assert_int_equal(sweep_config_parse(&s, yaml, strlen(yaml), "w.yaml", &err), 0);
	assert_true(s.wandb);
	assert_string_equal(s.program, "train.py");
	/* W&B's default command */
	assert_int_equal(s.command.nr, 4);
	assert_string_equal(s.command.v[0], "${env}");
	assert_string_equal(s.command.v[3], "${args}");
	assert_int_equal(s.max_trials, 7);
	assert_true(s.has_target && s.target == 0.9 && s.goal == GOAL_MAXIMIZE);
	/* max_iter 100, s 2, eta 3: bands 33 and 11, the rungs; 100 the end */
	assert_int_equal(s.et_min_iter, 11);
	assert_int_equal(s.et_eta, 3);
	assert_int_equal(s.et_max_iter, 100);
	assert_int_equal(s.et_nr_bands, 2);
	assert_int_equal(s.et_bands[0], 11);
	assert_int_equal(s.et_bands[1], 33);
	p = find_param(&s, "lr");
	assert_int_equal(p->kind, PARAM_LOG_UNIFORM);
	assert_true(fabs(p->min - exp(-2)) < 1e-15 && p->max == 1);
	p = find_param(&s, "inv");
	assert_int_equal(p->kind, PARAM_LOG_UNIFORM);
	assert_true(fabs(p->min - exp(-2)) < 1e-15 && p->max == 1);
	p = find_param(&s, "w");
	assert_int_equal(p->kind, PARAM_Q_LOG_UNIFORM);
	assert_true(p->q_int);
	p = find_param(&s, "f");
	assert_int_equal(p->values.nr, 7);
	assert_string_equal(p->values.v[5], "[1, 2]");
	assert_string_equal(p->values.v[6], "{\"k\": \"v\"}");
	/* typed as PyYAML types them: 1e-3 without a '.' is a string there */
	assert_string_equal(p->typed.v[0], "true");
	assert_string_equal(p->typed.v[1], "\"true\"");
	assert_string_equal(p->typed.v[2], "0.10000000000000001");
	assert_string_equal(p->typed.v[3], "\"1e-3\"");
	assert_string_equal(p->typed.v[4], "null");
	p = find_param(&s, "c");
	assert_true(p->probs && p->probs[1] == 0.75);
	p = find_param(&s, "opt.lr");
	assert_int_equal(p->path.nr, 2);
	assert_string_equal(p->path.v[0], "opt");
	assert_int_equal(sweep_config_warnings(&s, &warn), 3);
	assert_non_null(strstr(warn.buf, "w.yaml:2:10: note: 'project' is accepted and ignored"));
	sweep_config_release(&s);
	strbuf_release(&err);
	strbuf_release(&warn);
}

/*
 * W&B's hyperband as its docs allow: bands that are not min_iter * eta^k
 * and a fractional eta load, and the sweep's JSON for dtsched carries them.
 */
static void test_sweep_wandb_bands(void **state)
{
	static const char bands[] =
		"program: train.py\n"
		"method: random\n"
		"run_cap: 5\n"
		"metric: {name: loss}\n"
		"early_terminate: {type: hyperband, max_iter: 100, s: 3, eta: 3}\n"
		"parameters: {lr: {min: 0.0, max: 1.0}}\n";
	static const char frac[] =
		"program: train.py\n"
		"method: random\n"
		"run_cap: 5\n"
		"metric: {name: loss}\n"
		"early_terminate: {type: hyperband, min_iter: 2, eta: 1.5, max_iter: 10}\n"
		"parameters: {lr: {min: 0.0, max: 1.0}}\n";
	struct sweep_config s;
	struct strbuf err = STRBUF_INIT;
	json_t *j, *et;

	(void)state;
	assert_int_equal(sweep_config_parse(&s, bands, strlen(bands), "b.yaml", &err), 0);
	assert_int_equal(s.et_nr_bands, 3);
	assert_int_equal(s.et_bands[0], 3);
	assert_int_equal(s.et_bands[1], 11);
	assert_int_equal(s.et_bands[2], 33);
	assert_int_equal(s.et_min_iter, 3);
	assert_int_equal(s.et_max_iter, 100);
	j = sweep_config_to_json(&s);
	et = json_object_get(j, "early_terminate");
	assert_int_equal(json_array_size(json_object_get(et, "bands")), 3);
	assert_int_equal(json_integer_value(json_array_get(json_object_get(et, "bands"), 1)), 11);
	json_decref(j);
	sweep_config_release(&s);

	assert_int_equal(sweep_config_parse(&s, frac, strlen(frac), "f.yaml", &err), 0);
	assert_true(s.et_eta == 1.5);
	assert_int_equal(s.et_nr_bands, 0);
	j = sweep_config_to_json(&s);
	et = json_object_get(j, "early_terminate");
	assert_true(json_is_real(json_object_get(et, "eta")));
	assert_true(json_real_value(json_object_get(et, "eta")) == 1.5);
	assert_null(json_object_get(et, "bands"));
	json_decref(j);
	sweep_config_release(&s);
	strbuf_release(&err);
}

static void test_sweep_grid_default_trials(void **state)
{
	static const char yaml[] =
		"method: grid\n"
		"metric: {name: acc, goal: maximize}\n"
		"parameters:\n"
		"  a: {values: [1, 2, 3]}\n"
		"  b: {distribution: int_uniform, min: 1, max: 4}\n"
		"  c: {value: x}\n"
		"job: {trainer: {model: mlp}}\n";
	struct sweep_config s;
	struct strbuf err = STRBUF_INIT;

	assert_int_equal(sweep_config_parse(&s, yaml, strlen(yaml), "t.yaml", &err), 0);
	assert_int_equal(s.goal, GOAL_MAXIMIZE);
	assert_int_equal(sweep_grid_size(&s), 12);
	assert_int_equal(s.max_trials, 12);
	assert_false(s.early_terminate);
	assert_int_equal(s.job.launcher, LAUNCHER_MPI);
	sweep_config_release(&s);
	strbuf_release(&err);
}

/* ------------------------------------------------------- files on disk */

static char tmpdir[64];

static void write_text(const char *name, const char *text)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static int make_tmpdir(void **state)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/dt-test-config-XXXXXX");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int remove_tmpdir(void **state)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

static void test_load_relative_paths(void **state)
{
	char path[256], want[256];
	struct cluster_config c;
	struct sweep_config s;
	struct strbuf err = STRBUF_INIT;

	write_text("cluster.yaml", "shared_dir: /n\nnodes: [local]\nsetup: {template: setup.sh}\n");
	snprintf(path, sizeof(path), "%s/cluster.yaml", tmpdir);
	assert_int_equal(cluster_config_load(&c, path, &err), 0);
	snprintf(want, sizeof(want), "%s/setup.sh", tmpdir);
	assert_string_equal(c.setup.template, want);
	assert_string_equal(c.path, path);
	cluster_config_release(&c);

	write_text("job.yaml", "trainer: {model: cnn}\nnodes: 2\n");
	write_text("sweep.yaml", "method: random\nmax_trials: 4\n"
		   "parameters: {lr: {min: 0.1, max: 0.2}}\njob: job.yaml\n");
	snprintf(path, sizeof(path), "%s/sweep.yaml", tmpdir);
	assert_int_equal(sweep_config_load(&s, path, &err), 0);
	assert_string_equal(s.job.name, "cnn");
	assert_int_equal(s.job.nodes, 2);
	snprintf(want, sizeof(want), "%s/job.yaml", tmpdir);
	assert_string_equal(s.job.path, want);
	sweep_config_release(&s);
	assert_string_equal(err.buf, "");
	strbuf_release(&err);
}

static void test_load_job_file_error(void **state)
{
	char path[256], want[512];
	struct sweep_config s;
	struct strbuf err = STRBUF_INIT;

	write_text("badjob.yaml", "command: [x]\nretries: many\n");
	write_text("sweep2.yaml", "method: random\nmax_trials: 4\n"
		   "parameters: {lr: {min: 0.1, max: 0.2}}\njob: badjob.yaml\n");
	snprintf(path, sizeof(path), "%s/sweep2.yaml", tmpdir);
	assert_int_equal(sweep_config_load(&s, path, &err), -1);
	snprintf(want, sizeof(want), "%s/badjob.yaml:2:10: key 'retries': expected a number of "
		 "retries (0 or more), found 'many'", tmpdir);
	assert_string_equal(err.buf, want);
	strbuf_release(&err);
}

static void test_load_missing_file(void **state)
{
	struct job_config j;
	struct strbuf err = STRBUF_INIT;

	assert_int_equal(job_config_load(&j, "/nonexistent/job.yaml", &err), -1);
	assert_string_equal(err.buf, "cannot read '/nonexistent/job.yaml': No such file or directory");
	strbuf_reset(&err);
	assert_int_equal(job_config_load(&j, tmpdir, &err), -1);
	assert_true(starts_with(err.buf, "cannot read '"));
	strbuf_release(&err);
}

static void test_load_huge_file(void **state)
{
	char path[256], want[512];
	struct cluster_config c;
	struct strbuf err = STRBUF_INIT, big = STRBUF_INIT;
	FILE *f;

	strbuf_addstr(&big, "shared_dir: /n\nnodes: [local]\n");
	while (big.len <= CONFIG_MAX_BYTES)
		strbuf_addstr(&big, "# padding padding padding padding padding padding padding\n");
	snprintf(path, sizeof(path), "%s/huge.yaml", tmpdir);
	f = fopen(path, "w");
	assert_non_null(f);
	fwrite(big.buf, 1, big.len, f);
	fclose(f);
	assert_int_equal(cluster_config_load(&c, path, &err), -1);
	snprintf(want, sizeof(want), "%s: file is too large (more than %d bytes)", path,
		 CONFIG_MAX_BYTES);
	assert_string_equal(err.buf, want);

	strbuf_reset(&err);
	assert_int_equal(cluster_config_parse(&c, big.buf, big.len, "t.yaml", &err), -1);
	snprintf(want, sizeof(want), "t.yaml: file is too large (%zu bytes; the limit is %d)",
		 big.len, CONFIG_MAX_BYTES);
	assert_string_equal(err.buf, want);
	strbuf_release(&err);
	strbuf_release(&big);
}

static void test_detect_kind(void **state)
{
	char path[256];
	struct strbuf err = STRBUF_INIT;
	const char *k;

	write_text("k1.yaml", "shared_dir: /n\nnodes: [local]\n");
	write_text("k2.yaml", "nodes: 2\ncommand: [x]\n");
	write_text("k3.yaml", "method: grid\n");
	write_text("k4.yaml", "nodes: 2\n");
	snprintf(path, sizeof(path), "%s/k1.yaml", tmpdir);
	assert_string_equal(config_detect_kind(path, &err), "cluster");
	snprintf(path, sizeof(path), "%s/k2.yaml", tmpdir);
	assert_string_equal(config_detect_kind(path, &err), "job");
	snprintf(path, sizeof(path), "%s/k3.yaml", tmpdir);
	assert_string_equal(config_detect_kind(path, &err), "sweep");
	assert_string_equal(err.buf, "");
	snprintf(path, sizeof(path), "%s/k4.yaml", tmpdir);
	k = config_detect_kind(path, &err);
	assert_null(k);
	assert_true(ends_with(err.buf, "k4.yaml:1:1: cannot tell whether this is a cluster, job "
			      "or sweep file from its keys; use --kind"));
	strbuf_release(&err);
}

static void test_kvlist(void **state)
{
	struct kvlist l = { 0 };

	kvlist_set(&l, "a", "1");
	kvlist_set(&l, "b", "2");
	kvlist_set(&l, "a", "3");
	assert_int_equal(l.nr, 2);
	assert_string_equal(kvlist_get(&l, "a"), "3");
	assert_string_equal(l.items[1].key, "b");
	assert_null(kvlist_get(&l, "c"));
	kvlist_release(&l);
	assert_int_equal(l.nr, 0);
}

static void test_yaml_append_scalar(void **state)
{
	static const struct { const char *in; int numbers_plain; const char *out; } cases[] = {
		{ "plain", 0, "plain" },
		{ "/mnt/nfs/x_1.yaml", 0, "/mnt/nfs/x_1.yaml" },
		{ "10s", 0, "10s" },
		{ "caf\xc3\xa9", 0, "\"caf\xc3\xa9\"" },
		{ "", 0, "\"\"" },
		{ "a: b", 0, "\"a: b\"" },
		{ "say \"hi\"\\", 0, "\"say \\\"hi\\\"\\\\\"" },
		{ "tab\tnl\n", 0, "\"tab\\tnl\\n\"" },
		{ "yes", 0, "\"yes\"" }, { "Off", 1, "\"Off\"" }, { "~", 1, "\"~\"" },
		{ "-x", 0, "\"-x\"" }, { ".inf", 1, "\".inf\"" },
		{ "2026-11-22", 1, "\"2026-11-22\"" }, { "0b101", 1, "\"0b101\"" },
		{ "0x10", 1, "\"0x10\"" },
		/* numbers: strings unless asked to stay numbers */
		{ "0.001", 0, "\"0.001\"" }, { "0.001", 1, "0.001" },
		{ "1e-3", 1, "1e-3" }, { "-2", 1, "-2" }, { ".5", 1, ".5" }, { "-2", 0, "\"-2\"" },
		{ "nan", 1, "\"nan\"" }, { "inf", 1, "\"inf\"" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		struct strbuf sb = STRBUF_INIT;

		yaml_append_scalar(&sb, cases[i].in, cases[i].numbers_plain);
		if (strcmp(sb.buf, cases[i].out))
			fail_msg("'%s' (numbers_plain %d): got %s, want %s", cases[i].in,
				 cases[i].numbers_plain, sb.buf, cases[i].out);
		strbuf_release(&sb);
	}
}

static const struct CMUnitTest fixed_tests[] = {
	cmocka_unit_test(test_cluster_full),
	cmocka_unit_test(test_cluster_defaults),
	cmocka_unit_test(test_cluster_slurm),
	cmocka_unit_test(test_env_expansion),
	cmocka_unit_test(test_env_bad_value_found),
	cmocka_unit_test(test_job_trainer),
	cmocka_unit_test(test_job_command),
	cmocka_unit_test(test_job_shell),
	cmocka_unit_test(test_job_init),
	cmocka_unit_test(test_sweep_bayes),
	cmocka_unit_test(test_sweep_grid_default_trials),
	cmocka_unit_test(test_sweep_wandb_bands),
	cmocka_unit_test(test_sweep_wandb),
	cmocka_unit_test(test_load_relative_paths),
	cmocka_unit_test(test_load_job_file_error),
	cmocka_unit_test(test_load_missing_file),
	cmocka_unit_test(test_load_huge_file),
	cmocka_unit_test(test_detect_kind),
	cmocka_unit_test(test_kvlist),
	cmocka_unit_test(test_yaml_append_scalar),
};

int main(void)
{
	static struct CMUnitTest config_tests[ARRAY_SIZE(bad_cases) + ARRAY_SIZE(fixed_tests)];

	/* one named test per bad case, so a failure names the case */
	for (size_t i = 0; i < ARRAY_SIZE(bad_cases); i++) {
		config_tests[i].name = bad_cases[i].name;
		config_tests[i].test_func = run_bad_case;
		config_tests[i].initial_state = (void *)&bad_cases[i];
	}
	memcpy(config_tests + ARRAY_SIZE(bad_cases), fixed_tests, sizeof(fixed_tests));
	return cmocka_run_group_tests(config_tests, make_tmpdir, remove_tmpdir);
}

/*
 * protocol.h - every endpoint spoken between dtctl, dtsched and dtagent.
 *
 * HTTP/1.1 + JSON, all paths under /v1 (plus the unsigned, read-only
 * Prometheus /metrics).  Every response body is a JSON object carrying
 * "protocol": DT_PROTOCOL_VERSION; errors are {"protocol": N, "error": "..."}
 * with a 4xx/5xx status.  Bump DT_PROTOCOL_VERSION on any incompatible
 * change of a path, method or field below.
 *
 * Signing (lib/auth.h): every /v1 request carries
 *     X-DT-Timestamp: unix seconds (decimal)
 *     X-DT-Nonce:     16..64 chars [A-Za-z0-9_-], unique per request
 *     X-DT-Signature: hex HMAC-SHA256(key, METHOD "\n" PATH "\n" TIMESTAMP
 *                     "\n" NONCE "\n" hex(sha256(body)))
 * where key = the bytes of the hex cluster secret (~/.dtctl/secret) decoded,
 * and PATH is the request path without any query string (the protocol uses
 * no query strings).  Stale (> DT_AUTH_MAX_SKEW_S), replayed, unsigned or
 * badly signed requests get 401 and change nothing.
 *
 * Replies are signed too (protocol 3 on), so that a program squatting on a
 * port while the daemon is down cannot answer for it, and one that relays a
 * reply to another request cannot reuse it: every reply to a request with a
 * well-formed X-DT-Nonce (401s included) carries
 *     X-DT-Signature: hex HMAC-SHA256(key, "reply" "\n" STATUS "\n" NONCE
 *                     "\n" hex(sha256(body)))
 * with NONCE the request's.  lib/httpc.c refuses a reply without it (no
 * answer, -1: "reply from H:P is not signed by this cluster (another program
 * on the head port?)"); a reply of another protocol version is the 426 below
 * whether or not it is signed.  Agents keep an ended task's record until a
 * signed 200 acknowledges it.
 *
 * Limits: bodies over DT_MAX_BODY get 413; malformed JSON 400; an unknown
 * path 404 (an id in a path is one segment of at most 255 bytes: what RFC
 * 3986 allows unencoded in a segment, or valid UTF-8 other than C1 controls;
 * else the path is unknown); a known path with another method 405 with an
 * Allow header.
 *
 * Versions: every signed request carries X-DT-Protocol: DT_PROTOCOL_VERSION
 * (absent: 1, the version before the header), and every JSON reply starts
 * {"protocol": N, ...}.  dtctl, dtsched and dtagent of different versions are
 * never silently mixed:
 *   - a server answers a signed request of another version with 426 and
 *     {"error": "<who> speaks protocol N, this request M: " DT_PROTOCOL_FIX,
 *      "peer_protocol": M} before any handler runs, except on routes marked
 *     DT_ROUTE_ANY_PROTOCOL (dtsched's heartbeat: it records the refused
 *     agent, so `dtctl nodes` and a job that cannot be placed say why);
 *   - a client (lib/httpc.c) that gets a reply of another version (an older
 *     server that does not check) turns it into the same 426 error itself.
 * Build with -DDT_PROTOCOL_VERSION=N to get another version (the e2e test of
 * this does).
 *
 * Times in bodies are dt_timestamp() strings ("2026-11-22T10:00:00.123456Z")
 * and durations are milliseconds ("*_ms").
 */
#ifndef DT_PROTOCOL_H
#define DT_PROTOCOL_H

/* 3: signed replies; 4: task requests carry the head's id; 5: the agent's
 * POST /v1/leave, dtsched's POST /v1/joblist, users (local socket, user keys) */
#ifndef DT_PROTOCOL_VERSION
#define DT_PROTOCOL_VERSION 5
#endif
#define DT_HDR_PROTOCOL "X-DT-Protocol"
#define DT_HTTP_PROTOCOL_MISMATCH 426   /* "Upgrade Required" */
/* the one fix for every mismatch: both halves from this dtctl's build */
#define DT_PROTOCOL_FIX "dtctl, dtsched and dtagent must come from one build: run 'dtctl init' " \
	"(it restarts a dtsched of another build and re-pushes this dtctl's agents)"

#define DT_AGENT_PORT_DEFAULT 7070
#define DT_HEAD_PORT_DEFAULT 7071

#define DT_HDR_TIMESTAMP "X-DT-Timestamp"
#define DT_HDR_NONCE "X-DT-Nonce"
#define DT_HDR_SIGNATURE "X-DT-Signature"
/* a user's own key (lib/userkey.h, docs/team.md): X-DT-User names the user and
 * X-DT-Signature is then hex Ed25519(their key, the same canonical string) */
#define DT_HDR_USER "X-DT-User"
/* a job's capability (auth.h dt_auth_cap): X-DT-Cap is "JOB USER UID GID" and
 * X-DT-Signature the HMAC with the key derived from the secret for it */
#define DT_HDR_CAP "X-DT-Cap"
#define DT_AUTH_MAX_SKEW_S 60

#define DT_MAX_BODY (1024 * 1024)

/* Common to both daemons ---------------------------------------------------
 *
 * GET /v1/status
 *   -> {protocol, program: "dtagent"|"dtsched", version, pid, name,
 *       started_at, uptime_ms}
 *
 * GET /metrics        (NOT signed: read-only counters for Prometheus; it
 *                      reveals no task command line, env or path)
 *   -> text/plain; version=0.0.4
 */
#define DT_PATH_STATUS "/v1/status"
#define DT_PATH_METRICS "/metrics"

/* dtagent (every node, port agent.port) -------------------------------------
 *
 * POST /v1/tasks                      start a task
 *   <- {id?          [A-Za-z0-9._-]{1,64}; generated "t-<hex>" if absent,
 *       argv         ["prog", "arg", ...]  (required, non-empty),
 *       shell?       false; true runs argv[0] with /bin/sh -c (argv[1..] = $0...),
 *       env?         {"NAME": "value"} added to the agent's environment,
 *       cwd?         working directory; the task fails if it is missing,
 *       submit_dir?  without cwd: start here when it exists on the node, else in
 *                    $HOME of the agent with a note in the log (dtctl run's cwd),
 *       cuda_visible_devices?  "0,1" (sets CUDA_VISIBLE_DEVICES),
 *       log?         absolute path of the log file (default ~/.dtctl/tasks/<id>.log),
 *       grace_ms?    SIGTERM -> SIGKILL grace on stop (default 10000),
 *       limits?      {nofile, nproc, core, memory_bytes, pids}  (rlimits; memory
 *                    and pids also as cgroup limits where a cgroup is made),
 *       job_id?, rank?   opaque labels reported back (dtsched's bookkeeping),
 *       umask?       0..0777: the task's umask (its log and what it writes), as
 *                    cluster.yaml's job_files says (dtsched: 027 or 022); absent:
 *                    the agent's own (027),
 *       head?        the id of the dtsched state.db that starts it (<= 64 bytes)}
 *   -> 201 {protocol, task: TASK}      409 if the id exists, 400 if invalid;
 *      an ended task of another head with the id is replaced instead (that
 *      head lost its state; agent.c, replaces_earlier_head)
 * POST /v1/tasks                      start several tasks (dtsched: all the
 *   <- {tasks: [TASKREQ...]}           ranks of a job on this node, at once);
 *                                      TASKREQ is the body above; 1 to
 *                                      DT_TASKS_BATCH_MAX of them, "tasks" the only key
 *   -> 200 {protocol, node, tasks: [{status: 201, task: TASK} |
 *                                   {status: 400|409|500, error}]}
 *      one result per request, in order; each is started (or refused) exactly
 *      as it would be alone, so a refused one leaves the others started.
 *      400 for the whole request (nothing started) when "tasks" is not such
 *      an array of objects.  (Agents of protocol 1 before this form answer
 *      400: 'argv' missing.)
 *
 * GET /v1/tasks                       -> {protocol, node, tasks: [TASK...]}
 * GET /v1/tasks/<id>                  -> {protocol, task: TASK}   404 if unknown
 * DELETE /v1/tasks/<id>               stop: SIGTERM to the whole tree, SIGKILL
 *   <- {grace_ms?}  (optional body)    after grace, then verified gone
 *   -> 202 {protocol, task: TASK}      (state "stopping", or final if already)
 * POST /v1/tasks/<id>/signal          send signal N to every process of the
 *   <- {signal: N}  (1 .. 64)          task's tree, which goes on running (its
 *   -> 200 {protocol, task: TASK}      supervisor signals it: the tree as for a
 *                                      stop); 409 when the task is final (nothing
 *                                      sent), 404 unknown (also from agents older
 *                                      than this route), 400 a bad signal
 *
 * TASK = {id, state, argv, shell, cwd, log, env_keys: [names], job_id, rank,
 *         cuda_visible_devices, pid, pgid, supervisor_pid, cgroup (path or null),
 *         exit_code (null until final; 128+N for signal N), signal, error,
 *         stop_requested, leftovers_killed, created_at, started_at, ended_at,
 *         rank_exits?: [{rank, exit_code, signal, ended_at}] (mpi ranks that
 *         ran under it and have ended, DT_AGENT_SOCKET_ENV below)}
 * states: DT_TASK_* below; exited/failed/lost are final.
 *
 * GET /v1/inventory
 *   -> {protocol, node, hostname, cpus, mem_total, mem_available, load1,
 *       gpu_source: "nvml"|"fake"|"none",
 *       gpus: [{index, name, uuid, memory_total, memory_used, utilization,
 *               processes: [{pid, used_memory}]}],
 *       net?: {interface, address, cidr}  the interface dtsched is reached on
 *             (lib/netif.h; absent over loopback): the jobs' NCCL/gloo/Open MPI
 *             interface,
 *       health?: {status: "ok"|"degraded"|"bad", events: [{severity, kind, gpu,
 *             detail, since}]} (agent/health.h; sent once heartbeats run)}
 */
#define DT_PATH_TASKS "/v1/tasks"
#define DT_TASKS_BATCH_MAX 256
#define DT_PATH_TASK_PREFIX "/v1/tasks/"
#define DT_PATH_TASK DT_PATH_TASK_PREFIX "{id}"          /* route pattern (lib/httpd.h) */
#define DT_PATH_SIGNAL_SUFFIX "/signal"
#define DT_PATH_TASK_SIGNAL DT_PATH_TASK DT_PATH_SIGNAL_SUFFIX
#define DT_SIGNAL_MAX 64          /* signals 1 .. 64 (SIGRTMAX on Linux) */
#define DT_PATH_INVENTORY "/v1/inventory"

/* POST /v1/leave                      the head tells a `dtagent --slurm` to leave
 *   <- {} (no body)
 *   -> 202 {protocol, node}            it stops every task and exits, as on the
 *                                      SIGTERM of its Slurm step (docs/slurm.md);
 *                                      409 from an agent that is no Slurm step's */
#define DT_PATH_LEAVE "/v1/leave"

/* POST /v1/ports                      a TCP port free on this node (MASTER_PORT)
 *   <- {min?: 29500, max?: 29999}      range to scan (1024..65535, min <= max)
 *   -> {protocol, port, node}          503 if every port of the range is taken
 *   The agent binds each candidate on all addresses to check it is free and
 *   hands out no port twice within DT_PORT_RESERVE_S, so two jobs starting
 *   at once on one master node never get the same port.
 *
 * Every task the agent starts gets PATH prefixed with the agent's own bin
 * directory, so `dttrain ...` and `dtshim rank-log ...` are this
 * installation's.  `dtshim rank-log DIR -- PROG ARGS` (run by mpirun for
 * each rank) writes DIR/<OMPI_COMM_WORLD_RANK>.log in the log format and
 * DIR/../ranks/<rank>.json = {rank, node, pid, exit_code, started_at,
 * ended_at} when the rank ends.
 */
#define DT_PATH_PORTS "/v1/ports"

/* POST /v1/debug                      the ranks of one job on this node, for
 *   <- {job_id, job_dir?, sample_ms?}  hang attribution (agent/debug.h)
 *   -> {protocol, node, ranks: [RANK...]}   RANK: agent/debug.h
 *   The agent samples each rank process for sample_ms (default 1000, at most
 *   5000) and sends SIGUSR2 only to a process that armed a record file in
 *   <job_dir>/debug/ naming its pid (dttrain, or Python through the
 *   sitecustomize.py it puts on the PYTHONPATH of every job task).  Off the
 *   agent's HTTP thread; one sampling per job at a time (409 while one runs);
 *   bounded processes and gdb attaches (agent/debug.h), "skipped": how many
 *   rank processes were left out.
 */
#define DT_PATH_DEBUG "/v1/debug"

/* POST /v1/probe                      the connectivity check before a job on 2
 *   <- {targets: [{node, address, port}...], timeout_ms?}   nodes or more
 *   -> {protocol, node, results: [{node, ok, ms, error?}...]}
 *   TCP connects to each target (the other chosen nodes' agent ports), all at
 *   once, each within timeout_ms (default 2000, at most 10000); nothing is sent.
 *   At most 256 targets; an address that is a name is looked up within the
 *   same timeout, off the agent's HTTP thread (agent/probe.c).
 *   dtsched asks every chosen node (scheduler/probe.c); a 404 (an agent older
 *   than the check) counts as not checked, not as a failure.
 */
#define DT_PATH_PROBE "/v1/probe"
#define DT_PROBE_TIMEOUT_MS 2000
#define DT_PORT_MIN_DEFAULT 29500
#define DT_PORT_MAX_DEFAULT 29999
#define DT_PORT_RESERVE_S 120

#define DT_TASK_STARTING "starting"
#define DT_TASK_RUNNING "running"
#define DT_TASK_STOPPING "stopping"
#define DT_TASK_EXITED "exited"     /* ran; see exit_code */
#define DT_TASK_FAILED "failed"     /* could not start (bad cwd, no program, ...) */
#define DT_TASK_LOST "lost"         /* its supervisor vanished; tree killed */

#define DT_TASK_ID_ENV "DT_TASK_ID"     /* the task id, set in every task process */
/* 32 random hex digits, set in every task process: what the agent looks for
 * in /proc/PID/environ to find a task's descendants.  Unlike the id it is
 * unique to this run of the task, so agents of other homes (other users,
 * other clusters) on the same host never take each other's processes. */
#define DT_TASK_MARKER_ENV "DT_TASK_INSTANCE"
/*
 * The mpi launcher's GPU map, for the rank logger (agent/ranklog.c): every
 * node's reserved GPUs in hostfile order, "0,1|2,3", and the ranks per node;
 * rank r sets CUDA_VISIBLE_DEVICES to field r / per_node.
 */
#define DT_GPU_SLOTS_ENV "DT_GPU_SLOTS"
/*
 * An agent whose GPU i is another device (dtagent --slurm: the i-th of its
 * step's CUDA_VISIBLE_DEVICES) has that list here in its environment, which
 * every task it starts inherits: the rank logger maps DT_GPU_SLOTS through
 * it, as the agent maps its own tasks' GPUs (agent/ranklog.h).
 */
#define DT_GPU_MAP_ENV "DT_GPU_MAP"
/*
 * "1": the job asks for line-buffered C stdio (job.yaml line_buffered:,
 * dtctl run --line-buffered).  Whoever execs the rank (the supervisor, or
 * the mpi launcher's rank logger) preloads coreutils' libstdbuf for it
 * (agent/linelog.h, linelog_stdbuf_env()).
 */
#define DT_LINE_BUFFERED_ENV "DT_LINE_BUFFERED"
/*
 * Who writes a rank's log (issue 27, item 5): every task gets DT_NODE, its
 * agent's node name, and every rank DT_ATTEMPT (launch.c).  The rank's log
 * writer (supervisor, or the mpi rank logger) starts each attempt's lines
 * with a marker line "<time> A <attempt> <node>" (linelog.h), which readers
 * (lib/logmerge.h) take as the node and attempt of the lines after it.
 */
#define DT_NODE_ENV "DT_NODE"
#define DT_ATTEMPT_ENV "DT_ATTEMPT"
/*
 * Rank exits through the agents (issue #21 item 4, issue 26): every task
 * process gets DT_AGENT_SOCKET, the name of its agent's report socket
 * (agent/report.h: a Unix datagram socket where the kernel tells the agent
 * who sent each datagram).  The rank logger sends its ranks/<r>.json record
 * there as {kind: "rank_exit", task: DT_TASK_ID, rank, exit_code, signal,
 * ended_at} (DT_TASK_ID is mpirun's task on the first node, the orted's on
 * the others).  The agent takes it only from a process of that task's own
 * tree and adds {rank, exit_code, signal, ended_at} to the task's
 * "rank_exits" array in TASK (GET /v1/tasks, heartbeats, sent at once);
 * dtsched ends an mpi job when every rank of its world has an exit there
 * (scheduler/backend-agents.c).
 */
#define DT_AGENT_SOCKET_ENV "DT_AGENT_SOCKET"
/* an mpi job's image for its rank loggers: {"image", "digest", "shared"} (agent/ranklog.c) */
#define DT_CONTAINER_ENV "DT_CONTAINER"
#define DT_RANKS_PER_NODE_ENV "DT_RANKS_PER_NODE"
#define DT_TASK_GRACE_MS_DEFAULT 10000
/* an orted started through the agents (agent/rsh.h) is task
 * "<job>.<attempt>." DT_ORTED_TASK_TAG "<host>" (dtsched spares it, backend-agents.c) */
#define DT_ORTED_TASK_TAG "orted-"

/* dtsched (the head, port head.port) -----------------------------------------
 *
 * POST /v1/heartbeat                  from each agent, every agent.heartbeat
 *   <- {node, port, address?, agent_pid, agent_started_at, version,
 *       bin_dir?, home?, ssh_config? (<home>/ssh_config when it exists: mpirun's
 *       plm_rsh_args -F on that node),
 *       inventory_hash?: hex sha256 of the agent's compact inventory JSON
 *               without its usage numbers (mem_available, load1, and each
 *               GPU's memory_used, utilization, processes), so it changes
 *               only when the node does,
 *       inventory?: (as GET /v1/inventory without protocol) -- required
 *               without inventory_hash; with it, sent only when the hash
 *               changed since dtsched last took it, or when asked,
 *       usage?: {mem_available, load1, gpus: [{index, memory_used,
 *               utilization, processes}]} -- those numbers, sent when they
 *               changed since dtsched last took them (mem_available rounded
 *               down to 16 MiB); dtsched applies them to the inventory it has,
 *       tasks: [TASK...] (every non-final task, and a final one until a
 *               heartbeat carrying it was answered 200; dtsched keeps final
 *               tasks in memory DT_HEARTBEAT_RECENT_S after they ended), seq,
 *       full: true when tasks is the agent's whole table (its first heartbeat,
 *             and the one after a reply with want_full),
 *       tasks_digest?: 16 hex digits, dt_tasks_digest() of this "tasks" array
 *             (a beacon must carry the same one)}
 *   -> {protocol, state: node state, heartbeat_ms, dead_after_ms,
 *       want_full: dtsched (re)learns about the node: send the whole table next,
 *       want_inventory: dtsched has no inventory for that hash (it restarted,
 *             or the node is new): send the inventory now,
 *       beacon?: true when dtsched takes UDP beacons (below); absent from an
 *             older dtsched, which therefore never gets any,
 *       beacons_seen?: beacons dtsched accepted from this node since its
 *             previous HTTP heartbeat}
 *   A full heartbeat reconciles: a live task dtsched knows but the agent does
 *   not is marked lost.  An extra heartbeat is sent at once on a task change.
 *
 * GET /v1/nodes                       -> {protocol, nodes: [NODE...]}
 * GET /v1/nodes/<name>                -> {protocol, node: NODE}  404 if unknown
 * POST /v1/nodes/<name>/drain         -> {protocol, node: NODE}
 * POST /v1/nodes/<name>/resume        -> {protocol, node: NODE}
 * POST /v1/nodes/<name>/stopped       from an agent that stops on purpose (SIGTERM,
 *                                     `dtctl agents stop`), its last request
 *   <- {agent_started_at} (as its heartbeats said: a late one from an older
 *       agent changes nothing)
 *   -> {protocol, node: NODE}  the node is DOWN at once, down_reason "agent
 *       stopped", until it heartbeats again; its tasks are kept (marked lost
 *       only after dead_after), as a restarted agent adopts them
 * GET /v1/tasks                       -> {protocol, tasks: [HEADTASK...]} as
 *                                        last reported (or marked lost)
 *
 * NODE = {name, state, address, port, gpus_total, gpus_used, gpu_util (mean %),
 *         gpus: [...], cpus, mem_total, mem_available, tasks_running,
 *         last_heartbeat (timestamp or null), heartbeat_age_ms, drained,
 *         health ("ok"|"degraded"|"bad"|"" unknown), agent_version,
 *         health_reason (the worst finding, or null),
 *         drain_reason ("auto: XID 79 on GPU 1: ... (time)", "by dtctl drain", or null),
 *         down_reason ("agent stopped" when its agent said so, else null)}
 * A node whose health turns bad is drained with the reason (kept in state.db)
 * until `dtctl resume`; the reply also lists "refused" agents (Versions).
 * dtsched_nodes_health{health} on /metrics counts them.
 * HEADTASK = {node, id, state, exit_code, job_id, rank, lost, reason, updated_at}
 *   reason: "NODE_FAIL" when its node went DOWN, "unknown to its agent", or null.
 */
#define DT_PATH_HEARTBEAT "/v1/heartbeat"

/* Beacons (dtagent -> dtsched, UDP; lib/beacon.h, docs/agents.md) ------------
 *
 * An idle agent's heartbeat without HTTP: one datagram to dtsched's address
 * and the UDP port of the same number as its HTTP port, no reply.  One line
 * of printable ASCII, fields separated by single spaces, at most
 * DT_BEACON_MAX bytes:
 *     DTB1 NODE STARTED SEQ TIME INVENTORY_HASH TASKS_DIGEST MAC
 *   NODE            [A-Za-z0-9._-]{1,255}
 *   STARTED         the agent's agent_started_at ([A-Za-z0-9._:+-]{1,47})
 *   SEQ             the agent's heartbeat seq: one counter per agent start
 *                   for HTTP heartbeats and beacons alike, decimal, > 0
 *   TIME            unix seconds (decimal)
 *   INVENTORY_HASH  64 lower-case hex digits, as in the heartbeat
 *   TASKS_DIGEST    16 lower-case hex digits: the tasks_digest of the agent's
 *                   last HTTP heartbeat answered 200
 *   MAC             hex HMAC-SHA256(key, everything before " MAC"), lower case
 * (A signed HTTP string always has four "\n", a datagram none: neither can
 * pass for the other.)  dtsched takes a beacon, i.e. the node's heartbeat
 * time is refreshed and SUSPECT turns UP exactly as for an idle HTTP
 * heartbeat, only when: it is in the format (else dropped; "DTB2": dropped as
 * another version), TIME within DT_AUTH_MAX_SKEW_S of dtsched's clock, MAC
 * good (constant-time compare), the node known, not DOWN, not waiting for a
 * full table, STARTED, INVENTORY_HASH and TASKS_DIGEST equal to what its last
 * HTTP heartbeat said, and SEQ above every seq seen from that agent start
 * (HTTP heartbeats included: a replay is dropped).  A well-signed, fresh
 * beacon refused for any other reason (dtsched restarted, node DOWN, hash or
 * digest differ, unknown node) is answered with one resync datagram to its
 * source address, at most one per node per DT_RESYNC_MIN_MS:
 *     DTR1 NODE SEQ TIME MAC
 * (SEQ: the beacon's; TIME: dtsched's; MAC as above), always shorter than the
 * beacon it answers.  An agent that gets a resync with its own node name, the
 * seq of a beacon it sent and a good MAC sends an HTTP heartbeat at once.
 * Nothing unauthenticated is ever answered.
 *
 * An agent sends beacons only after an HTTP heartbeat answered 200 with
 * "beacon": true, only while nothing changed since (tasks, final tasks not
 * yet acknowledged, inventory, want_full/want_inventory; usage numbers alone
 * wait for the next HTTP heartbeat), and only
 * while its next beat is within dead_after_ms/2 of that heartbeat: an idle
 * node still sends an HTTP heartbeat every dead_after/2.  When it sent
 * DT_BEACON_UNSEEN_MAX (3) or more beacons and the replies' beacons_seen say
 * none arrived, it stops sending them for DT_BEACON_RETRY_MS (5 min).
 */
#define DT_BEACON_MAGIC "DTB1"
#define DT_RESYNC_MAGIC "DTR1"
#define DT_BEACON_MAX 512
#define DT_RESYNC_MIN_MS 250
#define DT_PATH_NODES "/v1/nodes"
#define DT_PATH_NODE_PREFIX "/v1/nodes/"
#define DT_PATH_DRAIN_SUFFIX "/drain"
#define DT_PATH_RESUME_SUFFIX "/resume"
#define DT_PATH_STOPPED_SUFFIX "/stopped"
/* route patterns (lib/httpd.h): {name} is one path segment */
#define DT_PATH_NODE DT_PATH_NODE_PREFIX "{name}"
#define DT_PATH_NODE_DRAIN DT_PATH_NODE DT_PATH_DRAIN_SUFFIX
#define DT_PATH_NODE_RESUME DT_PATH_NODE DT_PATH_RESUME_SUFFIX
#define DT_PATH_NODE_STOPPED DT_PATH_NODE DT_PATH_STOPPED_SUFFIX
#define DT_HEARTBEAT_RECENT_S 60

/* Jobs (dtctl <-> dtsched) ---------------------------------------------------
 *
 * POST /v1/jobs                       submit a job
 *   <- {job: JOBSPEC (config.h job_config_to_json form: name, nodes,
 *            gpus_per_node, procs_per_node, launcher, trainer | command, shell,
 *            workdir, env, timeout, stall_after, retries, include_nodes,
 *            exclude_nodes, labels),
 *       shared_dir: the cluster's shared dir (job dirs go to <shared_dir>/jobs/<id>),
 *       dry_run?: true = place and plan only, start and store nothing,
 *       user?: ignored (older clients sent it): the owner is who the request
 *              proves to be (scheduler/users.h),
 *       submit_dir?: the absolute directory dtctl ran in: the ranks start there
 *                    where it exists on their node (the job's workdir wins)}
 *   -> 201 {protocol, job: JOB}               queued (PENDING) or already RUNNING
 *   -> 200 {protocol, dry_run: true, state: "RUNNING"|"PENDING", reason,
 *           placement: [{node, address, slots}], plan: launch.h plan JSON}
 *   -> 400 invalid spec (nothing queued)
 *   -> 422 it can never fit: {error: "job needs 2 node(s) with 16 slot(s) ..."}
 *
 * GET /v1/jobs                        -> {protocol, jobs: [JOB...]} newest first
 *                                        (every job dtsched remembers; clients filter)
 * GET /v1/jobs/<id>                   -> {protocol, job: JOB (with details)}  404
 * POST /v1/jobs/<id>/cancel           -> {protocol, job: JOB}  (final jobs: unchanged)
 * POST /v1/jobs/<id>/wait             long-poll: the job once it changed
 *   <- {since_version: the JOB.version the client has (-1 or absent: none),
 *       timeout_ms: 0..DT_JOB_WAIT_MAX_MS (0 = answer at once)}
 *   -> {protocol, job: JOB (with details)} as soon as JOB.version differs
 *      from since_version or the job is final, else after timeout_ms (same
 *      version: nothing changed).  dtsched holds no thread while it waits.
 *
 * JOB = {id, version (bumped on every change dtsched records; restarts at 0
 *        when dtsched restarts), name, user, state, reason, submitted_at, started_at, ended_at,
 *        elapsed_ms, nodes, per_node, gpu (slots are GPUs), world_size, launcher,
 *        job_dir, attempt (0 = first run), retries, exit_code, failed_rank,
 *        failed_node, stalled: [{rank, node, pid, idle_ms}],
 *        placement: [{node, address, slots}],
 *        details only: spec, master_port, history: [{state, at, reason}],
 *        ranks: [{rank, node, task, state, exit_code, pid, log, reason?}],
 *        avoid: [node]}
 *        A rank's state is its task's (starting, running, stopping, exited,
 *        failed, lost) or, once the job ended, "killed" (reason "killed by
 *        dtctl": still running when another rank failed or the job was
 *        cancelled or timed out, so dtsched stopped it) or "lost" (reason
 *        "lost with node": its node went down).  mpi jobs list the mpirun
 *        task (rank -1) and then every rank, from <job_dir>/ranks/<r>.json.
 * Every transition is in SQLite before it is acted on, and <job_dir>/state
 * (one word) and <job_dir>/placement.json are rewritten atomically with it.
 * <job_dir>/plan.json is the launch plan (scheduler/launch.h, the dry run's
 * "plan") of the latest attempt, written before its tasks are started.
 */
/*
 * Users (scheduler/users.h, docs/team.md).  Every request is one user's: on
 * the local socket (head.socket) the kernel's SO_PEERCRED uid, else the
 * signature (the cluster secret: the user dtsched runs as).  A request the
 * caller may not make is 403 {"error": the rule}: "job j-000042 belongs to
 * alice; cancelling it needs the admin role".  A job's "user" is its
 * submitter as authenticated ("user" in a submit is ignored); others' jobs
 * come with "redacted": true and only id, name, user, state, reason, times,
 * shape and placement.
 *
 * GET /v1/jobs also says {"you": the caller's user name}.
 *
 * GET /v1/whoami
 *   -> {protocol, user, uid (null unless by uid), roles: ["user", "admin"?],
 *       authenticated_by, admin_because (null unless admin), mode}
 */
#define DT_PATH_WHOAMI "/v1/whoami"
/*
 * POST /v1/joblist {user?: only theirs, all?: every user's and finished ones;
 *                   neither: the caller's unfinished jobs;
 *                   format?: "tsv"}                                (`dtctl ps`)
 *   -> {protocol, you, jobs: [BRIEF...]} oldest first: what ps prints and no
 *      more (id, name, user, state, reason, elapsed_ms, nodes, world_size,
 *      placement [{node}], stalled (its first), slurm {job_id}, log_lost_lines),
 *      so a queue of 10,000 is not sent whole; `ps --json` still reads
 *      GET /v1/jobs.
 *   format "tsv" -> 200 text/tab-separated-values: the same jobs as rows
 *      (lib/rowfmt.h), no JSON to parse: the first row names the columns
 *      (DT_JOBLIST_FIELDS today; a reader finds its columns by name, and dtsched
 *      may add some), then a row per job; missing (\N): reason when none,
 *      stalled_* unless stalled, and of others' jobs what BRIEF leaves out (log
 *      lost lines and the Slurm job are 0 then; redacted: "redacted").  A
 *      dtsched that predates it answers with JSON: the reader falls back.
 */
#define DT_PATH_JOBLIST "/v1/joblist"
#define DT_JOBLIST_FIELDS "id", "name", "user", "state", "reason", "elapsed_ms", "nodes", \
	"world_size", "log_lost_lines", "slurm_job_id", "nodelist", "stalled_rank", \
	"stalled_node", "stalled_pid", "stalled_idle_ms", "redacted"
/*
 * Users elsewhere, with their own ed25519 key (lib/userkey.h; X-DT-User):
 * GET /v1/users -> {protocol, users: [{name, key, fingerprint, admin, added_at}]}
 * POST /v1/users {name, key: "ssh-ed25519 AAAA...", admin: bool} -> 201 {user}  (admin)
 * DELETE /v1/users/<name> -> {removed: name}                                    (admin)
 */
#define DT_PATH_USERS "/v1/users"
#define DT_PATH_USER_PREFIX "/v1/users/"
#define DT_PATH_USER DT_PATH_USER_PREFIX "{name}"
#define DT_PATH_JOBS "/v1/jobs"
#define DT_PATH_JOB_PREFIX "/v1/jobs/"
#define DT_PATH_CANCEL_SUFFIX "/cancel"
#define DT_PATH_WAIT_SUFFIX "/wait"
/* route patterns (lib/httpd.h) */
#define DT_PATH_JOB DT_PATH_JOB_PREFIX "{id}"
#define DT_PATH_JOB_CANCEL DT_PATH_JOB DT_PATH_CANCEL_SUFFIX
#define DT_PATH_JOB_WAIT DT_PATH_JOB DT_PATH_WAIT_SUFFIX
/* POST /v1/jobs/<id>/debug            hang attribution (scheduler/hang.h)
 *   <- {}                             start one (or join the one running)
 *   -> 202 {protocol, gen}            409 when the job is not running
 *   <- {wait: gen, timeout_ms}        long-poll until attribution gen is done
 *   -> {protocol, hang: HANG | null, done, running}  (done false and running
 *      false: it was lost, dtsched restarted)
 * JOB (details) carries the latest as "hang"; one also runs by itself when
 * stall detection first finds silent ranks (events.log: "ATTRIBUTION ..."). */
#define DT_PATH_DEBUG_SUFFIX "/debug"
#define DT_PATH_JOB_DEBUG DT_PATH_JOB DT_PATH_DEBUG_SUFFIX
/* POST /v1/jobs/<id>/signal           send signal N to every rank of the job's
 *   <- {signal: N}  (1 .. 64)          running attempt (the backend's signal:
 *   -> {protocol, job: id, signal, tasks}   scheduler/backend.h); the job goes on
 *   409 not running (or still launching), 400 a bad signal, 501 the cluster's
 *   backend cannot signal ranks, 502 no task of it could be reached */
#define DT_PATH_JOB_SIGNAL DT_PATH_JOB DT_PATH_SIGNAL_SUFFIX
/*
 * In the Slurm backend's batch script (scheduler/slurm.h): dtctl's job id,
 * whose ranks `dtctl slurm-agents` passes Slurm's --signal warning on to.
 */
#define DT_ENV_SLURM_JOB "DTCTL_SLURM_JOB"
#define DT_JOB_WAIT_MAX_MS 60000

#define DT_JOB_PENDING "PENDING"
#define DT_JOB_RUNNING "RUNNING"
#define DT_JOB_COMPLETED "COMPLETED"
#define DT_JOB_FAILED "FAILED"
#define DT_JOB_CANCELLED "CANCELLED"
#define DT_JOB_TIMEOUT "TIMEOUT"
#define DT_JOB_NODE_FAIL "NODE_FAIL"

/* Events (dtctl <-> dtsched; scheduler/events.c, docs/events.md) -----------
 *
 * POST /v1/events                     the head's event stream, oldest first
 *   <- {after_id: the last id the reader has (0: from the oldest kept),
 *       since_us: only events at or after this time (0: any),
 *       job: only this job's (absent: all), limit: 1..DT_EVENTS_MAX_LIMIT,
 *       timeout_ms: 0..DT_JOB_WAIT_MAX_MS (long-poll while none is new)}
 *   -> {protocol, events: [EVENT...], last_id: the newest id the head has
 *       (a reader resumes with after_id = the last id it printed),
 *       oldest_id: the oldest kept (events before it were dropped: bound)}
 *   EVENT: {id, at, kind ("job.queued", "job.ended", "node.drained", ...),
 *           job?, name?, user?, node?, sweep?, ...: docs/events.md}
 */
#define DT_PATH_EVENTS "/v1/events"
#define DT_EVENTS_MAX_LIMIT 1000

/* Dashboard (dtctl <-> dtsched; scheduler/dashboard.c, docs/dashboard.md) --
 *
 * POST /v1/dashboard/login            a one-time login link for the dashboard
 *   <- {user}
 *   -> {protocol, url: "http://127.0.0.1:PORT/ui/login/<token>", expires_in_s}
 *      503 when the dashboard's listener could not start
 * The dashboard's own listener (127.0.0.1, a free port) serves, unsigned:
 *   GET /ui/login/<token>              once: a session, and the page
 *   GET /ui/s/<session>/               the page
 *   GET /ui/s/<session>/api/state      {user, nodes (each with gpus), jobs, events}
 *   GET /ui/s/<session>/jobs/<id>      a job's page
 *   GET /ui/s/<session>/sweeps/<id>    a sweep's report (cli/sweep-report.h)
 *   GET /ui/s/<session>/api/jobs/<id>  {user, job (as GET /v1/jobs/<id>), events}
 *   GET /ui/s/<session>/api/jobs/<id>/logs/<after_us>   {lines, last, final}
 *   GET /ui/s/<session>/api/jobs/<id>/metrics           {points: [{step, loss, ...}]}
 *   GET /ui/s/<session>/chart.js       Debian's Chart.js (libjs-chart.js), for the plots
 *   POST /ui/s/<session>/api/jobs/<id>/cancel           the owner only (403)
 */
#define DT_PATH_DASHBOARD_LOGIN "/v1/dashboard/login"
/* Accounting and fair share (dtctl acct / share; scheduler/acct.c, docs/fairshare.md)
 *
 * POST /v1/acct                       the jobs that ended in a window
 *   <- {user?, project?, state?, since_us?, until_us?}   (end time in [since, until))
 *   -> {protocol, jobs: [ROW...], totals: {all: T, users: {name: T}, projects: {name: T}}}
 *      ROW = {id, user, project, name, state, nodes, per_node, gpus, cpu_slots,
 *             node_list, submitted_at, started_at, ended_at, attempts, gpu_hours,
 *             gpu_hours_lost, cpu_slot_hours, reason}
 *      T = {jobs, gpu_hours, gpu_hours_lost, cpu_slot_hours}
 * GET /v1/share                       -> {protocol, half_life_ms, total_usage_gpu_hours,
 *      users: [{name, project, share, norm_share, usage_gpu_hours, fairshare,
 *               gpus_in_use, cpu_slots_in_use, pending}], projects: [same, no project,
 *               guaranteed_gpus]}
 * A pending JOB carries "project" and "priority": {value, position, factors:
 * {fairshare, age, size}, reserved, expected_start (null: unknown),
 * expected_unknown? (why), floor? {guaranteed_gpus, gpus_in_use, within}}
 * (dtctl why; floor: when its project has a guaranteed_gpus).
 */
#define DT_PATH_ACCT "/v1/acct"
#define DT_PATH_SHARE "/v1/share"

/* Sweeps (dtctl <-> dtsched; scheduler/sweeps.c, docs/sweep.md) -------------
 *
 * POST /v1/sweeps                     start a sweep
 *   <- {sweep: SWEEPSPEC (config.h sweep_config_to_json form, job inline),
 *       name?, shared_dir, user?}
 *   -> 201 {protocol, sweep: SWEEP}   400 invalid (nothing started), 422 its
 *                                     trial can never fit (nothing started)
 * GET /v1/sweeps                      -> {protocol, sweeps: [SWEEP...]} newest first
 * GET /v1/sweeps/<id or name>         -> {protocol, sweep: SWEEP, trials: [TRIAL...],
 *                                         best: {trial, value, params} | null}
 *                                        (exactly what `dtctl sweep export --json` prints)
 * POST /v1/sweeps/<id>/pause | /resume | /stop   -> {protocol, sweep: SWEEP}
 *
 * SWEEP = {id, name, method, metric: {name, goal}, state, reason, max_trials,
 *          parallel, created_at, ended_at, parameters: [{name, kind, min, max, q,
 *          mu, sigma | values}], counts: {STATE: n}, trials_started, failures, user}
 * TRIAL = {trial (1-based), job_id, params: {name: "value as passed"}, state,
 *          value, no_metric, resource, created_at, ended_at, metrics: [{...}]}
 * Every suggestion, trial state change and metric report is in SQLite
 * (tables sweeps, sweep_trials, sweep_reports) before it is acted on.
 */
#define DT_PATH_SWEEPS "/v1/sweeps"
#define DT_PATH_SWEEP_PREFIX "/v1/sweeps/"
#define DT_PATH_PAUSE_SUFFIX "/pause"
#define DT_PATH_STOP_SUFFIX "/stop"
/* and DT_PATH_RESUME_SUFFIX "/resume" (nodes) */
/* route patterns (lib/httpd.h): {id} is a sweep id or name */
#define DT_PATH_SWEEP DT_PATH_SWEEP_PREFIX "{id}"
#define DT_PATH_SWEEP_PAUSE DT_PATH_SWEEP DT_PATH_PAUSE_SUFFIX
#define DT_PATH_SWEEP_RESUME DT_PATH_SWEEP DT_PATH_RESUME_SUFFIX
#define DT_PATH_SWEEP_STOP DT_PATH_SWEEP DT_PATH_STOP_SUFFIX

#define DT_SWEEP_RUNNING "RUNNING"
#define DT_SWEEP_PAUSED "PAUSED"
#define DT_SWEEP_STOPPED "STOPPED"
#define DT_SWEEP_COMPLETED "COMPLETED"
#define DT_SWEEP_FAILED "FAILED"

#define DT_TRIAL_PENDING "PENDING"
#define DT_TRIAL_RUNNING "RUNNING"
#define DT_TRIAL_COMPLETED "COMPLETED"
#define DT_TRIAL_PRUNED "PRUNED"
#define DT_TRIAL_FAILED "FAILED"
#define DT_TRIAL_CANCELLED "CANCELLED"
#define DT_TRIAL_PAUSED "PAUSED"         /* promotion: stopped at a rung, may resume */

#define DT_METRIC_PREFIX "DTCTL_METRIC"   /* stdout line: DTCTL_METRIC {"epoch": 1, ...} */

#define DT_NODE_UP "UP"
#define DT_NODE_SUSPECT "SUSPECT"
#define DT_NODE_DOWN "DOWN"
#define DT_NODE_DRAINED "DRAINED"

#endif

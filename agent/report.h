/*
 * report.h - what a task's own processes tell their agent, over a channel
 * the kernel authenticates (issue 26).
 *
 * A job runs as the agent's Unix user and can write every file the agent
 * can, so a file in the agent's task dir proves nothing about who wrote it:
 * rank exit records used to be such files, and any job could end another
 * job's MPI run or have a healthy node drained by forging them.  Reports now
 * travel as datagrams on a Unix socket the agent binds (an abstract name
 * derived from its home, so every agent of a host has its own).  The agent
 * sets SO_PASSCRED: the kernel attaches the sending process's pid and uid to
 * each datagram, which the sender cannot fake, and the agent accepts a
 * report about task T only from a process of T's own tree (its pid descends
 * from T's supervisor, checked in /proc) or, for the end of T itself, from
 * that supervisor.  Anything else is refused and logged with the sender's
 * pid.
 *
 * Datagrams are one JSON object each (at most REPORT_MAX bytes):
 *   {"kind": "rank_exit", "task", "rank", "exit_code", "signal", "ended_at"}
 *       from the rank logger (ranklog.c): one MPI rank ended
 *   {"kind": "task_end", "task"}
 *       from the supervisor (supervise.c) after it saved its task's final
 *       state: the agent takes that state from the task file only then
 *
 * The socket's name reaches task processes in DT_AGENT_SOCKET_ENV (protocol.h).
 *
 * The agent checks a sender's place in the tree in /proc after the datagram
 * arrived, so the sender must still be there: a rank logger sends from an
 * address of its own (autobind) and waits (REPORT_ACK_MS at most) for the
 * agent's answer, "ok" or "refused: why", before it exits.
 */
#ifndef DT_AGENT_REPORT_H
#define DT_AGENT_REPORT_H

#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include "strbuf.h"

#define REPORT_MAX 4096
#define REPORT_ACK_MS 2000

/* who sent a datagram, as the kernel says */
struct report_from {
	pid_t pid;
	uid_t uid;
	struct sockaddr_un addr;      /* where to answer (addrlen 0: nowhere) */
	socklen_t addrlen;
};

/* The socket name of the agent of `home`: "@dtagent-<16 hex>" ('@': abstract). */
void report_socket_name(struct strbuf *name, const char *home);

/* Bind the agent's socket (non-blocking, SO_PASSCRED); fd or -1 with err. */
int report_listen(const char *name, struct strbuf *err);

/*
 * One datagram from fd into body (replaced) with who sent it: 1, 0 when none
 * is waiting, -1 on error.
 */
int report_recv(int fd, struct strbuf *body, struct report_from *from);

/* The agent's answer to a sender that waits for one (no-op otherwise). */
void report_answer(int fd, const struct report_from *from, const char *text);

/*
 * Send one report to the socket `name`; -1 with err when it cannot.  With
 * ack (not NULL), wait up to REPORT_ACK_MS for the agent's answer there
 * ("" when none came).
 */
int report_send(const char *name, const char *body, size_t len, struct strbuf *ack,
		struct strbuf *err);

#endif

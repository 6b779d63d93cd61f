/*
 * agentcall.c - one signed POST to each of several agents, all at once, each
 * on a thread of its own: the fan-out of hang attribution (hang.c) and of the
 * connectivity check (probe.c).  Called without the lock: it blocks until
 * every call answered or timed out.
 */
#include "jobs-int.h"
#include "json.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

void agent_call_init(struct agent_call *c, const struct sched *s, const struct node *n,
		     const char *path, int timeout_ms)
{
	memset(c, 0, sizeof(*c));
	c->name = xstrdup(n->name);
	c->addr = xstrdup(n->address);
	c->port = n->port;
	c->key = &s->key;
	c->path = path;
	c->timeout_ms = timeout_ms;
	strbuf_init(&c->err, 0);
}

void agent_call_release(struct agent_call *c)
{
	free(c->name);
	free(c->addr);
	json_decref(c->body);
	json_decref(c->reply);
	strbuf_release(&c->err);
}

static void *call_one(void *arg)
{
	struct agent_call *x = arg;
	struct dt_httpc c;

	dt_httpc_init(&c, x->addr, x->port, x->key);
	c.peer_port_name = "the agent port";
	c.timeout_ms = x->timeout_ms;
	x->status = dt_httpc_request(&c, "POST", x->path, x->body, &x->reply, &x->err);
	if (x->status != 200) {
		if (x->status >= 0)
			strbuf_addstr(&x->err, dt_httpc_reply_error(x->reply, x->status));
		json_decref(x->reply);
		x->reply = NULL;
	}
	dt_httpc_release(&c);
	return NULL;
}

void agent_calls(struct agent_call *c, size_t n)
{
	pthread_t *th = xcalloc(n ? n : 1, sizeof(*th));
	char *started = xcalloc(n ? n : 1, 1);

	for (size_t i = 0; i < n; i++)
		started[i] = !pthread_create(&th[i], NULL, call_one, &c[i]);
	for (size_t i = 0; i < n; i++) {
		if (started[i])
			pthread_join(th[i], NULL);
		else
			call_one(&c[i]);   /* no thread: in turn */
	}
	free(th);
	free(started);
}

/*
 * strvec.c - NULL-terminated vectors of owned strings.
 */
#include "strvec.h"
#include "strbuf.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

const char *empty_strvec[] = { NULL };

void strvec_init(struct strvec *sv)
{
	sv->v = empty_strvec;
	sv->nr = sv->alloc = 0;
}

static const char *push_owned(struct strvec *sv, char *s)
{
	if (sv->v == empty_strvec || sv->nr + 2 > sv->alloc) {
		size_t n = sv->alloc < 8 ? 8 : sv->alloc * 2;

		sv->v = xrealloc(sv->v == empty_strvec ? NULL : sv->v, n * sizeof(*sv->v));
		sv->alloc = n;
	}
	sv->v[sv->nr++] = s;
	sv->v[sv->nr] = NULL;
	return s;
}

const char *strvec_push(struct strvec *sv, const char *s)
{
	return push_owned(sv, xstrdup(s));
}

const char *strvec_pushf(struct strvec *sv, const char *fmt, ...)
{
	struct strbuf sb = STRBUF_INIT;
	va_list ap;

	va_start(ap, fmt);
	strbuf_vaddf(&sb, fmt, ap);
	va_end(ap);
	return push_owned(sv, strbuf_detach(&sb, NULL));
}

void strvec_pushv(struct strvec *sv, const char **items)
{
	for (; *items; items++)
		strvec_push(sv, *items);
}

void strvec_pop(struct strvec *sv)
{
	if (!sv->nr)
		return;
	free((char *)sv->v[--sv->nr]);
	sv->v[sv->nr] = NULL;
}

void strvec_clear(struct strvec *sv)
{
	if (sv->v != empty_strvec) {
		for (size_t i = 0; i < sv->nr; i++)
			free((char *)sv->v[i]);
		free(sv->v);
	}
	strvec_init(sv);
}

void strvec_split(struct strvec *sv, const char *s, const char *seps)
{
	while (*s) {
		size_t n = strcspn(s, seps);

		if (n)
			push_owned(sv, xstrndup(s, n));
		s += n;
		if (*s)
			s++;
	}
}

int strvec_find(const struct strvec *sv, const char *s)
{
	for (size_t i = 0; i < sv->nr; i++)
		if (!strcmp(sv->v[i], s))
			return (int)i;
	return -1;
}

void strvec_setenv(struct strvec *sv, const char *name, const char *value)
{
	size_t n = strlen(name);
	struct strbuf sb = STRBUF_INIT;

	strbuf_addf(&sb, "%s=%s", name, value);
	for (size_t i = 0; i < sv->nr; i++) {
		if (!strncmp(sv->v[i], name, n) && sv->v[i][n] == '=') {
			free((char *)sv->v[i]);
			sv->v[i] = strbuf_detach(&sb, NULL);
			return;
		}
	}
	push_owned(sv, strbuf_detach(&sb, NULL));
}

void strvec_unsetenv(struct strvec *sv, const char *name)
{
	size_t n = strlen(name), k = 0;

	for (size_t i = 0; i < sv->nr; i++) {
		if (!strncmp(sv->v[i], name, n) && sv->v[i][n] == '=')
			free((char *)sv->v[i]);
		else
			sv->v[k++] = sv->v[i];
	}
	sv->nr = k;
	if (sv->v)
		sv->v[sv->nr] = NULL;
}

const char *strvec_getenv(const struct strvec *sv, const char *name)
{
	size_t n = strlen(name);

	for (size_t i = 0; i < sv->nr; i++)
		if (!strncmp(sv->v[i], name, n) && sv->v[i][n] == '=')
			return sv->v[i] + n + 1;
	return NULL;
}

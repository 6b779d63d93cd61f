/*
 * strvec.h - NULL-terminated vectors of owned strings (argv, envp).
 *
 * v is never NULL: an empty strvec points at a shared { NULL }, so it can be
 * handed to execve() as is.  Every pushed string is copied and owned.
 */
#ifndef DT_STRVEC_H
#define DT_STRVEC_H

#include <stddef.h>
#include "usage.h"

struct strvec {
	const char **v;
	size_t nr;
	size_t alloc;
};

extern const char *empty_strvec[];
#define STRVEC_INIT { empty_strvec, 0, 0 }

void strvec_init(struct strvec *sv);
const char *strvec_push(struct strvec *sv, const char *s);
const char *strvec_pushf(struct strvec *sv, const char *fmt, ...) DT_PRINTF(2, 3);
void strvec_pushv(struct strvec *sv, const char **items);
void strvec_pop(struct strvec *sv);
void strvec_clear(struct strvec *sv);
/* Split `s` on any of `seps`, skipping empty fields. */
void strvec_split(struct strvec *sv, const char *s, const char *seps);
/* Return the index of `s`, or -1. */
int strvec_find(const struct strvec *sv, const char *s);
/* For env vectors: set NAME=value, replacing an existing NAME. */
void strvec_setenv(struct strvec *sv, const char *name, const char *value);
/* For env vectors: remove every NAME=... entry. */
void strvec_unsetenv(struct strvec *sv, const char *name);
/* For env vectors: the value of the first NAME=... entry (owned by sv), or NULL. */
const char *strvec_getenv(const struct strvec *sv, const char *name);

#endif

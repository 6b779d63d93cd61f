/*
 * hostrange.c - expand pdsh/Slurm host lists (see hostrange.h).
 *
 * Two passes per pattern: parse it into literal pieces and bracket groups
 * (checking every error with its column), count the product, then expand
 * with an odometer over the groups.  Nothing is appended to the caller's
 * vector until the whole spec parsed, so an error leaves it untouched.
 */
#include "hostrange.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DIGITS 9

struct range {
	long lo, hi;
	int width;            /* zero-pad to this many digits */
};

struct piece {
	char *text;           /* literal, or NULL for a bracket group */
	struct range *ranges;
	size_t nr, alloc;
	long count;           /* numbers in the group */
};

struct pattern {
	struct piece *pieces;
	size_t nr, alloc;
};

static void pattern_release(struct pattern *p)
{
	for (size_t i = 0; i < p->nr; i++) {
		free(p->pieces[i].text);
		free(p->pieces[i].ranges);
	}
	free(p->pieces);
	memset(p, 0, sizeof(*p));
}

static struct piece *add_piece(struct pattern *p)
{
	ALLOC_GROW(p->pieces, p->nr + 1, p->alloc);
	memset(&p->pieces[p->nr], 0, sizeof(p->pieces[0]));
	return &p->pieces[p->nr++];
}

/* How a character appears in messages: 'x', or byte 0x0a for the unprintable. */
static void describe_char(struct strbuf *err, unsigned char c)
{
	if (c >= 0x20 && c < 0x7f)
		strbuf_addf(err, "'%c'", c);
	else
		strbuf_addf(err, "byte 0x%02x", c);
}

/* Read a number at spec[*i]; column numbers are 1-based. */
static int read_number(const char *spec, size_t *i, long *v, int *width, struct strbuf *err)
{
	size_t start = *i, n = 0;

	while (isdigit((unsigned char)spec[*i])) {
		(*i)++;
		n++;
	}
	if (!n) {
		if (!spec[*i])
			strbuf_addf(err, "expected a number at column %zu, found the end", *i + 1);
		else {
			strbuf_addf(err, "expected a number at column %zu, found ", *i + 1);
			describe_char(err, (unsigned char)spec[*i]);
		}
		return -1;
	}
	if (n > MAX_DIGITS) {
		strbuf_addf(err, "number '%.*s' at column %zu is too long", (int)n, spec + start, start + 1);
		return -1;
	}
	*v = strtol(spec + start, NULL, 10);
	*width = (int)n;
	return 0;
}

/* Parse "[...]" starting at spec[*i] == '['. */
static int parse_group(const char *spec, size_t *i, struct piece *g, struct strbuf *err)
{
	size_t open = *i;

	(*i)++;
	if (spec[*i] == ']') {
		strbuf_addf(err, "empty brackets at column %zu", open + 1);
		return -1;
	}
	for (;;) {
		struct range r;
		size_t start = *i;
		int hw;

		if (!spec[*i]) {
			strbuf_addf(err, "unclosed '[' at column %zu", open + 1);
			return -1;
		}
		if (spec[*i] == '[') {
			strbuf_addf(err, "nested '[' at column %zu", *i + 1);
			return -1;
		}
		if (read_number(spec, i, &r.lo, &r.width, err) < 0)
			return -1;
		r.hi = r.lo;
		if (spec[*i] == '-') {
			(*i)++;
			if (read_number(spec, i, &r.hi, &hw, err) < 0)
				return -1;
			if (r.hi < r.lo) {
				strbuf_addf(err, "reversed range '%.*s' at column %zu",
					    (int)(*i - start), spec + start, start + 1);
				return -1;
			}
		}
		ALLOC_GROW(g->ranges, g->nr + 1, g->alloc);
		g->ranges[g->nr++] = r;
		g->count += r.hi - r.lo + 1;
		if (g->count > HOSTRANGE_MAX) {
			strbuf_addf(err, "host range expands to more than %d hosts", HOSTRANGE_MAX);
			return -1;
		}
		if (spec[*i] == ',') {
			(*i)++;
			continue;
		}
		if (spec[*i] == ']') {
			(*i)++;
			return 0;
		}
		if (!spec[*i]) {
			strbuf_addf(err, "unclosed '[' at column %zu", open + 1);
			return -1;
		}
		strbuf_addf(err, "expected ',', '-' or ']' at column %zu, found ", *i + 1);
		describe_char(err, (unsigned char)spec[*i]);
		return -1;
	}
}

/* Parse one pattern up to a top-level ',' or the end; *count gets its size. */
static int parse_pattern(const char *spec, size_t *i, struct pattern *p, long *count,
			 struct strbuf *err)
{
	size_t start = *i;

	*count = 1;
	while (spec[*i] && spec[*i] != ',') {
		unsigned char c = (unsigned char)spec[*i];

		if (c == '[') {
			struct piece *g = add_piece(p);

			if (parse_group(spec, i, g, err) < 0)
				return -1;
			*count *= g->count;
			if (*count > HOSTRANGE_MAX) {
				strbuf_addf(err, "host range expands to more than %d hosts", HOSTRANGE_MAX);
				return -1;
			}
		} else if (c == ']') {
			strbuf_addf(err, "unexpected ']' at column %zu", *i + 1);
			return -1;
		} else if (isspace(c) || iscntrl(c)) {
			strbuf_addf(err, "unexpected %s at column %zu",
				    c == ' ' ? "space" : c == '\t' ? "tab" : "control character", *i + 1);
			return -1;
		} else {
			size_t s = *i;
			struct piece *lit;

			while (spec[*i] && !strchr("[],", spec[*i]) &&
			       !isspace((unsigned char)spec[*i]) && !iscntrl((unsigned char)spec[*i]))
				(*i)++;
			lit = add_piece(p);
			lit->text = xstrndup(spec + s, *i - s);
		}
	}
	if (*i == start) {
		strbuf_addf(err, "empty host name at column %zu", start + 1);
		return -1;
	}
	return 0;
}

static void expand_pattern(const struct pattern *p, struct strvec *out)
{
	size_t *idx = xcalloc(p->nr + 1, sizeof(*idx));   /* odometer: range index */
	long *off = xcalloc(p->nr + 1, sizeof(*off));     /* offset inside that range */
	struct strbuf sb = STRBUF_INIT;

	for (;;) {
		size_t k;

		strbuf_reset(&sb);
		for (k = 0; k < p->nr; k++) {
			const struct piece *pc = &p->pieces[k];

			if (pc->text) {
				strbuf_addstr(&sb, pc->text);
			} else {
				const struct range *r = &pc->ranges[idx[k]];

				strbuf_addf(&sb, "%0*ld", r->width, r->lo + off[k]);
			}
		}
		strvec_push(out, sb.buf);
		/* advance the rightmost group that has room, resetting those after it */
		for (k = p->nr; k-- > 0;) {
			const struct piece *pc = &p->pieces[k];

			if (pc->text)
				continue;
			if (pc->ranges[idx[k]].lo + off[k] < pc->ranges[idx[k]].hi) {
				off[k]++;
				break;
			}
			if (idx[k] + 1 < pc->nr) {
				idx[k]++;
				off[k] = 0;
				break;
			}
			idx[k] = 0;
			off[k] = 0;
		}
		if (k == (size_t)-1)
			break;
	}
	strbuf_release(&sb);
	free(idx);
	free(off);
}

int hostrange_expand(const char *spec, struct strvec *out, struct strbuf *err)
{
	struct pattern *pats = NULL;
	size_t nr = 0, alloc = 0, i = 0;
	long total = 0;
	int ret = -1;

	if (!*spec) {
		strbuf_addstr(err, "empty host list");
		return -1;
	}
	for (;;) {
		long count;

		ALLOC_GROW(pats, nr + 1, alloc);
		memset(&pats[nr], 0, sizeof(pats[0]));
		nr++;
		if (parse_pattern(spec, &i, &pats[nr - 1], &count, err) < 0)
			goto out;
		total += count;
		if (total > HOSTRANGE_MAX) {
			strbuf_addf(err, "host range expands to more than %d hosts", HOSTRANGE_MAX);
			goto out;
		}
		if (!spec[i])
			break;
		i++;   /* the ',' */
		if (!spec[i]) {
			strbuf_addf(err, "empty host name at column %zu", i + 1);
			goto out;
		}
	}
	for (size_t k = 0; k < nr; k++)
		expand_pattern(&pats[k], out);
	ret = 0;
out:
	for (size_t k = 0; k < nr; k++)
		pattern_release(&pats[k]);
	free(pats);
	return ret;
}

int hostrange_is_range(const char *spec)
{
	return strchr(spec, '[') != NULL || strchr(spec, ',') != NULL;
}

void int_ranges_format(struct strbuf *sb, const int *sorted, size_t n)
{
	size_t i = 0;
	int first = 1;

	while (i < n) {
		int lo = sorted[i], hi = lo;

		i++;
		while (i < n && (sorted[i] == hi || (hi < __INT_MAX__ && sorted[i] == hi + 1)))
			hi = sorted[i++];
		if (!first)
			strbuf_addch(sb, ',');
		first = 0;
		if (lo == hi)
			strbuf_addf(sb, "%d", lo);
		else
			strbuf_addf(sb, "%d-%d", lo, hi);
	}
}


struct fold_item {
	const char *prefix;
	size_t plen;
	int num, width;   /* width > 0 when zero-padded */
	int used;
};

void fold_names(struct strbuf *out, const char *const *names, size_t nr)
{
	struct fold_item *it = xcalloc(nr ? nr : 1, sizeof(*it));

	for (size_t i = 0; i < nr; i++) {
		const char *s = names[i];
		size_t len = strlen(s), d = len;

		while (d > 0 && isdigit((unsigned char)s[d - 1]))
			d--;
		it[i].prefix = s;
		it[i].plen = d;
		if (d == len || len - d > 9) {
			it[i].num = -1;
			it[i].plen = len;
		} else {
			it[i].num = atoi(s + d);
			it[i].width = s[d] == '0' && len - d > 1 ? (int)(len - d) : 0;
		}
	}
	for (size_t i = 0; i < nr; i++) {
		int *nums, k = 0;

		if (it[i].used)
			continue;
		if (out->len)
			strbuf_addch(out, ',');
		if (it[i].num < 0) {
			strbuf_addstr(out, names[i]);
			it[i].used = 1;
			continue;
		}
		nums = xcalloc(nr, sizeof(*nums));
		for (size_t j = i; j < nr; j++)
			if (!it[j].used && it[j].num >= 0 && it[j].plen == it[i].plen &&
			    it[j].width == it[i].width && !strncmp(it[j].prefix, it[i].prefix, it[i].plen)) {
				nums[k++] = it[j].num;
				it[j].used = 1;
			}
		strbuf_add(out, it[i].prefix, it[i].plen);
		if (k == 1 && !it[i].width) {
			strbuf_addf(out, "%d", nums[0]);
		} else {
			/* sort, then fold consecutive runs */
			for (int a = 1; a < k; a++)
				for (int b = a; b > 0 && nums[b - 1] > nums[b]; b--) {
					int t = nums[b];

					nums[b] = nums[b - 1];
					nums[b - 1] = t;
				}
			strbuf_addch(out, '[');
			for (int a = 0; a < k;) {
				int b = a;

				while (b + 1 < k && nums[b + 1] == nums[b] + 1)
					b++;
				if (a)
					strbuf_addch(out, ',');
				strbuf_addf(out, "%0*d", it[i].width, nums[a]);
				if (b > a)
					strbuf_addf(out, "-%0*d", it[i].width, nums[b]);
				a = b + 1;
			}
			strbuf_addch(out, ']');
		}
		free(nums);
	}
	free(it);
}

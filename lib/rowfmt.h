/*
 * rowfmt.h - rows of tab-separated fields, for long lists sent whole (dtsched's
 * POST /v1/joblist {format: "rows"}, `dtctl ps`): one string instead of an
 * object per row, parsed in place by the reader with no allocation per row.
 *
 * A row is its fields separated by '\t' and ended by '\n'.  In a field a
 * backslash, tab, newline and carriage return are written "\\", "\t", "\n"
 * and "\r"; a missing field (NULL, JSON's null) is "\N".  Any other byte is
 * itself (the reader sanitises for the terminal, term.h).
 */
#ifndef DT_ROWFMT_H
#define DT_ROWFMT_H

#include "strbuf.h"

/* Append one field (NULL: missing) and its separator. */
void rowfmt_add(struct strbuf *sb, const char *field);
/* Append a number field. */
void rowfmt_add_int(struct strbuf *sb, long long v);
/* End the row begun by rowfmt_add()s: its last separator becomes '\n'. */
void rowfmt_end(struct strbuf *sb);

/*
 * The next row at *cursor (a NUL-terminated buffer the caller owns, changed
 * in place): its fields unescaped into fields[0..max-1] (NULL where missing,
 * or beyond the row's end), *cursor moved past it.  Returns the row's number
 * of fields (which may exceed max: the rest are not stored), 0 at the end of
 * the buffer.  A last row without its '\n' counts; an unknown escape "\x"
 * reads as "x".
 */
int rowfmt_next(char **cursor, char **fields, int max);

#endif

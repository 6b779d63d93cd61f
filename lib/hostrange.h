/*
 * hostrange.h - pdsh/Slurm style host lists: "gpu[01-16]", "n[1-3,7].lab",
 * "rack[1-2]-n[1-4]", "a[1-3],b5".
 *
 * A spec is a comma-separated list (commas inside brackets belong to the
 * bracket) of patterns; each pattern is literal text with bracket groups of
 * numbers and ranges.  Several groups multiply, the leftmost varying slowest
 * ("n[1-2]x[1-2]" is n1x1 n1x2 n2x1 n2x2).  A range keeps the width of its
 * lower bound, so "[01-10]" gives 01 .. 10 and "[8-10]" gives 8 9 10.
 */
#ifndef DT_HOSTRANGE_H
#define DT_HOSTRANGE_H

#include <stddef.h>
#include "strbuf.h"
#include "strvec.h"

#define HOSTRANGE_MAX 65536   /* most hosts one spec may expand to */

/*
 * Append the hosts of `spec` to `out` in order.  On error returns -1, leaves
 * `out` as it was and appends one message to `err` naming the 1-based column
 * in spec ("reversed range '3-1' at column 5").  Duplicates are kept: the
 * caller decides whether they matter.
 */
int hostrange_expand(const char *spec, struct strvec *out, struct strbuf *err);

/* 1 if spec has a bracket group or a top-level comma (names several hosts). */
int hostrange_is_range(const char *spec);

/* Append sorted integers folded into ranges: 0,1,2,3,5 -> "0-3,5".  Repeats
 * are skipped; n == 0 appends nothing. */
void int_ranges_format(struct strbuf *sb, const int *sorted, size_t n);

/* Fold names like dtnode1 dtnode2 dtnode3 dtnode7 into "dtnode[1-3,7]". */
void fold_names(struct strbuf *out, const char *const *names, size_t nr);

#endif

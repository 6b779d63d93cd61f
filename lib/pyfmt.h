/*
 * pyfmt.h - a JSON value written the way Python writes the value it loads
 * to: str() and json.dumps().
 *
 * W&B's sweep agent builds a trial's command with Python: "--%s=%s" of each
 * parameter's value (so str(): True, None, 1e-05, 0.1, {'lr': 0.001}) and
 * json.dumps() of all of them for ${args_json}.  A sweep file's values reach
 * dtsched as JSON typed the way W&B's YAML reader types them; these functions
 * give the same text the agent would, so a trial starts exactly as
 * `wandb agent` would start it.
 */
#ifndef DT_PYFMT_H
#define DT_PYFMT_H

#include <jansson.h>
#include "strbuf.h"

/* repr() of a float: the shortest digits that read back, "1.0", "1e-05", "1e+16". */
void py_float(struct strbuf *sb, double v);
/* str() of v: strings bare, containers with repr() inside ({'a': 'x', 'b': True}). */
void py_str(struct strbuf *sb, const json_t *v);
/* json.dumps(v) with its defaults: ", " and ": ", ASCII only, NaN/Infinity. */
void py_json(struct strbuf *sb, const json_t *v);

#endif

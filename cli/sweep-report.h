/*
 * sweep-report.h - one self-contained HTML page for a hyperparameter sweep.
 *
 * A pure function over the JSON of `dtctl sweep export --json` (the schema is
 * in docs/sweep-report.md): no I/O, no clock, no global state, so the same
 * export always gives byte-for-byte the same page.  The page needs no network:
 * inline <style>, inline <svg> charts, and a few lines of optional script for
 * hover highlighting (everything is readable with scripts disabled).
 *
 *	struct strbuf html = STRBUF_INIT, err = STRBUF_INIT;
 *	if (sweep_report_html(export, &html, &err) < 0)
 *		return error("%s", err.buf);
 *	write html.buf ...; strbuf_release(&html); strbuf_release(&err);
 */
#ifndef DT_SWEEP_REPORT_H
#define DT_SWEEP_REPORT_H

#include "json.h"
#include "strbuf.h"

/*
 * Append a complete HTML document for `export` to out and return 0; or return
 * -1 with one message appended to err that names the bad field
 * ("sweep export: 'trials[3].metrics' is not an array"); out may then hold a
 * partial page, which the caller discards.  The caller owns both buffers.
 */
int sweep_report_html(const json_t *export, struct strbuf *out, struct strbuf *err);
/* the page's one inline script, as it is between <script> and </script> (the
 * dashboard allows exactly it by its hash in its Content-Security-Policy) */
const char *sweep_report_script(void);

#endif

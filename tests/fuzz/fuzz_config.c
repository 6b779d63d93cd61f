/*
 * fuzz_config.c - libFuzzer target for the configuration loader.
 *
 * The first byte picks what the rest is fed to: cluster, job or sweep
 * parsing (with *_to_json on success), host range expansion, or the
 * duration and size parsers.  Besides the sanitizers, it checks the
 * loaders' contract: on error exactly one non-empty line, and a released
 * struct.  Built and run by `make fuzz` (mk/fuzz.mk).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "hostrange.h"
#include "units.h"

static void check_error(int r, const struct strbuf *err)
{
	if (r == 0 && err->len)
		abort();   /* success leaves err alone */
	if (r < 0 && (!err->len || strchr(err->buf, '\n')))
		abort();   /* exactly one line */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct strbuf err = STRBUF_INIT;
	const char *buf = (const char *)data + 1;
	size_t len;
	int r;

	if (!size)
		return 0;
	len = size - 1;
	switch (data[0] % 5) {
	case 0: {
		struct cluster_config c;

		r = cluster_config_parse(&c, buf, len, "fuzz.yaml", &err);
		check_error(r, &err);
		if (!r) {
			json_decref(cluster_config_to_json(&c));
			cluster_config_release(&c);
		} else if (c.nodes || c.path) {
			abort();
		}
		break;
	}
	case 1: {
		struct job_config j;

		r = job_config_parse(&j, buf, len, "fuzz.yaml", &err);
		check_error(r, &err);
		if (!r) {
			json_decref(job_config_to_json(&j));
			job_config_release(&j);
		}
		break;
	}
	case 2: {
		struct sweep_config s;

		r = sweep_config_parse(&s, buf, len, "fuzz.yaml", &err);
		check_error(r, &err);
		if (!r) {
			sweep_grid_size(&s);
			json_decref(sweep_config_to_json(&s));
			sweep_config_release(&s);
		}
		break;
	}
	case 3: {
		char *spec = strndup(buf, len);
		struct strvec out = STRVEC_INIT;

		r = hostrange_expand(spec, &out, &err);
		check_error(r, &err);
		if (r == 0 && (out.nr == 0 || out.nr > HOSTRANGE_MAX))
			abort();
		strvec_clear(&out);
		free(spec);
		break;
	}
	default: {
		char *s = strndup(buf, len);
		long long ms;
		unsigned long long bytes;

		if (parse_duration_ms(s, &ms) == 0) {
			struct strbuf sb = STRBUF_INIT;
			long long back;

			if (ms < 0 || ms > DURATION_MAX_MS)
				abort();
			format_duration(&sb, ms);
			if (parse_duration_ms(sb.buf, &back) || back != ms)
				abort();   /* format_duration must read back */
			strbuf_release(&sb);
		}
		parse_size_bytes(s, &bytes);
		free(s);
		break;
	}
	}
	strbuf_release(&err);
	return 0;
}

/*
 * model.c - the model table and what every model shares (layout helpers,
 * PyTorch-style default initialisation).
 */
#include "trainer/model.h"
#include "trainer/gpu.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

struct model_entry {
	const char *name;
	int (*create)(struct model *m, const struct dev *dev, struct strbuf *err);
};

static const struct model_entry models[] = {
	{ "mlp", mlp_create },
	{ "gpt", gpt_create },
};

const char *model_names(void)
{
	return "mlp, gpt";
}

int model_create(struct model *m, const struct model_spec *spec, int on_gpu, int precision,
		 struct strbuf *err)
{
	memset(m, 0, sizeof(*m));
	m->spec = *spec;
	m->on_gpu = on_gpu;
	m->precision = precision;
	m->tokens_per_row = 1;
	if (spec->input_dim <= 0 || spec->classes < 2 || spec->max_batch <= 0) {
		strbuf_addf(err, "model needs input_dim > 0, classes >= 2 and a batch (got %d, %d, %d)",
			    spec->input_dim, spec->classes, spec->max_batch);
		return -1;
	}
	for (size_t i = 0; i < ARRAY_SIZE(models); i++) {
		if (strcmp(models[i].name, spec->name))
			continue;
		if (on_gpu && !HAVE_CUDA_BUILD) {
			strbuf_addstr(err, "this dttrain was built without CUDA");
			return -1;
		}
		return models[i].create(m, on_gpu ? &dev_gpu : &dev_cpu, err);
	}
	strbuf_addf(err, "unknown model '%s' (known: %s)", spec->name, model_names());
	return -1;
}

void model_release(struct model *m)
{
	if (m->ops && m->ops->release)
		m->ops->release(m);
	m->ops = NULL;
}

/*
 * Flat layout of an MLP: for each layer l, fc<l>.weight [out, in] then
 * fc<l>.bias [out]; bucket l is exactly layer l, so backward (which runs from
 * the last layer down) hands buckets over in decreasing order.  Layer l of the
 * pipeline's sequence is fc<l> with its activation.
 */
void mlp_layout(struct model *m)
{
	const struct model_spec *s = &m->spec;
	size_t off = 0;
	int in = s->input_dim;

	m->nr_segs = 0;
	m->nr_buckets = 0;
	for (int l = 0; l <= s->nr_hidden; l++) {
		int out = l < s->nr_hidden ? s->hidden[l] : s->classes;
		struct param_seg *w = &m->segs[m->nr_segs++];
		struct param_seg *b = &m->segs[m->nr_segs++];

		snprintf(w->name, sizeof(w->name), "fc%d.weight", l);
		w->off = off;
		w->len = (size_t)out * in;
		w->decay = 1;
		w->fan_in = in;
		snprintf(b->name, sizeof(b->name), "fc%d.bias", l);
		b->off = off + w->len;
		b->len = (size_t)out;
		b->decay = 0;
		b->fan_in = in;
		m->buckets[m->nr_buckets].off = off;
		m->buckets[m->nr_buckets].len = w->len + b->len;
		m->nr_buckets++;
		m->layer_off[l] = off;
		m->act_width[l] = (size_t)in;
		off += w->len + b->len;
		in = out;
	}
	m->nr_params = off;
	m->nr_layers = s->nr_hidden + 1;
	m->layer_off[m->nr_layers] = off;
	m->act_width[m->nr_layers] = (size_t)s->classes;
}

/* U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases, as torch.nn.Linear. */
void model_init_params_default(const struct model *m, float *params, struct rng *r)
{
	for (int i = 0; i < m->nr_segs; i++) {
		const struct param_seg *s = &m->segs[i];
		float bound = 1.0f / sqrtf((float)s->fan_in);

		for (size_t j = 0; j < s->len; j++)
			params[s->off + j] = (2.0f * rng_uniform(r) - 1.0f) * bound;
	}
}

/* Training with zinc's public API alone: include/zinc.h and libzinc (docs/api.md).
 *
 *     cc train.c $(pkg-config --cflags --libs zinc) -o train
 *     ./train --model tiny --data data/demo.txt --steps 20 --device host
 *
 * One line per step, "step N/M | loss X.XXXX | lr L | T ms": with the same settings the
 * losses `zinc train` prints (it runs the same calls). The model is a preset (--model) or
 * a Hugging Face directory (--init-from); every other flag is one of zinc's config flags
 * (--config ds.json, --lr, --micro-batch, --device, ...: zinc train --help).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zinc.h>

static void usage(void)
{
	fprintf(stderr, "usage: train (--model PRESET | --init-from DIR) --data FILE [--steps N]\n"
		"             [--seq T] [zinc config flags: --lr, --micro-batch, --device, ...]\n");
}

/* --model / --init-from / --data / --steps / --seq; anything else is not ours */
static int own_flag(int n, char **a, int *i, const char **model, const char **hf,
		    const char **seq, struct zn_trainer_options *o)
{
	const char *v = *i + 1 < n ? a[*i + 1] : NULL;

	if (strcmp(a[*i], "--model") && strcmp(a[*i], "--init-from") &&
	    strcmp(a[*i], "--data") && strcmp(a[*i], "--steps") && strcmp(a[*i], "--seq"))
		return 0;
	if (!v)
		return -1;
	if (!strcmp(a[*i], "--model"))
		*model = v;
	else if (!strcmp(a[*i], "--init-from"))
		*hf = v;
	else if (!strcmp(a[*i], "--data"))
		o->data = v;
	else if (!strcmp(a[*i], "--steps"))
		o->steps = atoi(v);
	else
		*seq = v;
	*i += 1;
	return 1;
}

int main(int argc, char **argv)
{
	struct zn_trainer_options opt = { .steps = 20 }; /* zinc train's default */
	const char *model = NULL, *hf = NULL, *seq = NULL;
	char **rest = calloc((size_t)argc + 1, sizeof(*rest));
	struct zn_config cfg;
	struct zn_net *net = NULL;
	struct zn_trainer *t = NULL;
	struct zn_step_stats st;
	int n = 0, rc;

	if (!rest)
		return 1;
	/* the config as zinc train reads it: defaults, --config FILE, then config flags */
	if (zn_config_from_args(&cfg, argc - 1, argv + 1, rest, &n)) {
		usage();
		return 2;
	}
	for (int i = 0; i < n; i++) {
		int r = own_flag(n, rest, &i, &model, &hf, &seq, &opt);

		if (r <= 0) {
			fprintf(stderr, "train: %s: %s\n", rest[i], r ? "needs a value" :
				"unknown option");
			usage();
			return 2;
		}
	}
	free(rest);
	if (!model == !hf || !opt.data) {
		usage();
		return 2;
	}

	/* the model (--seq T is its length and the training length, as in zinc train), the
	 * trainer, the steps */
	const char *net_flags[] = { hf ? "--init-from" : "--model", hf ? hf : model, "--seq", seq };

	rc = zn_net_from_flags(&net, seq ? 4 : 2, net_flags);
	opt.seq = seq ? atoi(seq) : 0;
	if (!rc)
		rc = zn_trainer_create(&t, &cfg, net, &opt);
	while (!rc && (rc = zn_trainer_step(t, &st)) == 0)
		printf("step %lld/%d | loss %.4f | lr %.3g | %.1f ms\n", (long long)st.step,
		       opt.steps, st.loss, (double)st.lr, st.step_ms);
	if (rc < 0)
		fprintf(stderr, "train: %s\n", zn_last_error());
	zn_trainer_destroy(t);
	zn_net_destroy(net);
	return rc < 0 ? 1 : 0;
}

/* The loss scaler (src/sched/lossscale.c) against tests/ref/lossscale_ref.py, a float64
 * reference of DeepSpeed's DynamicLossScaler.update_scale: the arrays below are its output
 * (the scale after each update for one overflow pattern). Scales are powers of two, so the
 * comparison is exact. */
#include <criterion/criterion.h>
#include <string.h>

#include "sched/lossscale.h"
#include "zinc.h"

static const char pattern[] = "0011010000000111110000000001101011111111110000000000";

static const double window4_hyst2[] = {
	256.0, 256.0, 256.0, 128.0, 128.0, 64.0, 64.0, 64.0,
	64.0, 128.0, 128.0, 128.0, 128.0, 128.0, 64.0, 32.0,
	16.0, 8.0, 8.0, 8.0, 8.0, 16.0, 16.0, 16.0,
	16.0, 32.0, 32.0, 32.0, 16.0, 16.0, 8.0, 8.0,
	4.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0,
	1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0,
	2.0, 4.0, 4.0, 4.0,
};
static const double window4_hyst2_consecutive[] = {
	256.0, 256.0, 256.0, 128.0, 128.0, 128.0, 128.0, 128.0,
	128.0, 256.0, 256.0, 256.0, 256.0, 256.0, 128.0, 64.0,
	32.0, 16.0, 16.0, 16.0, 16.0, 32.0, 32.0, 32.0,
	32.0, 64.0, 64.0, 64.0, 32.0, 32.0, 32.0, 32.0,
	32.0, 16.0, 8.0, 4.0, 2.0, 1.0, 1.0, 1.0,
	1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0,
	2.0, 4.0, 4.0, 4.0,
};
static const double window3_hyst1_min8[] = {
	32.0, 32.0, 16.0, 8.0, 8.0, 8.0, 8.0, 8.0,
	16.0, 16.0, 16.0, 32.0, 32.0, 16.0, 8.0, 8.0,
	8.0, 8.0, 8.0, 8.0, 16.0, 16.0, 16.0, 32.0,
	32.0, 32.0, 64.0, 32.0, 16.0, 16.0, 8.0, 8.0,
	8.0, 8.0, 8.0, 8.0, 8.0, 8.0, 8.0, 8.0,
	8.0, 8.0, 8.0, 8.0, 16.0, 16.0, 16.0, 32.0,
	32.0, 32.0, 64.0, 64.0,
};
static const double window1000_hyst3[] = {
	65536.0, 65536.0, 65536.0, 65536.0, 65536.0, 32768.0, 32768.0, 32768.0,
	32768.0, 32768.0, 32768.0, 32768.0, 32768.0, 16384.0, 8192.0, 4096.0,
	2048.0, 1024.0, 1024.0, 1024.0, 1024.0, 1024.0, 1024.0, 1024.0,
	1024.0, 1024.0, 1024.0, 512.0, 256.0, 256.0, 128.0, 128.0,
	64.0, 32.0, 16.0, 8.0, 4.0, 2.0, 1.0, 1.0,
	1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0,
	1.0, 1.0, 1.0, 1.0,
};

static void run(int power, int window, int hyst, bool consecutive, float min_scale,
		const double *want, const char *name)
{
	struct zn_precision_config p = { .fp16 = true, .loss_scale = 0.0f,
					 .initial_scale_power = power, .loss_scale_window = window,
					 .hysteresis = hyst, .consecutive_hysteresis = consecutive,
					 .min_loss_scale = min_scale };
	struct zn_lossscale s;

	zn_lossscale_init(&s, &p);
	cr_assert(s.dynamic);
	cr_assert_eq(s.scale, (double)(1ull << power), "%s: initial scale %g", name, s.scale);
	for (size_t i = 0; i < strlen(pattern); i++) {
		zn_lossscale_update(&s, pattern[i] == '1');
		cr_assert_eq(s.scale, want[i], "%s: after update %zu (overflow %c) scale %g, want %g",
			     name, i, pattern[i], s.scale, want[i]);
	}
}

Test(lossscale, window4_hysteresis2)
{
	run(8, 4, 2, false, 1.0f, window4_hyst2, "window4_hyst2");
}

Test(lossscale, consecutive_hysteresis)
{
	run(8, 4, 2, true, 1.0f, window4_hyst2_consecutive, "window4_hyst2_consecutive");
}

Test(lossscale, min_scale_floor)
{
	run(5, 3, 1, false, 8.0f, window3_hyst1_min8, "window3_hyst1_min8");
}

Test(lossscale, deepspeed_defaults)
{
	run(16, 1000, 3, false, 1.0f, window1000_hyst3, "window1000_hyst3");
}

Test(lossscale, static_scale_never_changes)
{
	struct zn_precision_config p = { .fp16 = true, .loss_scale = 128.0f,
					 .initial_scale_power = 16, .loss_scale_window = 2,
					 .hysteresis = 1, .min_loss_scale = 1.0f };
	struct zn_lossscale s;

	zn_lossscale_init(&s, &p);
	cr_assert(!s.dynamic);
	for (size_t i = 0; i < strlen(pattern); i++) {
		zn_lossscale_update(&s, pattern[i] == '1');
		cr_assert_eq(s.scale, 128.0, "static scale moved to %g at update %zu", s.scale, i);
	}
}

/* DeepSpeed's learning-rate schedules: values computed independently from the formulas in
 * deepspeed/runtime/lr_schedules.py (Python, double; the config holds float, hence 1e-6 relative), and the engine's step offset. */
#include <criterion/criterion.h>
#include <math.h>

#include "sched/lr.h"

static void near(double got, double want, const char *what, int it)
{
	cr_assert(fabs(got - want) <= 1e-12 + 1e-6 * fabs(want), "%s at iteration %d: %.12g, "
		  "want %.12g", what, it, got, want);
}

static struct zn_scheduler_config sched(enum zn_lr_schedule t, bool log_warmup)
{
	return (struct zn_scheduler_config){ .type = t, .warmup_min_lr = 0.0f,
					     .warmup_max_lr = 1e-3f, .warmup_num_steps = 10,
					     .total_num_steps = 20, .warmup_log = log_warmup,
					     .warmup_min_ratio = 0.1f, .cos_min_ratio = 0.01f };
}

Test(lr, constant_without_scheduler)
{
	struct zn_scheduler_config s = sched(ZN_LR_CONSTANT, true);

	for (int k = 1; k < 30; k += 7)
		cr_assert_eq(zn_lr_for_step(&s, 3e-4f, k), 3e-4f);
}

Test(lr, warmup_log)
{
	struct zn_scheduler_config s = sched(ZN_LR_WARMUP, true);
	static const int it[] = { 0, 1, 5, 9, 10, 50 };
	static const double want[] = { 0.0, 0.0003010299956639812, 0.0007781512503836435,
				       0.001, 0.001, 0.001 };

	for (int i = 0; i < 6; i++)
		near(zn_lr_at(&s, 5e-4, it[i]), want[i], "WarmupLR", it[i]);
	cr_assert_eq(zn_lr_at(&s, 5e-4, -1), 0.0, "before the first scheduler step");
}

Test(lr, warmup_linear)
{
	struct zn_scheduler_config s = sched(ZN_LR_WARMUP, false);
	static const int it[] = { 0, 3, 9, 10 };
	static const double want[] = { 1e-4, 0.00037, 0.00091, 0.001 };

	s.warmup_min_lr = 1e-4f;
	for (int i = 0; i < 4; i++)
		near(zn_lr_at(&s, 5e-4, it[i]), want[i], "WarmupLR linear", it[i]);
}

Test(lr, warmup_decay)
{
	struct zn_scheduler_config s = sched(ZN_LR_WARMUP_DECAY, true);
	static const int it[] = { 10, 15, 20, 25 };
	static const double want[] = { 0.001, 0.0005, 0.0, 0.0 };

	for (int i = 0; i < 4; i++)
		near(zn_lr_at(&s, 5e-4, it[i]), want[i], "WarmupDecayLR",
		     it[i]);
	near(zn_lr_at(&s, 5e-4, 1), 0.0003010299956639812,
	     "WarmupDecayLR warmup", 1);
}

Test(lr, warmup_cosine)
{
	struct zn_scheduler_config s = sched(ZN_LR_WARMUP_COSINE, false);
	static const int it[] = { 0, 5, 10, 14, 19, 25 };
	static const double want[] = { 0.0002, 0.0011, 0.0019515459511322021, 0.00101, 2e-05,
				       0.0013159268244311976 };

	for (int i = 0; i < 6; i++)
		cr_assert(fabs(zn_lr_at(&s, 2e-3, it[i]) - want[i]) < 1e-9,
			  "WarmupCosineLR at %d: %.12g want %.12g", it[i],
			  zn_lr_at(&s, 2e-3, it[i]), want[i]);
}

Test(lr, first_step_uses_the_optimizer_lr)
{
	struct zn_scheduler_config s = sched(ZN_LR_WARMUP, true);

	/* DeepSpeed steps the scheduler after the optimizer: step 1 runs with optimizer.lr,
	 * step k with the schedule at iteration k - 2 */
	cr_assert_eq(zn_lr_for_step(&s, 7e-4f, 1), 7e-4f);
	cr_assert_eq(zn_lr_for_step(&s, 7e-4f, 2), (float)zn_lr_at(&s, 7e-4, 0));
	cr_assert_eq(zn_lr_for_step(&s, 7e-4f, 12), (float)zn_lr_at(&s, 7e-4, 10));
}

/* OneCycle and LRRangeTest: the lr and betas each optimizer step uses, from a Python
 * reimplementation of DeepSpeed's classes over a stub optimizer, stepped after each
 * optimizer step as DeepSpeed's engine does (values printed by that script, double). */
Test(lr, one_cycle_with_momentum_and_decay)
{
	struct zn_scheduler_config s = {
		.type = ZN_LR_ONE_CYCLE, .cycle_min_lr = 1e-4f, .cycle_max_lr = 1e-3f,
		.decay_lr_rate = 0.5f, .cycle_first_step_size = 4, .cycle_second_step_size = 6,
		.decay_step_size = 2, .cycle_momentum = true, .cycle_min_mom = 0.85f,
		.cycle_max_mom = 0.95f, .decay_mom_rate = 0.01f,
	};
	static const double lr[16] = {
		0.0001, 0.000325, 0.00055, 0.000775, 0.001, 0.00085, 0.0007, 0.00055, 0.0004,
		0.00025, 0.0001, 8e-05, 6.666666666666667e-05, 5.714285714285715e-05, 5e-05,
		4.4444444444444447e-05,
	};
	static const double b1[16] = {
		0.85, 0.925, 0.9, 0.875, 0.85, 0.8666666666666667, 0.8833333333333333, 0.9,
		0.9166666666666666, 0.9333333333333332, 0.95, 0.95475, 0.9595, 0.96425, 0.969,
		0.97375,
	};

	for (int k = 1; k <= 16; k++) {
		float g1, g2;

		near(zn_lr_for_step(&s, 5e-4f, k), lr[k - 1], "OneCycle lr", k);
		zn_betas_for_step(&s, 0.9f, 0.999f, k, &g1, &g2);
		near(g1, b1[k - 1], "OneCycle beta1", k);
		cr_assert_eq(g2, 0.99f, "OneCycle's beta2 is 0.99 while it cycles momentum");
	}
}

Test(lr, one_cycle_without_momentum)
{
	struct zn_scheduler_config s = {
		.type = ZN_LR_ONE_CYCLE, .cycle_min_lr = 1e-4f, .cycle_max_lr = 1e-3f,
		.cycle_first_step_size = 3, .cycle_momentum = false,
	};
	static const double lr[9] = { 0.0001, 0.0004, 0.0007, 0.001, 0.0007, 0.0004, 0.0001,
				      0.0001, 0.0001 };

	for (int k = 1; k <= 9; k++) {
		float g1, g2;

		near(zn_lr_for_step(&s, 5e-4f, k), lr[k - 1], "OneCycle lr", k);
		zn_betas_for_step(&s, 0.9f, 0.999f, k, &g1, &g2);
		cr_assert(g1 == 0.9f && g2 == 0.999f, "betas stay the optimizer's");
	}
}

Test(lr, range_test)
{
	struct zn_scheduler_config s = {
		.type = ZN_LR_RANGE_TEST, .lr_range_test_min_lr = 2e-4f,
		.lr_range_test_step_size = 5, .lr_range_test_step_rate = 0.5f,
	};

	for (int k = 1; k <= 12; k++) {
		s.lr_range_test_staircase = false;
		near(zn_lr_for_step(&s, 5e-4f, k), 0.0002 + 0.00002 * (k - 1), "LRRangeTest", k);
		s.lr_range_test_staircase = true;
		near(zn_lr_for_step(&s, 5e-4f, k), k <= 5 ? 0.0002 : k <= 10 ? 0.0003 : 0.0004,
		     "LRRangeTest staircase", k);
	}
}

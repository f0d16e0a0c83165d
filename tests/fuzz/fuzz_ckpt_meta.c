/* Fuzz target: a checkpoint's metadata, zinc-checkpoint.txt (zn_ckpt_meta_parse,
 * src/sched/ckpt_meta_read.c). An input that does not end with a "crc32=" line gets one
 * with its bytes' CRC-32 appended, so mutations reach the field checks behind the CRC;
 * one that does is read as it is. An accepted metadata must hold every field in the range
 * resume relies on (skipped <= step < 2^31, data_step >= step, world x micro batch a
 * multiple of world, a positive fp16 loss scale, ...), unique keys that zn_ckpt_meta_get
 * finds, and rank file sizes that zn_ckpt_rank_file_bytes computes without overflow. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "sched/ckpt_impl.h"
#include "fuzz.h"

static bool ends_with_crc_line(const uint8_t *data, size_t n)
{
	size_t i;

	if (n < 2 || data[n - 1] != '\n')
		return false;
	for (i = n - 1; i > 0 && data[i - 1] != '\n'; i--)
		;
	return n - i >= 6 && !memcmp(data + i, "crc32=", 6);
}

static void check_counts(const struct zn_ckpt_meta *m)
{
	const struct zn_ckpt_info *in = &m->info;

	ZN_FUZZ_CHECK(in->step >= 0 && in->step <= INT32_MAX);
	ZN_FUZZ_CHECK(m->skipped >= 0 && m->skipped <= in->step);
	ZN_FUZZ_CHECK(in->data_step >= in->step);
	ZN_FUZZ_CHECK(in->world >= 1 && in->world <= 1 << 20);
	ZN_FUZZ_CHECK(in->global_micro >= 1 && in->global_micro % in->world == 0);
	ZN_FUZZ_CHECK(in->seq >= 1 && in->stage >= 0 && in->stage <= 3 && m->layers >= 1);
	ZN_FUZZ_CHECK(in->dtype == ZN_DTYPE_F32 || in->dtype == ZN_DTYPE_BF16 ||
		      in->dtype == ZN_DTYPE_F16);
	ZN_FUZZ_CHECK(isfinite(m->ls.scale) && m->ls.scale >= 0);
	ZN_FUZZ_CHECK(in->dtype != ZN_DTYPE_F16 || (m->ls.scale > 0 && m->ls.cur_hysteresis >= 1));
	ZN_FUZZ_CHECK(m->ls.cur_hysteresis >= 0);
	ZN_FUZZ_CHECK(m->ls.iter >= 0 && m->ls.iter <= in->step);
	ZN_FUZZ_CHECK(m->ls.last_overflow_iter >= -1 &&
		      (m->ls.last_overflow_iter < m->ls.iter || m->ls.last_overflow_iter <= 0));
	ZN_FUZZ_CHECK(!in->has_data || (in->data_path && in->data_path[0]));
	ZN_FUZZ_CHECK(m->config_size <= ZN_CKPT_CONFIG_MAX_BYTES);
	ZN_FUZZ_CHECK(m->states >= ZN_STATES_FP32 && m->states <= ZN_STATES_INT8);
}

static void check_layers(const struct zn_ckpt_meta *m)
{
	uint64_t total = 0, fixed = ZN_CKPT_HEADER_BYTES + ZN_CKPT_TRAILER_BYTES +
				    (uint64_t)m->layers * ZN_CKPT_TABLE_BYTES, most;

	for (int l = 0; l < m->layers; l++) {
		/* 0: a LoRA model's layer without adapters, which then lists no tensor */
		ZN_FUZZ_CHECK(m->tensors[l] >= 0 && (uint64_t)m->tensors[l] <= m->numel[l]);
		ZN_FUZZ_CHECK(m->numel[l] >= 1 || m->tensors[l] == 0);
		total += m->numel[l];
		ZN_FUZZ_CHECK(total <= UINT64_MAX / 24);
	}
	/* a few ranks' expected sizes: the sum of their shares, within ckpt_meta_read.c's
	 * bounds */
	most = fixed + total * 12 + (uint64_t)m->layers * 8;
	for (int r = 0; r < m->info.world && r < 64; r++) {
		uint64_t want = zn_ckpt_rank_file_bytes(m->numel, m->layers, r, m->info.world,
							 m->states);

		ZN_FUZZ_CHECK(want >= fixed && want <= most);
		ZN_FUZZ_CHECK(m->file_size[r] >= fixed && m->file_size[r] <= most);
	}
}

int zn_fuzz_one(const uint8_t *data, size_t n)
{
	bool has_crc = ends_with_crc_line(data, n);
	char *text = malloc(n + 17);
	struct zn_ckpt_meta m;
	size_t len = n;

	ZN_FUZZ_CHECK(text != NULL);
	memcpy(text, data, n);
	if (!has_crc)
		len += (size_t)snprintf(text + n, 17, "crc32=%08x\n",
					(unsigned)zn_ckpt_crc(zn_ckpt_crc(0, NULL, 0), data, n));
	text[len] = 0;
	if (zn_ckpt_meta_parse(&m, text, len, "fuzz/zinc-checkpoint.txt")) {
		zn_ckpt_meta_free(&m);
		return 0;
	}
	check_counts(&m);
	check_layers(&m);
	for (int i = 0; i < m.kv_count; i++)
		ZN_FUZZ_CHECK(zn_ckpt_meta_get(&m, m.key[i]) == m.val[i]);
	zn_ckpt_meta_free(&m);
	return 1;
}

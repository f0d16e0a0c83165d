/* Fuzz target: a training data file, llm.c token file (GPT-2 or Llama 3) or UTF-8 text
 * (zn_data_open, src/model/data.c), opened for B 2, T 3, shuffled, its tokens limited to
 * an int vocabulary as zinc train does. An accepted file's batches must hold only tokens
 * up to zn_data_max_token, below zn_data_vocab. */
#include <stdint.h>
#include <string.h>

#include "model/data.h"
#include "fuzz.h"

#define B 2
#define T 3

int zn_fuzz_one(const uint8_t *data, size_t n)
{
	const char *path = zn_fuzz_file(data, n);
	int tokens[B * T], targets[B * T];
	int32_t magic = 0;
	struct zn_data *d;
	uint64_t pos = 0;
	int64_t max, tok = 0;

	if (zn_data_open(&d, path, B, T, 0, 1, 7, true))
		return 0;
	/* as zinc train: every token must fit an int vocabulary, else refused with its place */
	if (zn_data_limit_vocab(d, INT32_MAX, &pos, &tok)) {
		ZN_FUZZ_CHECK(tok >= INT32_MAX && pos < zn_data_token_count(d));
		zn_data_close(d);
		return 0;
	}
	if (n >= 4)
		memcpy(&magic, data, 4);
	if (magic == ZN_DATA_MAGIC || magic == ZN_DATA_MAGIC_LLAMA3) {
		ZN_FUZZ_CHECK(zn_data_kind_of(d) == ZN_DATA_TOKENS);
		ZN_FUZZ_CHECK(n >= ZN_DATA_HEADER_INTS * 4);
		ZN_FUZZ_CHECK(n - ZN_DATA_HEADER_INTS * 4 == zn_data_token_count(d) * 2 ||
			      n - ZN_DATA_HEADER_INTS * 4 == zn_data_token_count(d) * 4);
	} else {
		/* auto: text only when UTF-8 without NUL, so never above 0xf4 */
		ZN_FUZZ_CHECK(zn_data_kind_of(d) == ZN_DATA_TEXT && zn_data_token_count(d) == n);
		ZN_FUZZ_CHECK(zn_data_max_token(d) <= 0xf4);
	}
	max = zn_data_max_token(d);
	ZN_FUZZ_CHECK(max >= 0 && zn_data_vocab(d) > max);
	ZN_FUZZ_CHECK(zn_data_steps_per_epoch(d) >= 1 &&
		      zn_data_steps_per_epoch(d) * B * T < zn_data_token_count(d));
	for (int s = 0; s < 3; s++) {
		if (s == 2)
			zn_data_seek(d, 2 * zn_data_steps_per_epoch(d) - 1);
		ZN_FUZZ_CHECK(zn_data_next(d, tokens, targets) == 0);
		for (int i = 0; i < B * T; i++)
			ZN_FUZZ_CHECK(tokens[i] >= 0 && tokens[i] <= max && targets[i] >= 0 &&
				      targets[i] <= max);
	}
	ZN_FUZZ_CHECK(zn_data_step(d) == 2 * zn_data_steps_per_epoch(d));
	zn_data_close(d);
	return 1;
}

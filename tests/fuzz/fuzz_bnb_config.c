/* Fuzz target: config.json's quantization_config as --init-from reads a bitsandbytes 4-bit
 * checkpoint's (zn_bnb_config_parse, src/model/quant/bnb_read.c). An accepted config either
 * has no quantization_config or names a 4-bit type zinc implements (nf4 or fp4) and a
 * compute dtype zinc computes in. */
#include <stdlib.h>
#include <string.h>

#include "model/quant/bnb.h"
#include "fuzz.h"

int zn_fuzz_one(const uint8_t *data, size_t n)
{
	char *text = malloc(n + 1);
	struct zn_bnb_config c;
	int rc;

	ZN_FUZZ_CHECK(text != NULL);
	memcpy(text, data, n);
	text[n] = 0;
	rc = zn_bnb_config_parse(text, "config.json", &c);
	free(text);
	if (rc)
		return 0;
	if (c.present) {
		ZN_FUZZ_CHECK(c.type == ZN_Q4_NF4 || c.type == ZN_Q4_FP4);
		ZN_FUZZ_CHECK(c.compute_dtype == ZN_DTYPE_F32 || c.compute_dtype == ZN_DTYPE_BF16 ||
			      c.compute_dtype == ZN_DTYPE_F16);
	}
	return 1;
}

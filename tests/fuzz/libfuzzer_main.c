/* libFuzzer glue (ZINC_FUZZ=ON): errors only in the log, every input to zn_fuzz_one. */
#include "core/log.h"
#include "fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	zn_log_set_level(ZN_LOG_ERROR);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
	zn_fuzz_one(data, n);
	return 0;
}

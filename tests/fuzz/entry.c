/* tests/fuzz/entry.c: the libFuzzer entry point of one target, chosen at
 * build time (-DRCP_FUZZ_TARGET=rcp_fuzz_NAME). */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return RCP_FUZZ_TARGET(data, size);
}

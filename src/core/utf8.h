/* Is a byte stream UTF-8 text? Used to tell text from binary files (src/model/data.c).
 * Validated in pieces, so a file can be checked chunk by chunk:
 *
 *     size_t ok = zn_utf8_prefix(buf, n, &bad);
 *     if (bad) ... buf[ok] starts an invalid sequence
 *     else ... buf[ok..n) is an incomplete character: prepend it to the next chunk
 *              (at the end of the data, it is invalid)
 */
#ifndef ZN_CORE_UTF8_H
#define ZN_CORE_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* The length of p[0..n) made of whole valid UTF-8 characters (no NUL byte, no overlong
 * form, no surrogate, nothing above U+10FFFF). *bad is set when p[ret] starts an invalid
 * sequence; otherwise p[ret..n) is an incomplete character that may continue. */
size_t zn_utf8_prefix(const unsigned char *p, size_t n, bool *bad);

#endif

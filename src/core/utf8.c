/* Strict UTF-8 validation (RFC 3629 ranges), chunk by chunk. */
#include "core/utf8.h"

/* The length of p[0..n) made of whole valid UTF-8 characters (no NUL, no overlong form,
 * no surrogate, nothing above U+10FFFF). *bad is set when p[ret] starts an invalid
 * sequence; otherwise p[ret..n) is an incomplete character that may continue. */
size_t zn_utf8_prefix(const unsigned char *p, size_t n, bool *bad)
{
	size_t i = 0;

	*bad = false;
	while (i < n) {
		unsigned c = p[i], lo = 0x80, hi = 0xbf;
		size_t len;

		if (c >= 0x01 && c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf)
			len = 2;
		else if (c >= 0xe0 && c <= 0xef)
			len = 3;
		else if (c >= 0xf0 && c <= 0xf4)
			len = 4;
		else
			goto invalid;
		if (c == 0xe0)
			lo = 0xa0;
		else if (c == 0xed)
			hi = 0x9f;
		else if (c == 0xf0)
			lo = 0x90;
		else if (c == 0xf4)
			hi = 0x8f;
		for (size_t k = 1; k < len; k++) {
			unsigned b;

			if (i + k >= n)
				return i;
			b = p[i + k];
			if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xbf))
				goto invalid;
		}
		i += len;
	}
	return i;
invalid:
	*bad = true;
	return i;
}

/* Levenshtein distance between two strings, for "did you mean" (config keys and flags,
 * command-line options). Defined in config.c; b is at most 127 bytes (longer: 1000). */
#ifndef ZN_CORE_EDIT_H
#define ZN_CORE_EDIT_H

int zn_edit_distance(const char *a, const char *b);

#endif

/* The model-family registry (model/family.h): the one list of families, and the look-ups
 * the rest of zinc makes instead of naming one. Adding a family adds its entry here. */
#include <stdio.h>
#include <string.h>

#include "model/family.h"

extern const struct zn_family zn_gpt2_family;
extern const struct zn_family zn_llama_family;

/* the first is the default model (no --model, no config) */
static const struct zn_family *const families[] = {
	&zn_gpt2_family,
	&zn_llama_family,
};

#define FAMILY_COUNT ((int)(sizeof(families) / sizeof(families[0])))

int zn_family_count(void)
{
	return FAMILY_COUNT;
}

const struct zn_family *zn_family_at(int i)
{
	return i >= 0 && i < FAMILY_COUNT ? families[i] : NULL;
}

const struct zn_family *zn_family_by_name(const char *name)
{
	for (int i = 0; name && i < FAMILY_COUNT; i++)
		if (!strcmp(families[i]->name, name))
			return families[i];
	return NULL;
}

const struct zn_family *zn_family_of_model_type(const char *model_type, int *type)
{
	for (int i = 0; model_type && i < FAMILY_COUNT; i++)
		for (int t = 0; t < families[i]->type_count; t++)
			if (!strcmp(families[i]->types[t].model_type, model_type)) {
				*type = t;
				return families[i];
			}
	return NULL;
}

static bool listed(const char *const *list, const char *name)
{
	for (int i = 0; list && list[i]; i++)
		if (!strcmp(list[i], name))
			return true;
	return false;
}

const struct zn_family *zn_family_of_preset(const char *name)
{
	for (int i = 0; name && i < FAMILY_COUNT; i++)
		if (listed(families[i]->presets(), name))
			return families[i];
	return NULL;
}

bool zn_family_lora_target_known(const char *name)
{
	for (int i = 0; i < FAMILY_COUNT; i++)
		if (listed(families[i]->lora_targets, name))
			return true;
	return false;
}

/* appends s at *at within size, as far as it fits */
static void put(char *buf, size_t size, size_t *at, const char *s)
{
	int n = snprintf(buf + *at, size - *at, "%s", s);

	if (n > 0)
		*at += (size_t)n < size - *at ? (size_t)n : size - *at - 1;
}

void zn_family_model_types(char *buf, size_t size)
{
	int total = 0, k = 0;
	size_t at = 0;

	buf[0] = 0;
	for (int i = 0; i < FAMILY_COUNT; i++)
		total += families[i]->type_count;
	for (int i = 0; i < FAMILY_COUNT; i++)
		for (int t = 0; t < families[i]->type_count; t++, k++) {
			put(buf, size, &at, k == 0 ? "" : k == total - 1 ? " and " : ", ");
			put(buf, size, &at, families[i]->types[t].model_type);
		}
}

void zn_family_preset_list(char *buf, size_t size)
{
	size_t at = 0;

	buf[0] = 0;
	for (int i = 0; i < FAMILY_COUNT; i++) {
		const char *const *p = families[i]->presets();

		put(buf, size, &at, i ? "; " : "");
		put(buf, size, &at, families[i]->name);
		put(buf, size, &at, ": ");
		for (int k = 0; p[k]; k++) {
			put(buf, size, &at, k ? ", " : "");
			put(buf, size, &at, p[k]);
		}
	}
}

/* core/fault.h and core/env.h: every test hook and user setting has one distinct ZINC_
 * name, a value is read as set (empty is unset), and no file in src/ reads a ZINC_
 * variable behind their back. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/fault.h"

static void names_are_distinct(const char *const *names, int n)
{
	for (int i = 0; i < n; i++) {
		cr_assert(!strncmp(names[i], "ZINC_", 5), "#%d: %s", i, names[i]);
		for (int j = 0; j < i; j++)
			cr_assert_str_neq(names[i], names[j], "#%d and #%d", i, j);
	}
}

Test(fault, every_hook_and_setting_has_its_own_name)
{
	const char *names[ZN_FAULT_COUNT + ZN_ENV_COUNT];

	for (int f = 0; f < ZN_FAULT_COUNT; f++)
		names[f] = zn_fault_name((enum zn_fault)f);
	for (int e = 0; e < ZN_ENV_COUNT; e++)
		names[ZN_FAULT_COUNT + e] = zn_env_name((enum zn_env)e);
	names_are_distinct(names, ZN_FAULT_COUNT + ZN_ENV_COUNT);
	cr_assert_str_eq(zn_fault_name(ZN_FAULT_ARENA_ALLOC), "ZINC_ARENA_FAIL_ALLOC");
	cr_assert_str_eq(zn_fault_name(ZN_FAULT_OVERFLOW), "ZINC_TEST_OVERFLOW");
	cr_assert_str_eq(zn_env_name(ZN_ENV_LOG), "ZINC_LOG");
	cr_assert(!strncmp(zn_fault_name(ZN_FAULT_COUNT), "ZINC_(", 6));
}

/* the suite is built with the hooks (CMake refuses to build it without them) */
Test(fault, hooks_read_as_set_and_empty_is_unset)
{
	cr_assert(zn_fault_hooks_built());
	for (int f = 0; f < ZN_FAULT_COUNT; f++) {
		const char *name = zn_fault_name((enum zn_fault)f);

		unsetenv(name);
		cr_assert_null(zn_fault_value((enum zn_fault)f), "%s", name);
		setenv(name, "", 1);
		cr_assert_null(zn_fault_value((enum zn_fault)f), "%s empty", name);
		setenv(name, "7@1", 1);
		cr_assert_str_eq(zn_fault_value((enum zn_fault)f), "7@1", "%s", name);
		unsetenv(name);
	}
	cr_assert_null(zn_fault_value(ZN_FAULT_COUNT));
}

Test(fault, settings_read_as_set_and_empty_is_unset)
{
	for (int e = 0; e < ZN_ENV_COUNT; e++) {
		const char *name = zn_env_name((enum zn_env)e);

		unsetenv(name);
		cr_assert_null(zn_env_value((enum zn_env)e), "%s", name);
		setenv(name, "", 1);
		cr_assert_null(zn_env_value((enum zn_env)e), "%s empty", name);
		setenv(name, "pool", 1);
		cr_assert_str_eq(zn_env_value((enum zn_env)e), "pool", "%s", name);
		unsetenv(name);
	}
}

/* The project's rule, checked where the suite runs: only core/fault.c and core/env.c read
 * ZINC_ variables (through their tables), so no file calls getenv("ZINC_...") itself. */
Test(fault, no_source_file_reads_a_zinc_variable_itself)
{
	char cmd[1024], line[512], found[4096] = "";
	FILE *p;

	snprintf(cmd, sizeof(cmd), "cd '%s' && grep -rIl 'getenv(\"ZINC_' src", ZN_TEST_SRC_DIR);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	while (fgets(line, sizeof(line), p))
		strncat(found, line, sizeof(found) - strlen(found) - 1);
	pclose(p);
	cr_assert_str_empty(found, "read ZINC_ variables through core/fault.h (test hooks) or "
			    "core/env.h (user settings):\n%s", found);
}

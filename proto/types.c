#include <errno.h>
#include <string.h>

#include "cleanup.h"
#include "types.h"

static const char *const isolation_names[_MSB_ISOLATION_MAX] = {
	[MSB_ISOLATION_NONE] = "none",
	[MSB_ISOLATION_RUNTIME] = "runtime",
	[MSB_ISOLATION_OS_PROCESS] = "os_process",
	[MSB_ISOLATION_CONTAINER] = "container",
	[MSB_ISOLATION_HARDENED_CONTAINER] = "hardened_container",
	[MSB_ISOLATION_MICROVM] = "microvm",
	[MSB_ISOLATION_VM] = "vm",
};

static const char *const capability_names[_MSB_CAP_MAX] = {
	[MSB_CAP_EXEC] = "exec",
	[MSB_CAP_RUN_CODE] = "run_code",
	[MSB_CAP_HOST_TOOLS] = "host_tools",
	[MSB_CAP_FILES_IN] = "files_in",
	[MSB_CAP_FILES_OUT] = "files_out",
	[MSB_CAP_FILES_LIST] = "files_list",
	[MSB_CAP_FILES_DELETE] = "files_delete",
	[MSB_CAP_SNAPSHOT] = "snapshot",
	[MSB_CAP_ATTACHED_IDENTITY] = "attached_identity",
	[MSB_CAP_RECLAIM] = "reclaim",
	[MSB_CAP_EGRESS_METHODS] = "egress_methods",
};

static const char *const egress_names[_MSB_EGRESS_MAX] = {
	[MSB_EGRESS_UNRESTRICTED] = "unrestricted",
	[MSB_EGRESS_ALLOWLIST] = "allowlist",
	[MSB_EGRESS_CLOSED] = "closed",
};

static const char *const scope_names[_MSB_SCOPE_MAX] = {
	[MSB_SCOPE_CONVERSATION] = "conversation",
	[MSB_SCOPE_CALL] = "call",
};

static const char *const os_family_names[_MSB_OS_MAX] = {
	[MSB_OS_POSIX] = "posix",
	[MSB_OS_WINDOWS] = "windows",
};

static const char *lookup(const char *const *names, int max, int v)
{
	return v >= 0 && v < max ? names[v] : NULL;
}

static int rlookup(const char *const *names, int max, const char *s)
{
	if (s)
		for (int i = 0; i < max; i++)
			if (names[i] && strcmp(names[i], s) == 0)
				return i;
	return -EINVAL;
}

static json_t *set_encode(const char *const *names, int max, uint32_t mask)
{
	json_t *a = json_array();

	for (int i = 0; i < max && i < 32; i++)
		if (mask & (UINT32_C(1) << i))
			json_array_append_new(a, json_string(names[i]));
	return a;
}

#define ENUM_STRINGS(name, table, max)                                    \
	const char *msb_##name##_to_string(enum msb_##name v)             \
	{                                                                 \
		return lookup(table, max, (int)v);                        \
	}                                                                 \
	int msb_##name##_from_string(const char *s)                       \
	{                                                                 \
		return rlookup(table, max, s);                            \
	}                                                                 \
	json_t *msb_##name##_set_encode(uint32_t mask)                    \
	{                                                                 \
		return set_encode(table, max, mask);                      \
	}

ENUM_STRINGS(isolation, isolation_names, _MSB_ISOLATION_MAX)
ENUM_STRINGS(egress, egress_names, _MSB_EGRESS_MAX)
ENUM_STRINGS(scope, scope_names, _MSB_SCOPE_MAX)
ENUM_STRINGS(os_family, os_family_names, _MSB_OS_MAX)
ENUM_STRINGS(capability, capability_names, _MSB_CAP_MAX)

json_t *msb_transfer_limits_encode(const struct msb_transfer_limits *l)
{
	return json_pack("{s:I, s:I, s:I}",
			 "max_bytes_per_file", (json_int_t)l->max_bytes_per_file,
			 "max_total_bytes", (json_int_t)l->max_total_bytes,
			 "max_files", (json_int_t)l->max_files);
}

static int get_u64(const json_t *j, const char *key, uint64_t *ret)
{
	json_t *v = json_object_get(j, key);

	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -EINVAL;
	*ret = (uint64_t)json_integer_value(v);
	return 0;
}

int msb_transfer_limits_decode(const json_t *j, struct msb_transfer_limits *ret,
			       const char **reterr_field)
{
	static const char *const fields[] = { "max_bytes_per_file", "max_total_bytes",
					      "max_files" };
	struct msb_transfer_limits l;
	uint64_t *slots[] = { &l.max_bytes_per_file, &l.max_total_bytes, &l.max_files };
	const char *key;
	json_t *v;

	if (!json_is_object(j)) {
		*reterr_field = "";
		return -EINVAL;
	}
	json_object_foreach((json_t *)j, key, v) {
		if (rlookup(fields, ELEMENTSOF(fields), key) < 0) {
			*reterr_field = key;
			return -EINVAL;
		}
	}
	for (size_t i = 0; i < ELEMENTSOF(fields); i++)
		if (get_u64(j, fields[i], slots[i]) < 0) {
			*reterr_field = fields[i];
			return -EINVAL;
		}
	*ret = l;
	return 0;
}

bool msb_transfer_limits_within(const struct msb_transfer_limits *a,
				const struct msb_transfer_limits *b)
{
	return a->max_bytes_per_file <= b->max_bytes_per_file &&
	       a->max_total_bytes <= b->max_total_bytes && a->max_files <= b->max_files;
}

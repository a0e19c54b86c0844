#include <stddef.h>
#include <strings.h>

#include "backend.h"
#include "domain.h"
#include "egress.h"
#include "engine.h"
#include "types.h"

uint32_t backend_capabilities(const struct domain *d)
{
	return MSB_BIT(MSB_CAP_EXEC) | MSB_BIT(MSB_CAP_HOST_TOOLS) | MSB_BIT(MSB_CAP_FILES_IN) |
	       MSB_BIT(MSB_CAP_FILES_OUT) | MSB_BIT(MSB_CAP_FILES_DELETE) | MSB_BIT(MSB_CAP_RECLAIM) |
	       (d && d->plane_local ? MSB_BIT(MSB_CAP_FILES_LIST) : 0);
}

uint32_t backend_egress_modes(const struct domain *d)
{
	return MSB_BIT(MSB_EGRESS_CLOSED) | (egress_ready(d->egress) ? MSB_BIT(MSB_EGRESS_ALLOWLIST) : 0);
}

uint32_t backend_scopes(void)
{
	return MSB_BIT(MSB_SCOPE_CONVERSATION) | MSB_BIT(MSB_SCOPE_CALL);
}

uint32_t backend_os_families(const struct domain *d)
{
	const struct engine_info *info = d->engine ? engine_get_info(d->engine) : NULL;

	return info && info->os && strcasecmp(info->os, "linux") == 0 ? MSB_BIT(MSB_OS_POSIX) : 0;
}

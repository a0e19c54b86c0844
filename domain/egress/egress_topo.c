/* egress_topo.c — struct egress_info (egress_topo.h). */
#include <stdio.h>

#include "egress_topo.h"
#include "subnet.h"

json_t *egress_info_json(const struct egress_info *info)
{
	char url[96];

	snprintf(url, sizeof(url), "http://%s:%d", info->proxy_address, EGRESS_PROXY_PORT);
	return json_pack("{s:s, s:s, s:s, s:s}", "network", info->network, "proxy", info->proxy,
			 "proxy_address", info->proxy_address, "proxy_url", url);
}

void egress_info_fill(struct egress_info *info, const char *workload, const char *proxy_address,
		      const struct subnet_block *b)
{
	info->network_new = false;
	snprintf(info->network, sizeof(info->network), "%s%s", workload, EGRESS_NET_SUFFIX);
	snprintf(info->proxy, sizeof(info->proxy), "%s%s", workload, EGRESS_PROXY_SUFFIX);
	snprintf(info->proxy_address, sizeof(info->proxy_address), "%s", proxy_address);
	snprintf(info->dns, sizeof(info->dns), "%s", b ? b->gateway : "");
	snprintf(info->subnet, sizeof(info->subnet), "%s", b ? b->subnet : "");
}

const char *egress_proxy_address_of(const json_t *obj, const char *net)
{
	const json_t *nets = json_object_get(json_object_get(obj, "NetworkSettings"), "Networks");

	return json_string_value(json_object_get(json_object_get(nets, net), "IPAddress"));
}

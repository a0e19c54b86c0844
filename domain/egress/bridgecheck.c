/* bridgecheck.c — the host-side check that an egress bridge is unaddressed. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "bridgecheck.h"
#include "cleanup.h"
#include "names.h"
#include "sha256.h"
#include "xmalloc.h"

_Static_assert(BRIDGECHECK_NAME_LEN == sizeof(BRIDGECHECK_PREFIX) - 1 + NAMES_HASH_CHARS,
	       "the bridge name carries the container name's hash");

/* fe80::/10: the first byte 0xfe, the top two bits of the second 10. */
static bool is_link_local6(const struct in6_addr *a)
{
	return a->s6_addr[0] == 0xfe && (a->s6_addr[1] & 0xc0) == 0x80;
}

/* The address of one entry as text when it counts as a host address, else
 * false (no address, link-local IPv6, AF_PACKET and other families). */
static bool entry_address(const struct ifaddrs *ifa, char *out, size_t size)
{
	const struct sockaddr *sa = ifa->ifa_addr;

	if (!sa)
		return false;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;

		return inet_ntop(AF_INET, &in->sin_addr, out, (socklen_t)size) != NULL;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;

		if (is_link_local6(&in6->sin6_addr))
			return false;
		return inet_ntop(AF_INET6, &in6->sin6_addr, out, (socklen_t)size) != NULL;
	}
	return false;
}

int bridgecheck_verdict(const struct ifaddrs *list, const char *ifname, char **retreason)
{
	_cleanup_free_ char *held = NULL;
	bool found = false;

	for (const struct ifaddrs *ifa = list; ifa; ifa = ifa->ifa_next) {
		char addr[INET6_ADDRSTRLEN];
		char *joined;

		if (!ifa->ifa_name || strcmp(ifa->ifa_name, ifname) != 0)
			continue;
		found = true;
		if (!entry_address(ifa, addr, sizeof(addr)))
			continue;
		joined = held ? xasprintf("%s, %s", held, addr) : xstrdup(addr);
		free(held);
		held = joined;
	}
	if (!found)
		return -ENODEV;
	if (!held)
		return 0;
	*retreason = xasprintf("bridge %s holds %s", ifname, held);
	return -EADDRINUSE;
}

int bridgecheck_unaddressed(const char *ifname, char **retreason)
{
	struct ifaddrs *list;
	int r;

	if (getifaddrs(&list) < 0)
		return -errno;
	r = bridgecheck_verdict(list, ifname, retreason);
	freeifaddrs(list);
	return r;
}

/* The 12 hex of a name of ours, with or without a known suffix, or NULL. */
static const char *our_hash(const char *name)
{
	static const char *const suffixes[] = { NULL, "-net", "-proxy" };

	for (size_t i = 0; i < ELEMENTSOF(suffixes); i++)
		if (names_is_ours(name, suffixes[i]))
			return name + strlen(NAMES_PREFIX);
	return NULL;
}

void bridgecheck_name(const char *container_name, char out[IFNAMSIZ])
{
	const char *hash = our_hash(container_name);
	char hex[SHA256_HEX_BYTES];

	if (!hash) {
		sha256_hex(container_name, strlen(container_name), hex);
		hash = hex;
	}
	snprintf(out, IFNAMSIZ, "%s%.*s", BRIDGECHECK_PREFIX, NAMES_HASH_CHARS, hash);
}

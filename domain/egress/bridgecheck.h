/* bridgecheck.h — is an egress network's bridge really unaddressed
 * (behaviour-docker §2.9 step 1, §4.4)? With gateway_mode_ipv4/ipv6=isolated
 * the engine gives the bridge no host address, so nothing on NAME-net can
 * reach the host. An engine that stores the option and ignores it (≤ 26.x)
 * builds an addressed bridge; this is the check that catches it, on the host
 * side, where the engine's own report cannot lie.
 *
 * We name the bridge ourselves (com.docker.network.bridge.name =
 * bridgecheck_name()), so it can be looked up. bridgecheck_verdict() is the
 * pure decision over a getifaddrs(3) list; bridgecheck_unaddressed() runs it
 * on the host's list.
 *
 * Ownership: *retreason is malloc'd and written only on -EADDRINUSE. */
#ifndef MSB_BRIDGECHECK_H
#define MSB_BRIDGECHECK_H

#include <ifaddrs.h>
#include <net/if.h>

#define BRIDGECHECK_PREFIX "msb"
/* "msb" + 12 hex: 15 characters, the most a Linux interface name holds. */
#define BRIDGECHECK_NAME_LEN (sizeof(BRIDGECHECK_PREFIX) - 1 + 12)
_Static_assert(BRIDGECHECK_NAME_LEN + 1 == IFNAMSIZ, "a bridge name fills IFNAMSIZ");

/* The decision over list (borrowed): 0 when ifname appears in it and holds
 * no AF_INET address and no AF_INET6 address outside fe80::/10 (an
 * AF_PACKET entry alone says it exists); -ENODEV when no entry names it;
 * -EADDRINUSE when it holds one, with *retreason = "bridge NAME holds ADDR"
 * (every such address, ", "-joined, in list order). */
int bridgecheck_verdict(const struct ifaddrs *list, const char *ifname, char **retreason);

/* bridgecheck_verdict() on getifaddrs(3); -errno when that fails. */
int bridgecheck_unaddressed(const char *ifname, char **retreason);

/* The bridge name for the network of container_name (a workload's
 * maf-sandbox-docker-<12 hex>, also accepted with "-net" or "-proxy"):
 * "msb" + those 12 hex. Any other name gets "msb" + the first 12 hex of
 * its SHA-256, so the result is always a valid 15-character name. out holds
 * IFNAMSIZ bytes. */
void bridgecheck_name(const char *container_name, char out[IFNAMSIZ]);

#endif

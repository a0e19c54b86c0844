/* egress_topo.h — what the parts of the allowlist (egress.h) share: the
 * names, labels and limits of one allowlisted sandbox's topology (its
 * NAME-net and NAME-proxy), and struct egress_info, the topology as acquire
 * sees it. Included by egress.h (the public API) and by the parts
 * (egress_follow.h, egress_pool.h, egress_image.h), which never include
 * egress.h: the state machine uses them, not the other way round. */
#ifndef MSB_EGRESS_TOPO_H
#define MSB_EGRESS_TOPO_H

#include <stdbool.h>
#include <jansson.h>

#include "names.h"

#define EGRESS_PROXY_PORT          3128
#define EGRESS_PROXY_SUFFIX        "-proxy"
#define EGRESS_NET_SUFFIX          "-net"
/* NAME-proxy, NAME-net and a NUL, with room to spare. */
#define EGRESS_NAME_MAX            (NAMES_CONTAINER_MAX + 16)
/* Labels of ours on allowlisted topologies. */
#define LABEL_KEY_V1               "maf-sandbox.key.v1"
#define LABEL_EGRESS               "maf-sandbox.egress"   /* "allowlist" on the workload */
/* The proxy container's limits. */
#define EGRESS_PROXY_PIDS_LIMIT    64
#define EGRESS_PROXY_MEMORY_BYTES  (128u * 1024 * 1024)
#define EGRESS_PROXY_LOG_MAX_SIZE  "16m"      /* json-file rotation: a guest cannot fill the disk */
#define EGRESS_PROXY_LOG_MAX_FILES "2"
#define EGRESS_PROXY_STOP_GRACE_S  2
/* One log line of a proxy; longer lines are dropped (a decision line is short). */
#define EGRESS_LINE_MAX            1024
/* The follow stream is re-opened after this when it ends while the proxy runs. */
#define EGRESS_FOLLOW_RETRY_MS     1000
/* Pool blocks tried for one network before giving up (each overlap marks one). */
#define EGRESS_NET_CREATE_TRIES    8
/* Decision lines one proxy may put in the daemon's log each second (a guest
 * can make decisions as fast as it can connect); the rest are counted. */
#define EGRESS_LOG_PER_SECOND      50
/* Bytes of one proxy's log handled in one turn of the loop (plus at most
 * the chunk that crossed it, a libcurl buffer: 16 KiB); past it the stream
 * pauses until the next turn, after the loop has served what else is ready. */
#define EGRESS_BYTES_PER_TURN      (64u * 1024)
/* A drain gives up on a proxy log that sends nothing for this long. */
#define EGRESS_DRAIN_IDLE_MS       10000

struct egress_info {
	char network[80];          /* NAME-net */
	char proxy[80];            /* NAME-proxy */
	char proxy_address[48];    /* the proxy's fixed address on NAME-net */
	char dns[48];              /* the workload's resolver: an address nothing serves */
	char subnet[48];
	bool network_new;          /* egress_ensure made the network now: a workload that
				    * exists is not on it and must be replaced */
};
/* {"network", "proxy", "proxy_address", "proxy_url"}. New reference. */
json_t *egress_info_json(const struct egress_info *info);

struct subnet_block;
/* info of workload's topology: its proxy at proxy_address on block b (NULL:
 * no dns, no subnet). network_new false. */
void egress_info_fill(struct egress_info *info, const char *workload, const char *proxy_address,
		      const struct subnet_block *b);

/* The proxy's address on its network net, from a container listing's item
 * or an inspect (borrowed from obj), or NULL. */
const char *egress_proxy_address_of(const json_t *obj, const char *net);

/* Drain (egress_drain): error < 0 if the proxy's log could not be read. */
typedef void egress_drain_cb(int error, void *arg);

#endif

/* jsonparse.c — maf-sandbox-bench-jsonparse: what parsing one request frame
 * costs the daemon (proto/jsonrpc.c, the parser the server runs on every
 * frame), per adversarial shape: its time and the growth of the process's
 * peak RSS (VmHWM) over the frame itself. One shape per process, so each
 * peak is its own.
 *
 *   maf-sandbox-bench-jsonparse SHAPE BYTES [raw | scan]
 *
 * SHAPE: zeros (a flat array of 0 in an unknown param), nested ([[[...]]]),
 * strings (["",...]), keys ({"k0":0,...}), string (one string of BYTES),
 * key (one key of BYTES), midstrings (strings of $STRLEN bytes, default
 * 4000), spaces (whitespace between two values), number (one number of BYTES digits). With raw: the
 * frame goes to jsonfast_loadb directly (what the parser did before its
 * pre-scan); with scan: only the pre-scan (jsonfast_scan, no limits), its
 * cost per frame. Prints one line: shape, bytes, outcome, ms, peak growth. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jsonfast.h"
#include "jsonrpc.h"

static long vm_hwm_kib(void)
{
	char line[256];
	long kib = -1;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmHWM: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

static char *build(const char *shape, size_t bytes, size_t *ret_len)
{
	static const char head[] = "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"daemon.status\",\"params\":{\"junk\":";
	char *b = malloc(bytes + 64);
	size_t n = 0, body = bytes > sizeof(head) + 16 ? bytes - sizeof(head) - 16 : 0;

	if (!b)
		exit(2);
	memcpy(b, head, sizeof(head) - 1);
	n = sizeof(head) - 1;
	if (!strcmp(shape, "zeros") || !strcmp(shape, "strings") || !strcmp(shape, "midstrings")) {
		const char *piece = !strcmp(shape, "zeros") ? "0," : "\"\",";
		size_t pl = strlen(piece);

		b[n++] = '[';
		if (!strcmp(shape, "midstrings")) {
			size_t sl = getenv("STRLEN") ? strtoull(getenv("STRLEN"), NULL, 0) : 4000;

			while (n + sl + 4 < body) {
				b[n++] = '"';
				memset(b + n, 'a', sl);
				n += sl;
				b[n++] = '"';
				b[n++] = ',';
			}
		} else {
			while (n + pl < body) {
				memcpy(b + n, piece, pl);
				n += pl;
			}
		}
		b[n - 1] = ']';
	} else if (!strcmp(shape, "nested")) {
		size_t k = body / 2;

		memset(b + n, '[', k);
		memset(b + n + k, ']', k);
		n += 2 * k;
	} else if (!strcmp(shape, "keys")) {
		b[n++] = '{';
		for (size_t i = 0; n + 32 < body; i++)
			n += (size_t)sprintf(b + n, "\"k%zu\":0,", i);
		b[n - 1] = '}';
	} else if (!strcmp(shape, "string") || !strcmp(shape, "key")) {
		bool key = !strcmp(shape, "key");

		if (key)
			b[n++] = '{';
		b[n++] = '"';
		memset(b + n, 'a', body - 8);
		n += body - 8;
		b[n++] = '"';
		if (key) {
			memcpy(b + n, ":0}", 3);
			n += 3;
		}
	} else if (!strcmp(shape, "spaces")) {
		b[n++] = '[';
		b[n++] = '0';
		b[n++] = ',';
		memset(b + n, ' ', body - 8);
		n += body - 8;
		b[n++] = '0';
		b[n++] = ']';
	} else if (!strcmp(shape, "number")) {
		memset(b + n, '1', body);
		n += body;
	} else {
		fprintf(stderr, "unknown shape %s\n", shape);
		exit(2);
	}
	memcpy(b + n, "}}", 2);
	n += 2;
	b[n] = '\0';
	*ret_len = n;
	return b;
}

int main(int argc, char **argv)
{
	struct timespec t0, t1;
	struct jsonrpc_request req;
	json_t *reply = NULL, *v = NULL;
	const char *outcome;
	long before, after;
	size_t len;
	char *frame;
	bool raw = argc > 3 && !strcmp(argv[3], "raw");
	bool scan = argc > 3 && !strcmp(argv[3], "scan");
	struct jsonfast_shape shape;

	if (argc < 3) {
		fprintf(stderr, "usage: %s SHAPE BYTES [raw]\n", argv[0]);
		return 2;
	}
	frame = build(argv[1], strtoull(argv[2], NULL, 0), &len);
	before = vm_hwm_kib();
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (scan) {
		struct jsonfast_limits none = { SIZE_MAX, SIZE_MAX, SIZE_MAX };

		jsonfast_scan(frame, len, &none, &shape);
		outcome = "scanned";
	} else if (raw) {
		v = jsonfast_loadb(frame, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, NULL);
		outcome = v ? "parsed" : "refused by jansson";
		json_decref(v);
	} else if (jsonrpc_request_parse(frame, len, &req, &reply) == 0) {
		outcome = "parsed";
		jsonrpc_request_release(&req);
	} else {
		json_t *data = json_object_get(json_object_get(reply, "error"), "data");

		outcome = json_object_get(data, "limit") ? "refused (limit)" : "refused";
		json_decref(reply);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	after = vm_hwm_kib();
	printf("%-10s %10zu bytes  %-20s %8.1f ms  peak RSS +%ld KiB (%.2f x frame)\n", argv[1], len,
	       outcome, (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6,
	       after - before, (double)(after - before) * 1024 / (double)len);
	free(frame);
	return 0;
}

/* fake_engine.h — a fake Docker engine for unit tests: a small HTTP/1.1
 * server on a Unix socket in a mkdtemp directory under $TMPDIR (default
 * /tmp), in its own threads (one
 * accepting, one per connection), serving canned replies from a script.
 *
 * Matching: each request takes the first script entry whose method (NULL =
 * any) and path prefix (NULL = any) match and that is unused (or marked
 * repeat). No match → 404 {"message":"fake engine: no reply for …"}.
 * Keep-alive is honoured: a connection serves requests until the client
 * closes it or an entry says to close. Every request is recorded (method,
 * path, headers, body, connection number) before its reply is sent, so a
 * test that has seen the reply can assert on the record.
 *
 * One fake per process (tests run forked). Not for production use: it
 * trusts the client to be libcurl and caps everything generously. */
#ifndef MSB_FAKE_ENGINE_H
#define MSB_FAKE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>

#define FAKE_MAX_REQUESTS    1024    /* recorded; more are served, not recorded (a run that
				      * probes every 10 ms under valgrind for seconds fits) */
#define FAKE_MAX_CONNECTIONS 64      /* concurrently served over one run */
#define FAKE_MAX_REQUEST_BYTES (4 * 1024 * 1024)

struct fake_reply {
	const char *method;       /* NULL: any */
	const char *path;         /* path prefix; NULL: any */
	int status;               /* 0: 200 */
	const char *headers;      /* extra header lines, each ending "\r\n"; NULL: none */
	const char *body;         /* NULL: empty */
	size_t body_len;          /* 0: strlen(body) */
	int delay_ms;             /* wait this long before sending anything */
	bool chunked;             /* Transfer-Encoding: chunked instead of Content-Length */
	size_t chunk_size;        /* chunked: body bytes per chunk (0: 8) */
	int chunk_delay_ms;       /* chunked: pause between chunks */
	bool stall;               /* send headers and body, then neither end the body nor
				   * close (chunked: no last chunk; else one byte short) */
	long close_after_bytes;   /* > 0: send only this many bytes of the reply, then close */
	const char *raw;          /* send these bytes instead of a reply, then close */
	bool close;               /* close the connection after the reply */
	bool repeat;              /* may match any number of requests */
};

struct fake_request {
	char method[16];
	char path[2048];
	char *headers;            /* the header lines as received, "Name: value\r\n" each */
	char *body;               /* NUL-terminated; body_len excludes the NUL */
	size_t body_len;
	unsigned conn;            /* 1-based number of the connection it came on */
	long long at_us;          /* CLOCK_MONOTONIC when it was recorded, in µs */
	long long replied_us;     /* ... when its reply began to go out (0: not yet). The
				   * client cannot act on a reply before this, nor send a
				   * request after it: a retry's `not early` check measures
				   * from the reply to one request to the next request's
				   * at_us (never the other way: the fake's thread may
				   * record a request late, a loaded machine's or
				   * valgrind's doing). Never for an upper bound. */
};

/* The socket path (in a temporary directory created on first use). The
 * fake need not be listening: connecting to it then fails. */
const char *fake_engine_socket_path(void);
/* Listens on fake_engine_socket_path() and serves script[0..n) (borrowed:
 * it must outlive the run). Resets the records. Returns the socket path. */
const char *fake_engine_start(const struct fake_reply *script, size_t n);
/* Stops serving: closes every connection, joins the threads, removes the
 * socket. The directory stays (a later start reuses the path). */
void fake_engine_stop(void);
/* Stops if needed, frees the records and removes the directory. */
void fake_engine_cleanup(void);

/* For a test program's main(), around srunner_run_all: makes a private
 * directory and points $TMPDIR at it, so every forked test's files land
 * there; the second call removes the tree. A failed Check assertion ends
 * its child with _exit, skipping the fixture's teardown: this cleans up
 * after it. */
void fake_run_dir_create(const char *prefix);
void fake_run_dir_remove(void);

/* Requests received so far (capped at FAKE_MAX_REQUESTS). */
size_t fake_engine_request_count(void);
/* Record i (< count), valid until the next start or cleanup. */
const struct fake_request *fake_engine_request(size_t i);
/* Connections accepted since start. */
unsigned fake_engine_connection_count(void);
/* Times the fake saw a client go away: an end of file read from it, or a
 * reply it could no longer take (the send failed), counted once per
 * connection. A test observes an idle or cancel close here, not by time. */
unsigned fake_engine_peer_gone_count(void);
/* Of those, the times it went with its request's reply not wholly sent: it
 * left during the reply's delay, a stall, or a chunked body (the fake
 * watches for the end of file while it delays a reply): a request the
 * client cancelled in flight. */
unsigned fake_engine_abandoned_count(void);
/* Copies the value of header name (case-insensitive) into out; false if absent. */
bool fake_request_header(const struct fake_request *r, const char *name, char *out, size_t outlen);

#endif

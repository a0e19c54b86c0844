#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "msb-build.h"
#include "sd.h"
#include "xmalloc.h"

#if HAVE_SYSTEMD
#include <systemd/sd-daemon.h>

int sd_activated_socket(char **reterr_message)
{
	int n = sd_listen_fds(1);
	int r;

	if (n < 0) {
		*reterr_message = xasprintf("LISTEN_FDS is set but unusable: %s", strerror(-n));
		return n;
	}
	if (n == 0)
		return -ENOENT;
	if (n > 1) {
		*reterr_message = xasprintf("socket activation passed %d sockets; expected one", n);
		return -EINVAL;
	}
	r = sd_is_socket_unix(SD_LISTEN_FDS_START, SOCK_STREAM, 1, NULL, 0);
	if (r <= 0) {
		*reterr_message = xstrdup(r < 0 ? "socket activation fd cannot be inspected" :
					  "socket activation fd is not a listening Unix stream socket");
		return r < 0 ? r : -EINVAL;
	}
	return SD_LISTEN_FDS_START;
}

void sd_notify_ready(const char *status)
{
	sd_notifyf(0, "READY=1\nSTATUS=%s", status);
}

void sd_notify_status(const char *status)
{
	sd_notifyf(0, "STATUS=%s", status);
}

void sd_notify_stopping(void)
{
	sd_notify(0, "STOPPING=1\nSTATUS=draining requests in flight");
}

void sd_notify_reloading(void)
{
	sd_notify(0, "RELOADING=1");
}

#else

int sd_activated_socket(char **reterr_message)
{
	(void)reterr_message;
	return -ENOENT;
}

void sd_notify_ready(const char *status)
{
	(void)status;
}

void sd_notify_status(const char *status)
{
	(void)status;
}

void sd_notify_stopping(void)
{
}

void sd_notify_reloading(void)
{
}
#endif

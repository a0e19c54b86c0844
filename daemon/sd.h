/* sd.h — systemd glue: socket activation and sd_notify. Without libsystemd
 * (HAVE_SYSTEMD 0) activation finds no sockets and notifications are not
 * sent. */
#ifndef MSB_SD_H
#define MSB_SD_H

/* Returns the one socket-activated listening fd (checked to be a Unix
 * stream socket that is listening), -ENOENT when not socket-activated, or
 * another negative errno with *reterr_message (malloc'd). */
int sd_activated_socket(char **reterr_message);
void sd_notify_ready(const char *status);
void sd_notify_status(const char *status);
void sd_notify_stopping(void);
void sd_notify_reloading(void);

#endif

/* http.h — the HTTP listener (libmicrohttpd) of the server. */
#ifndef DSV4_SERVE_HTTP_H
#define DSV4_SERVE_HTTP_H

#include <sys/socket.h>

#include "dsv4.h"

typedef struct dsv4_server srv;

/* Starts listening on addr (port 0: any free port; the chosen one lands in s->port). */
int srv_http_start(srv *s, const struct sockaddr *addr, dsv4_err *err);
/* Stops accepting connections; open ones go on. */
void srv_http_quiesce(srv *s);
/* Closes every connection and joins their threads. */
void srv_http_stop(srv *s);

#endif

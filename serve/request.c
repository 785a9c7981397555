/* Request parsing: written in its own change (serve/request.h). */
#include "request.h"

void srv_request_free(srv_request *r) { (void)r; }

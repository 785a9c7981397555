/* Types shared by the server's parts (serve/): the parsed request
 * (request.c), the chat templates (chat.c), the scheduler (sched.c) and the
 * HTTP layer (http.c). The server uses only the public API
 * (include/diffrt/). */
#ifndef DRT_SRV_TYPES_H
#define DRT_SRV_TYPES_H

#include <stddef.h>
#include <stdint.h>

/* An OpenAI error object: {"error":{"message","type","param","code"}} sent
 * with `status`. type is one of "invalid_request_error",
 * "authentication_error", "not_found_error", "server_error",
 * "unavailable_error"; code NULL or e.g. "unsupported_parameter",
 * "context_length_exceeded", "model_not_found". Messages never quote more
 * than 64 bytes of client input. */
typedef struct {
    int status;
    const char *type;
    const char *code;
    char param[64]; /* the field at fault, "" for none */
    char message[320];
} srv_error;

typedef enum { SRV_ROLE_SYSTEM = 0, SRV_ROLE_USER, SRV_ROLE_ASSISTANT } srv_role;

/* One chat message; content is valid UTF-8 without NUL bytes, len bytes,
 * NUL-terminated ("developer" messages are SRV_ROLE_SYSTEM). */
typedef struct {
    srv_role role;
    char *content;
    size_t len;
} srv_message;

#define SRV_MAX_STOP 4
#define SRV_MAX_STOP_BYTES 256

#endif

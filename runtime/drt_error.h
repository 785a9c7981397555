/* Internal error reporting: set the thread-local message and return the code. */
#ifndef DRT_ERROR_H
#define DRT_ERROR_H

#include "diffrt/diffrt.h"

#if defined(__GNUC__)
#define DRT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DRT_PRINTF(a, b)
#endif

/* Formats the message for drt_last_error() and returns s. */
drt_status drt_set_error(drt_status s, const char *fmt, ...) DRT_PRINTF(2, 3);

/* A 0/1 setting from the environment: *out = def when unset or empty, else
 * the value; anything but "0" or "1" is an error naming the variable. */
drt_status drt_env_flag(const char *name, int def, int *out);

#endif

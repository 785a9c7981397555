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

/* Settings (0/1 switches and the rest) are read through the table in
 * drt_settings.h, never with getenv. */

#endif

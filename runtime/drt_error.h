/* Internal error reporting: drt_set_error (set the thread-local message and
 * return the code) and DRT_PRINTF are public, in include/diffrt/util.h. */
#ifndef DRT_ERROR_H
#define DRT_ERROR_H

#include "diffrt/diffrt.h"
#include "diffrt/util.h"

/* Settings (0/1 switches and the rest) are read through the table in
 * drt_settings.h, never with getenv. */

#endif

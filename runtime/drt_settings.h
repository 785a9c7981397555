/* The settings registry, internal side (runtime/settings.c; the public side
 * is in diffrt.h). Each setting is one row of a table with its name, its
 * environment variable (and a deprecated alias), its kind, its values and a
 * validator: the backends, the loader and sessions read their settings
 * through the typed getters below, never with getenv.
 *
 * A value comes from, first to last: the drt_settings the caller passed (NULL:
 * none), the environment variable, the deprecated alias (a one-line warning on
 * stderr, once per alias per process), the default. A value that is not valid
 * is DRT_ERR_INVALID_ARG naming where it came from (the variable, or
 * "setting NAME"), never a silent default. The name must be in the table
 * (a wrong name is a bug: DRT_ERR_INVALID_ARG). */
#ifndef DRT_SETTINGS_H
#define DRT_SETTINGS_H

#include "diffrt/diffrt.h"

/* a 0/1 setting */
drt_status drt_setting_bool(const drt_settings *s, const char *name, int *out);
/* an integer setting; its default (an automatic choice) reads as 0 */
drt_status drt_setting_int(const drt_settings *s, const char *name, long long *out);
/* a choice or a string: the value's text ("" when the default is automatic);
 * valid until s is freed or changed (the environment's own string else) */
drt_status drt_setting_str(const drt_settings *s, const char *name, const char **out);

/* A copy of s (NULL: NULL, and *out NULL) that a backend instance keeps. */
drt_status drt_settings_copy(const drt_settings *s, drt_settings **out);

#endif

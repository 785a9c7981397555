/* What build this is: the project version (CMake's project(VERSION)) and the
 * short git commit it was configured from ("unknown" outside a checkout).
 * Defined in the generated build/generated/drt_version.c (cmake/version.cmake). */
#ifndef DRT_VERSION_H
#define DRT_VERSION_H

const char *drt_version(void);
const char *drt_git_commit(void);

#endif

/* version.c — the version this library was built as (dsv4.h's macros when it was compiled). */
#include "dsv4.h"

const char *dsv4_version(void) { return DSV4_VERSION_STRING; }

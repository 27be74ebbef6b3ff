/*
 * base/log.c: formats one diagnostic line and hands it to the context's log
 * hook.  cgr never prints by itself; cgr_log_stderr is a hook the user may
 * choose to install.
 */
#include <stdarg.h>
#include <stdio.h>

#include "base/base.h"

void cgr__log(const struct cgr__logger *lg, int level, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	if (lg == NULL || lg->fn == NULL || level > lg->level)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	/* One line, whatever names it quotes hold (a newline, an escape):
	 * control characters become spaces. */
	for (char *p = line; *p != 0; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = ' ';
	lg->fn(lg->arg, level, line);
}

void cgr_log_stderr(void *arg, int level, const char *msg)
{
	static const char *const names[] = { "error", "warn", "info",
					     "debug" };
	const char *name = level >= 0 && level < 4 ? names[level] : "?";

	(void)arg;
	/* One fprintf call: stdio locks the stream, so lines don't interleave. */
	fprintf(stderr, "cgr: %s: %s\n", name, msg);
}

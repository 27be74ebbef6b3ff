/*
 * tests/header.c: cgr.h compiles on its own as strict C11 with -Wall
 * -Wextra -Wpedantic -Werror (this file), and as C++ (header-cxx.cc).
 */
#include <cgr.h>

#include <stdio.h>
#include <string.h>

int main(void)
{
	cgr_value v = cgr_value_bytes("ab", 2);
	cgr_ctx_params cp = CGR_CTX_PARAMS_INIT;
	cgr_compile_params pp = CGR_COMPILE_PARAMS_INIT;
	int ok = v.kind == CGR_VALUE_BYTES && v.u.bytes.len == 2 &&
		 cp.size == sizeof(cp) && pp.size == sizeof(pp) &&
		 CGR_VERSION_NUMBER == CGR_VERSION_MAJOR * 10000 +
						 CGR_VERSION_MINOR * 100 +
						 CGR_VERSION_PATCH &&
		 strcmp(cgr_err_name(CGR_ECYCLE), "CGR_ECYCLE") == 0 &&
		 sizeof(v.u.error) <= sizeof(DLTensor) &&
		 sizeof(v.u.error.execution) == 8 && CGR_ERROR_MAX_HOPS > 0;
	printf("1..1\n%s 1 - cgr.h as C11 (-Wpedantic -Werror)\n",
	       ok ? "ok" : "not ok");
	return 0;
}

// tests/header-cxx.cc: cgr.h compiles as C++ with -Wall -Wextra -Wpedantic
// -Werror and links from C++.
#include <cgr.h>

#include <cstdio>
#include <cstring>

int main()
{
	cgr_value v = cgr_value_bytes("abc", 3);
	cgr_worker_params wp = CGR_WORKER_PARAMS_INIT;
	bool ok = v.kind == CGR_VALUE_BYTES && v.u.bytes.len == 3 &&
		  wp.size == sizeof(wp) && sizeof(v.u.error) <= sizeof(DLTensor) &&
		  std::strcmp(cgr_strerror(CGR_ECAPACITY),
			      "too many executions in flight") == 0;
	std::printf("1..1\n%s 1 - cgr.h as C++ (-Wpedantic -Werror)\n",
		    ok ? "ok" : "not ok");
	return 0;
}

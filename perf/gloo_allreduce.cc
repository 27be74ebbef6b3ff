/*
 * perf/gloo_allreduce.cc: Gloo's allreduce, the peer of the allreduce rows
 * of perf/collective_bw.c: the same sizes (float32 sum, out of place), the
 * same calibration and sample rules, nccl-tests' algbw/busbw.
 *
 * Ranks are threads of this process, one gloo::rendezvous::Context each,
 * met through an in-process HashStore and connected over Gloo's TCP
 * transport on 127.0.0.1 only (Gloo as packaged has no shared-memory
 * transport).  The algorithm is gloo::allreduce's default (ring).  JSON
 * lines carry impl "gloo".  perf.h is C (stdatomic), so the few helpers it
 * would give live here in C++.
 *
 * Options: -r RANKS (repeatable; default 2 and 4), -w windows, -n
 * iteration cap, -t ms per sample, -k samples per window, --quick, --json.
 */
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace
{

const char *const kBench = "collective_bw";

const size_t kFullSizes[] = {
    8,	      64,	 512,	  4 << 10,  32 << 10,
    64 << 10, 256 << 10, 2 << 20, 16 << 20, 64 << 20,
};
const size_t kQuickSizes[] = {
    8, 512, 64 << 10, 2 << 20, 16 << 20, 64 << 20,
};

double now_ns()
{
	return std::chrono::duration<double, std::nano>(
		   std::chrono::steady_clock::now().time_since_epoch())
	    .count();
}

std::string size_label(size_t b)
{
	char buf[32];

	if (b >= (1u << 20) && b % (1u << 20) == 0)
		snprintf(buf, sizeof(buf), "%zuMiB", b >> 20);
	else if (b >= 1024 && b % 1024 == 0)
		snprintf(buf, sizeof(buf), "%zuKiB", b >> 10);
	else
		snprintf(buf, sizeof(buf), "%zuB", b);
	return buf;
}

double median(std::vector<double> v)
{
	if (v.empty())
		return 0;
	std::sort(v.begin(), v.end());
	size_t n = v.size();
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The i-th CPU this process may run on, or -1 (i counts from 0). */
int nth_cpu(int i)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set) != 0)
		return -1;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &set) && i-- == 0)
			return c;
	return -1;
}

/* Spinning barrier between the rank threads (yields: more ranks than
 * cores is a case we run). */
struct SpinBarrier {
	std::atomic<unsigned> count{0}, gen{0};
	void wait(unsigned parties)
	{
		unsigned g = gen.load(std::memory_order_acquire);
		if (count.fetch_add(1, std::memory_order_acq_rel) ==
		    parties - 1) {
			count.store(0, std::memory_order_relaxed);
			gen.fetch_add(1, std::memory_order_release);
			return;
		}
		while (gen.load(std::memory_order_acquire) == g)
			sched_yield();
	}
};

struct Run {
	int n = 2;
	int windows = 3;
	int reps = 3; /* samples per window after one calibration */
	long max_iters = 100000;
	double target_ns = 15e6;
	bool pin = false;
	std::vector<size_t> sizes;
	std::shared_ptr<gloo::rendezvous::HashStore> store;
	std::shared_ptr<gloo::transport::Device> dev;
	SpinBarrier bar;
	std::vector<double> rank_ns;
	std::atomic<int> failed{0};
	/* res[size][window], ns per operation; iters of the last window */
	std::vector<std::vector<double>> res;
	std::vector<long> res_iters;

	double slowest() const
	{
		return *std::max_element(rank_ns.begin(), rank_ns.end());
	}
};

void rank_main(Run *R, int rank)
{
	const size_t max_count = (64u << 20) / sizeof(float);
	std::vector<float> send(max_count, 0.0f), recv(max_count, 0.0f);
	std::shared_ptr<gloo::rendezvous::Context> ctx;
	int n = R->n;

	if (R->pin) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(nth_cpu(rank), &set);
		sched_setaffinity(0, sizeof(set), &set);
	}
	try {
		ctx = std::make_shared<gloo::rendezvous::Context>(rank, n);
		ctx->connectFullMesh(*R->store, R->dev);
	} catch (const std::exception &e) {
		fprintf(stderr, "gloo_allreduce: rank %d: connect: %s\n", rank,
			e.what());
		R->failed = 1;
	}
	R->bar.wait((unsigned)n);
	if (R->failed)
		return;
	for (size_t i = 0; i < max_count; i++)
		send[i] = (float)((rank * 3 + i) % 13);

	for (int w = 0; w < R->windows; w++) {
		for (size_t s = 0; s < R->sizes.size(); s++) {
			size_t cnt = std::max<size_t>(R->sizes[s] / 4, 1);
			gloo::AllreduceOptions opts(ctx);
			void (*fn)(void *, const void *, const void *, size_t) =
			    &gloo::sum<float>;

			opts.setInput(send.data(), cnt);
			opts.setOutput(recv.data(), cnt);
			opts.setReduceFunction(fn);
			opts.setTag((uint32_t)s);
			/* The slowest rank's time for iters operations back
			 * to back, the same on every rank; -1 on failure. */
			auto timed = [&](long iters) -> double {
				R->bar.wait((unsigned)n);
				double t0 = now_ns();
				try {
					for (long it = 0; it < iters; it++)
						gloo::allreduce(opts);
				} catch (const std::exception &e) {
					fprintf(stderr,
						"gloo_allreduce: rank %d: %s\n",
						rank, e.what());
					R->failed = 1;
				}
				R->rank_ns[rank] = now_ns() - t0;
				R->bar.wait((unsigned)n);
				double m = R->failed ? -1 : R->slowest();
				R->bar.wait((unsigned)n);
				return m;
			};
			/* The warm-up operation, checked. */
			if (timed(1) < 0)
				return;
			for (size_t i = 0; i < cnt; i++) {
				float want = 0;
				for (int q = 0; q < n; q++)
					want += (float)((q * 3 + i) % 13);
				if (recv[i] != want) {
					fprintf(stderr,
						"gloo_allreduce: wrong result "
						"at %zu\n",
						i);
					break;
				}
			}
			/* Batches of 1, 4, 16, ... as collective_bw
			 * calibrates: until one takes an eighth of the target
			 * (and two batches unless one operation takes it
			 * all); the fastest batch per operation. */
			long batch = 1, iters;
			double t, per = 0;
			for (;;) {
				t = timed(batch);
				if (t < 0)
					return;
				if (per == 0 || t / (double)batch < per)
					per = t / (double)batch;
				if ((t >= R->target_ns / 8 &&
				     (batch > 1 || t >= R->target_ns)) ||
				    batch >= R->max_iters)
					break;
				batch *= 4;
			}
			double k = per > 0 ? R->target_ns / per : 1e9;
			k = std::min(std::max(k, 1.0), (double)R->max_iters);
			iters = (long)k;
			for (int q = 0; q < R->reps; q++) {
				t = timed(iters);
				if (t < 0)
					return;
				if (rank == 0)
					R->res[s].push_back(t / (double)iters);
			}
			if (rank == 0)
				R->res_iters[s] = iters;
		}
	}
}

void json(const std::string &cs, const char *metric, double v, const char *unit,
	  size_t bytes, const char *extra)
{
	printf("{\"bench\":\"%s\",\"case\":\"%s\",\"impl\":\"gloo\","
	       "\"metric\":\"%s\",\"value\":%.6g,\"unit\":\"%s\","
	       "\"bytes\":%zu%s}\n",
	       kBench, cs.c_str(), metric, v, unit, bytes, extra);
}

int run_ranks(Run &tmpl, int n, bool as_json)
{
	Run R;
	double wall0 = now_ns();
	gloo::transport::tcp::attr attr;

	R.n = n;
	R.windows = tmpl.windows;
	R.reps = tmpl.reps;
	R.max_iters = tmpl.max_iters;
	R.target_ns = tmpl.target_ns;
	R.sizes = tmpl.sizes;
	R.pin = nth_cpu(n - 1) >= 0; /* one CPU per rank if enough */
	R.rank_ns.assign((size_t)n, 0);
	R.res.assign(R.sizes.size(), std::vector<double>());
	R.res_iters.assign(R.sizes.size(), 0);
	R.store = std::make_shared<gloo::rendezvous::HashStore>();
	attr.hostname = "127.0.0.1"; /* loopback only */
	attr.ai_family = AF_INET;
	try {
		R.dev = gloo::transport::tcp::CreateDevice(attr);
	} catch (const std::exception &e) {
		fprintf(stderr, "gloo_allreduce: tcp device: %s\n", e.what());
		return 1;
	}
	std::vector<std::thread> th;
	for (int r = 0; r < n; r++)
		th.emplace_back(rank_main, &R, r);
	for (auto &t : th)
		t.join();
	if (R.failed)
		return 1;

	if (!as_json) {
		printf("\nGloo allreduce %d ranks (threads%s, TCP on "
		       "127.0.0.1), median of %d window(s) x %d sample(s)\n"
		       "%-14s %7s %10s %9s %12s %9s %9s\n",
		       n, R.pin ? ", pinned" : ", unpinned", R.windows, R.reps,
		       "collective", "size", "bytes", "iters", "time_us",
		       "algbw", "busbw");
	}
	double f = 2.0 * (n - 1) / n;
	for (int pass = 0; pass < 2; pass++) {
		if (pass == 0 && as_json)
			continue;
		for (size_t s = 0; s < R.sizes.size(); s++) {
			size_t bytes = std::max<size_t>(R.sizes[s] / 4, 1) * 4;
			double t = median(R.res[s]);
			double alg = t > 0 ? (double)bytes / t : 0;
			std::string cs = "allreduce/" + std::to_string(n) +
					 "r/" + size_label(R.sizes[s]);
			if (pass == 0) {
				printf("%-14s %7s %10zu %9ld %12.2f %9.3f "
				       "%9.3f\n",
				       "allreduce",
				       size_label(R.sizes[s]).c_str(), bytes,
				       R.res_iters[s], t / 1e3, alg, alg * f);
				continue;
			}
			char extra[64];
			snprintf(extra, sizeof(extra), ",\"busbw_factor\":%.4f",
				 f);
			json(cs, "time_us", t / 1e3, "us", bytes, "");
			json(cs, "algbw", alg, "GB/s", bytes, "");
			json(cs, "busbw", alg * f, "GB/s", bytes, extra);
		}
	}
	if (!as_json)
		printf("Gloo %d ranks: whole sweep took %.2f s\n", n,
		       (now_ns() - wall0) / 1e9);
	fflush(stdout);
	return 0;
}

} // namespace

int main(int argc, char **argv)
{
	Run tmpl;
	std::vector<int> ranks;
	bool quick = false, as_json = false, w_set = false, n_set = false;
	double target_ms = -1;
	int ret = 0;

	for (int i = 1; i < argc; i++) {
		std::string a = argv[i];
		if (a == "-r" && i + 1 < argc) {
			ranks.push_back(atoi(argv[++i]));
		} else if (a == "-w" && i + 1 < argc) {
			tmpl.windows = atoi(argv[++i]);
			w_set = true;
		} else if (a == "-n" && i + 1 < argc) {
			tmpl.max_iters = atol(argv[++i]);
			n_set = true;
		} else if (a == "-t" && i + 1 < argc) {
			target_ms = atof(argv[++i]);
		} else if (a == "-k" && i + 1 < argc) {
			tmpl.reps = atoi(argv[++i]);
		} else if (a == "--quick") {
			quick = true;
		} else if (a == "--json") {
			as_json = true;
		} else {
			fprintf(
			    stderr,
			    "usage: %s [-r ranks]... [-w windows] "
			    "[-n iteration cap] [-t ms per sample] "
			    "[-k samples] [--quick] [--json]\n  Gloo allreduce "
			    "(TCP on 127.0.0.1), 8 B..64 MiB\n",
			    argv[0]);
			return 2;
		}
	}
	/* As perf_parse does for the C programs. */
	if (quick && !w_set && tmpl.windows > 3)
		tmpl.windows = 3;
	if (quick && !n_set)
		tmpl.max_iters = std::max(tmpl.max_iters / 10, 1L);
	tmpl.windows = std::min(std::max(tmpl.windows, 1), 64);
	tmpl.max_iters = std::max(tmpl.max_iters, 1L);
	if (target_ms <= 0)
		target_ms = quick ? 3 : 10;
	if (tmpl.reps < 1 || tmpl.reps > 4)
		tmpl.reps = 3;
	tmpl.target_ns = target_ms * 1e6;
	if (quick)
		tmpl.sizes.assign(std::begin(kQuickSizes),
				  std::end(kQuickSizes));
	else
		tmpl.sizes.assign(std::begin(kFullSizes), std::end(kFullSizes));
	if (ranks.empty())
		ranks = {2, 4};
	for (int n : ranks) {
		if (n < 1 || n > 64) {
			fprintf(stderr, "gloo_allreduce: -r 1..64\n");
			return 2;
		}
		if (run_ranks(tmpl, n, as_json))
			ret = 1;
	}
	return ret;
}

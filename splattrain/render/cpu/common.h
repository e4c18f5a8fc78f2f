// Shared helpers of the CPU rasterizer's sources (see rasterize.cpp and project.cpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <system_error>
#include <thread>

namespace splat {

constexpr double kAlphaThreshold = 1.0 / 255.0;

// Whether the compositing kernels are also built for AVX2 and AVX-512 and picked at run time
// (GCC on x86-64; other compilers and machines build the baseline only).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SPLAT_X86_VARIANTS 1
#else
#define SPLAT_X86_VARIANTS 0
#endif

// For functions whose loops the compiler vectorises by itself (no vector extensions): copies
// built for AVX-512, AVX2 and the baseline, the CPU's best picked when the library loads.
#if SPLAT_X86_VARIANTS
#define SPLAT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SPLAT_CLONES
#endif

// Instruction sets the vector kernels (compositing, projection) are built for, narrowest first
// (the numbering is exported).
enum class Isa { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

// The widest instruction set this CPU runs that the kernels are built for.
inline Isa widest_isa() {
    static const Isa isa = [] {
#if SPLAT_X86_VARIANTS
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f")) return Isa::kAvx512;
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
#endif
        return Isa::kBaseline;
    }();
    return isa;
}

// A narrower set asked for (tests compare them), or -1 for the widest; shared by the library's
// translation units.
inline std::atomic<int> chosen_isa{-1};

inline Isa active_isa() {
    const int chosen = chosen_isa.load();
    return chosen < 0 ? widest_isa() : static_cast<Isa>(chosen);
}

// libgomp's entry point for a parallel region, present when the process's OpenMP runtime (the
// one PyTorch uses: libgomp, or LLVM's and Intel's runtimes, which export it too) is visible to
// this library; build.py makes it so. Weak, so the library also loads without one.
extern "C" void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags)
    __attribute__((weak));

// Whether parallel_for may use that team (switched off to use the library's own threads).
inline std::atomic<bool> openmp_team_enabled{true};

inline bool uses_openmp_team() { return GOMP_parallel != nullptr && openmp_team_enabled.load(); }

// Runs body(i) for i in [0, n) on up to `threads` threads, which take indices from a shared
// counter (dynamic scheduling); the calling thread is one of them.
//
// With an OpenMP runtime the work runs on the calling thread's OpenMP team: PyTorch's threads,
// which after each PyTorch operation spin for a while before sleeping. Fresh threads would
// compete with those spinning ones for the cores; the team takes the work at once.
//
// Without one, helpers are std::threads, detached, and the caller waits only for the indices
// taken, so on a busy machine a helper that has not started yet costs nothing: it later finds
// no work and exits (touching only the shared counters).
template <typename F>
void parallel_for(int64_t n, int threads, F&& body) {
    struct State {
        std::atomic<int64_t> next{0}, done{0};
        int64_t n = 0;
        std::function<void(int64_t)> task;
    };
    auto state = std::make_shared<State>();
    state->n = n;
    state->task = std::ref(body);
    auto work = [](const std::shared_ptr<State>& st) {
        for (int64_t i = st->next.fetch_add(1); i < st->n; i = st->next.fetch_add(1)) {
            st->task(i);
            st->done.fetch_add(1, std::memory_order_release);
        }
    };
    const int team = static_cast<int>(std::min<int64_t>(threads, n));
    if (team > 1 && uses_openmp_team()) {
        GOMP_parallel(
            [](void* data) {
                State& st = *static_cast<State*>(data);
                for (int64_t i = st.next.fetch_add(1); i < st.n; i = st.next.fetch_add(1)) st.task(i);
            },
            state.get(), static_cast<unsigned>(team), 0);
        return;
    }
    const int helpers = team - 1;
    try {
        for (int t = 0; t < helpers; ++t) std::thread(work, state).detach();
    } catch (const std::system_error&) {  // no more threads: the caller does the rest
    }
    work(state);
    while (state->done.load(std::memory_order_acquire) < n) std::this_thread::yield();
}

}  // namespace splat

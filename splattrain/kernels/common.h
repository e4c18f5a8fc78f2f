// Shared helpers of the CPU rasterizer's sources (see rasterize.cpp and project.cpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "worker_pool.h"

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

// Runs body(i) for i in [0, n) on up to `threads` threads (the caller and the library's workers,
// worker_pool.h), which take indices from a shared counter (dynamic scheduling). The caller waits
// only for indices already taken. A nested or concurrent call runs on the calling thread alone.
template <typename F>
void parallel_for(int64_t n, int threads, F&& body) {
    const int team = static_cast<int>(std::min<int64_t>(threads, n));
    if (team > 1 && worker_pool().run(n, team, body)) return;
    for (int64_t i = 0; i < n; ++i) body(i);
}

}  // namespace splat

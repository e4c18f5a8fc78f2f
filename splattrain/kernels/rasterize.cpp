// Tile binning (binning.inc) and per-pixel compositing (forward and backward) of projected 2D
// Gaussians on the CPU, with gsplat's rules. Plain C ABI, loaded with ctypes by splattrain/kernels;
// tensors arrive as raw pointers to contiguous arrays.
//
// Threads take tiles from a shared counter (dynamic scheduling). A tile walks its depth-sorted
// list once, Gaussian by Gaussian, updating a tile row's kLanes pixels a vector register at a
// time (the kernels in composite_tile.inc; x86-64 builds also carry AVX2 and AVX-512 copies,
// picked at run time).
// Only the rows, lane groups and vector registers of a group the Gaussian's ellipse can reach at
// the alpha threshold are visited, so the work follows the Gaussians' footprints, and exp(-sigma)
// is mostly advanced from row to row by multiplications rather than evaluated per pixel (see
// Group). The backward pass walks each list back to front like gsplat's CUDA kernel, rebuilding
// transmittance by division, and writes one gradient row per intersection; rows are summed per
// Gaussian in list order afterwards, so results do not depend on the thread count.

#include <atomic>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "common.h"

namespace {

using splat::kAlphaThreshold;
using splat::parallel_for;

constexpr double kAlphaMax = 0.999;
constexpr double kTransmittanceMin = 1e-4;
// Extra Mahalanobis slack when cutting a Gaussian's reach, far above rounding error, so every
// pixel the exact per-pixel test would accept is visited.
constexpr double kReachMargin = 0.05;
// How many list entries ahead a tile fetches Gaussians into the cache.
constexpr int kPrefetch = 4;
// Pixels of a tile row a Gaussian is composited over at once (one AVX-512 register of floats,
// two AVX2 ones, four baseline ones).
constexpr int kLanes = 16;
// A pixel's stop entry while it still takes colour (outside pixels: -1).
constexpr int32_t kNeverStopped = INT32_MAX;

// exp(x) for x clamped to [-87, 87]: Cephes' single-precision polynomial, about 1 ulp, written so
// that loops calling it vectorise.
[[gnu::always_inline]] inline float exp_clamped(float x) {
    x = std::min(std::max(x, -87.0f), 87.0f);
    const float t = x * 1.44269504088896341f;
    const int n = static_cast<int>(t + (t >= 0.0f ? 0.5f : -0.5f));
    const float nf = static_cast<float>(n);
    const float r = (x - nf * 0.693359375f) + nf * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float y = p * r * r + r + 1.0f;
    const int32_t bits = (n + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return y * scale;
}

[[gnu::always_inline]] inline double exp_clamped(double x) { return std::exp(std::min(std::max(x, -700.0), 700.0)); }

#include "binning.inc"

// The shared inputs of the compositing passes.
template <typename S>
struct Scene {
    const S* means2d;            // [C * N, 2]
    const S* conics;             // [C * N, 3]
    const S* opacities;          // [C * N]
    const S* colors;             // [C * N, D]
    const int32_t* offsets;      // [C * tiles]
    const int32_t* flatten_ids;  // [M]
    int64_t n_isects, n_cams, n_splats;  // n_splats = C * N
    int width, height, tile_size, tiles_x, tiles_y, channels;
    double* reach;  // [C * N, 4]: find_reach's output in the forward pass, its input backward
    const S* backgrounds;  // [C, D] composited behind each pixel (its final transmittance times it), or null
    int median_channel;    // the colour channel (a depth) whose median the forward pass also writes, or -1
    bool absgrad;          // the backward pass also sums |d loss / d mean| per pixel (gsplat's absgrad)
};

// Per Gaussian: the half extents (y, x) in pixels of the ellipse where its alpha can still
// reach the threshold, sigma <= log(opacity / threshold) + margin, that level itself (without
// the margin) and exp(-c), Group's decay. Extents are -1 when it reaches no pixel, infinite
// when its conic is degenerate (then whole tiles are visited).
template <typename S>
void find_reach(const Scene<S>& s, int threads) {
    constexpr int64_t kChunk = 4096;
    parallel_for((s.n_splats + kChunk - 1) / kChunk, threads, [&](int64_t chunk) {
        for (int64_t i = chunk * kChunk; i < std::min(s.n_splats, (chunk + 1) * kChunk); ++i) {
            const double a = s.conics[3 * i], b = s.conics[3 * i + 1], c = s.conics[3 * i + 2];
            const double opacity = s.opacities[i];
            double* out = s.reach + 4 * i;
            out[0] = out[1] = out[2] = out[3] = -1.0;
            // alpha = opacity * exp(-sigma) <= opacity: faint Gaussians never pass the threshold.
            if (!(opacity >= static_cast<S>(kAlphaThreshold)) || !std::isfinite(s.means2d[2 * i]) ||
                !std::isfinite(s.means2d[2 * i + 1]))
                continue;
            const double det = a * c - b * b;
            out[2] = std::log(opacity / kAlphaThreshold);
            out[3] = std::exp(std::min(-c, 700.0));
            const double level = out[2] + kReachMargin;
            const bool ellipse = a > 0 && det > 0;
            out[0] = ellipse ? std::sqrt(2.0 * level * a / det) : HUGE_VAL;
            out[1] = ellipse ? std::sqrt(2.0 * level * c / det) : HUGE_VAL;
        }
    });
}

// A tile: its list range and pixel block. Pixel p = row * pitch + column; rows are padded to
// whole lane groups.
template <typename S>
struct Tile {
    int64_t cam, start, end;
    int x0, y0, w, h, pitch, size;

    Tile(const Scene<S>& s, int64_t index) {
        const int64_t tiles = static_cast<int64_t>(s.tiles_x) * s.tiles_y;
        cam = index / tiles;
        const int64_t local = index % tiles;
        start = s.offsets[index];
        end = index + 1 < s.n_cams * tiles ? s.offsets[index + 1] : s.n_isects;
        x0 = static_cast<int>(local % s.tiles_x) * s.tile_size;
        y0 = static_cast<int>(local / s.tiles_x) * s.tile_size;
        w = std::min(s.tile_size, s.width - x0);
        h = std::min(s.tile_size, s.height - y0);
        pitch = (s.tile_size + kLanes - 1) / kLanes * kLanes;
        size = pitch * s.tile_size;
    }

    bool inside(int p) const { return p / pitch < h && p % pitch < w; }
    int64_t pixel(const Scene<S>& s, int p) const {
        return (cam * s.height + y0 + p / pitch) * s.width + x0 + p % pitch;
    }
};

// A Gaussian seen from a tile: its parameters and the rows / columns it can reach.
template <typename S>
struct Splat {
    S mx, my, a, b, c, opacity, level, decay;
    const S* rgb;
    int r0, r1, c0, c1;

    // Starts fetching the data of Gaussian `id` into the cache.
    [[gnu::always_inline]] static void prefetch(const Scene<S>& s, int64_t id) {
        __builtin_prefetch(s.reach + 4 * id);
        __builtin_prefetch(s.means2d + 2 * id);
        __builtin_prefetch(s.conics + 3 * id);
        __builtin_prefetch(s.opacities + id);
        __builtin_prefetch(s.colors + id * s.channels);
    }

    // False when the Gaussian reaches no pixel of the tile.
    [[gnu::always_inline]] bool load(const Scene<S>& s, const Tile<S>& t, int64_t id) {
        const double* reach = s.reach + 4 * id;
        if (reach[0] < 0) return false;
        mx = s.means2d[2 * id];
        my = s.means2d[2 * id + 1];
        const double y = static_cast<double>(my) - t.y0 - 0.5, x = static_cast<double>(mx) - t.x0 - 0.5;
        const double top = std::max(0.0, std::ceil(y - reach[0]));
        const double bottom = std::min(t.h - 1.0, std::floor(y + reach[0]));
        const double left = std::max(0.0, std::ceil(x - reach[1]));
        const double right = std::min(t.w - 1.0, std::floor(x + reach[1]));
        if (top > bottom || left > right) return false;
        r0 = static_cast<int>(top);
        r1 = static_cast<int>(bottom);
        c0 = static_cast<int>(left);
        c1 = static_cast<int>(right);
        a = s.conics[3 * id];
        b = s.conics[3 * id + 1];
        c = s.conics[3 * id + 2];
        opacity = s.opacities[id];
        level = static_cast<S>(reach[2]);
        decay = static_cast<S>(reach[3]);
        rgb = s.colors + id * s.channels;
        return true;
    }
};

// A Gaussian over one lane group of a tile: per-lane terms hoisted out of the row loop, with
// sigma = ax + bx * dy + c * dy^2 / 2 for dy = my - (pixel row centre).
//
// exp(-sigma) is either evaluated afresh on every row or, when `stepping`, advanced from row to
// row by two multiplications: going down a row changes sigma by a linear term (`step`) whose
// own change is the constant c (`decay` = exp(-c)). That is safe when sigma stays below
// kStepSigmaMax over the rows and columns the Gaussian can reach (for a positive definite conic
// it is convex, so checking the corners suffices): every factor then stays a normal float.
// Lanes outside those columns cannot pass the alpha threshold and carry zeros.
template <typename S>
struct Group {
    static constexpr double kStepSigmaMax = 75.0;
    alignas(64) S dx[kLanes], ax[kLanes], bx[kLanes], adx[kLanes], half_dx2[kLanes];
    alignas(64) S vis[kLanes], step[kLanes];
    S decay;
    int first;   // tile column of lane 0
    int lo, hi;  // the lanes the Gaussian can reach (the others cannot pass the alpha threshold)
    bool stepping;

    // False when the Gaussian reaches no column of the group. Fills the lanes of the kWidth-lane
    // registers that hold lanes lo..hi (the others are never read); dx, adx and half_dx2 only for
    // the backward pass.
    template <int kWidth, bool kBackward>
    [[gnu::always_inline]] bool set(const Splat<S>& g, const Tile<S>& t, int group) {
        first = group * kLanes;
        lo = std::max(g.c0, first) - first;
        hi = std::min(g.c1, first + kLanes - 1) - first;
        if (lo > hi) return false;
        const S x_first = static_cast<S>(t.x0 + first) + S(0.5);
        const int from = lo - lo % kWidth;
        for (int part = from; part <= hi; part += kWidth) {
#pragma omp simd
            for (int l = part; l < part + kWidth; ++l) {
                const S d = g.mx - (x_first + static_cast<S>(l)), half_d2 = S(0.5) * d * d;
                if constexpr (kBackward) {
                    dx[l] = d;
                    adx[l] = g.a * d;
                    half_dx2[l] = half_d2;
                }
                ax[l] = g.a * half_d2;
                bx[l] = g.b * d;
            }
        }
        const double dy0 = static_cast<double>(g.my) - (t.y0 + g.r0 + 0.5), dy1 = dy0 - (g.r1 - g.r0);
        const double dx_lo = static_cast<double>(g.mx) - (t.x0 + first + lo + 0.5);
        const double dx_hi = dx_lo - (hi - lo);
        auto sigma = [&](double u, double v) { return 0.5 * (g.a * u * u + g.c * v * v) + g.b * u * v; };
        const bool convex = g.a > 0 && static_cast<double>(g.a) * g.c - static_cast<double>(g.b) * g.b > 0;
        stepping = convex && g.c <= kStepSigmaMax &&
                   std::max(std::max(sigma(dx_lo, dy0), sigma(dx_hi, dy0)),
                            std::max(sigma(dx_lo, dy1), sigma(dx_hi, dy1))) <= kStepSigmaMax;
        if (!stepping) return true;
        const S dy = static_cast<S>(dy0), cy = S(0.5) * g.c * dy * dy, slope = g.c * dy - S(0.5) * g.c;
        for (int part = from; part <= hi; part += kWidth) {
#pragma omp simd
            for (int l = part; l < part + kWidth; ++l) {
                const S in = static_cast<S>((l >= lo) & (l <= hi));
                vis[l] = in * exp_clamped(-(ax[l] + bx[l] * dy + cy));
                step[l] = in * exp_clamped(bx[l] + slope);
            }
        }
        decay = g.decay;
        return true;
    }
};

// Per-thread pixel planes of a tile in one block, reused across tiles. Plane i starts at
// i * stride bytes; stride is a plane's size plus kPlaneGap. Planes a multiple of 4 KiB apart
// would give a pixel the same low 12 address bits in each of them, and CPUs take a load as
// waiting on an earlier store whose low 12 bits match (4K aliasing), which stalls the row loops.
class Planes {
  public:
    static constexpr size_t kPlaneGap = 128;

    // Room for `count` planes of `bytes` bytes each.
    void reserve(int count, size_t bytes) {
        stride_ = (bytes + kPlaneGap + 63) / 64 * 64;
        const size_t need = stride_ * count + 64;
        if (block_.size() < need) block_.resize(need);
    }
    size_t stride() const { return stride_; }
    template <typename T>
    T* plane(int i) {
        const uintptr_t base = (reinterpret_cast<uintptr_t>(block_.data()) + 63) & ~uintptr_t{63};
        return reinterpret_cast<T*>(base + i * stride_);
    }

  private:
    std::vector<unsigned char> block_;
    size_t stride_ = 0;
};

inline Planes& planes() {
    thread_local Planes p;
    return p;
}

// Forward state of a tile's pixels.
template <typename S>
struct ForwardPixels {
    S* __restrict trans;
    S* __restrict color;  // D planes of n pixels
    int32_t* __restrict stop;  // the list entry where the pixel reached the transmittance floor, or kNeverStopped
    S* __restrict median;  // channel median_channel of the last contributor with transmittance > 0.5 in front, or null
    int median_channel;
    size_t n;
};

// Backward state of a tile's pixels.
template <typename S>
struct BackwardPixels {
    S* __restrict trans;
    S* __restrict v_trans;
    S* __restrict v_color;  // D planes of n pixels
    S* __restrict behind;   // D planes: colour composited behind the current Gaussian
    int32_t* __restrict last;  // no entry after it reaches the pixel (at or after its last contributor)
    size_t n;
};

// The tile kernels, compiled once per instruction set with vectors of its register width.
#define SPLAT_KERNELS "composite_tile.inc"
#include "isa_variants.inc"
#undef SPLAT_KERNELS

// A forward and a backward tile kernel.
template <typename S>
struct Kernels {
    void (*forward)(const Scene<S>&, int64_t, S*, S*, int32_t*, S*);
    void (*backward)(const Scene<S>&, int64_t, const S*, const int32_t*, const S*, const S*, S*);
};

template <int kD>
Kernels<float> float_kernels() {
    switch (splat::active_isa()) {
#if SPLAT_X86_VARIANTS
        case splat::Isa::kAvx512: return {avx512::forward_tile<kD, float>, avx512::backward_tile<kD, float>};
        case splat::Isa::kAvx2: return {avx2::forward_tile<kD, float>, avx2::backward_tile<kD, float>};
#endif
        default: return {baseline::forward_tile<kD, float>, baseline::backward_tile<kD, float>};
    }
}

// float with 3, 4 or 8 channels (the renderer's cases: colour, depth, and the geometry channels
// padded to 8) runs the widest build; float64 (used to check gradients) and other channel counts
// run the baseline build.
template <typename S>
Kernels<S> kernels(int channels) {
    if constexpr (std::is_same_v<S, float>) {
        if (channels == 3) return float_kernels<3>();
        if (channels == 4) return float_kernels<4>();
        if (channels == 8) return float_kernels<8>();
    }
    return {baseline::forward_tile<0, S>, baseline::backward_tile<0, S>};
}

template <typename S>
void composite_forward(const Scene<S>& s, int threads, S* render, S* trans, int32_t* last, S* median) {
    find_reach(s, threads);
    const Kernels<S> run = kernels<S>(s.channels);
    parallel_for(s.n_cams * s.tiles_x * s.tiles_y, threads,
                 [&](int64_t index) { run.forward(s, index, render, trans, last, median); });
}

// Per-intersection gradient rows, then summed per Gaussian into the gradient outputs (which
// are cleared first); grad_abs [C * N, 2] is written when s.absgrad.
template <typename S>
void composite_backward(const Scene<S>& s, int threads, const S* trans, const int32_t* last,
                        const S* grad_render, const S* grad_trans, S* grad_isect, S* grad_means2d,
                        S* grad_conics, S* grad_opacities, S* grad_colors, S* grad_abs) {
    const int D = s.channels, row = 6 + D + (s.absgrad ? 2 : 0);
    const Kernels<S> run = kernels<S>(s.channels);
    parallel_for(s.n_cams * s.tiles_x * s.tiles_y, threads, [&](int64_t index) {
        run.backward(s, index, trans, last, grad_render, grad_trans, grad_isect);
    });
    std::fill(grad_means2d, grad_means2d + 2 * s.n_splats, S(0));
    std::fill(grad_conics, grad_conics + 3 * s.n_splats, S(0));
    std::fill(grad_opacities, grad_opacities + s.n_splats, S(0));
    std::fill(grad_colors, grad_colors + D * s.n_splats, S(0));
    if (s.absgrad) std::fill(grad_abs, grad_abs + 2 * s.n_splats, S(0));
    for (int64_t k = 0; k < s.n_isects; ++k) {
        const int64_t id = s.flatten_ids[k];
        const S* g = grad_isect + k * row;
        grad_means2d[2 * id] += g[0];
        grad_means2d[2 * id + 1] += g[1];
        for (int j = 0; j < 3; ++j) grad_conics[3 * id + j] += g[2 + j];
        grad_opacities[id] += g[5];
        for (int d = 0; d < D; ++d) grad_colors[id * D + d] += g[6 + d];
        if (s.absgrad) {
            grad_abs[2 * id] += g[6 + D];
            grad_abs[2 * id + 1] += g[7 + D];
        }
    }
}

}  // namespace

#define SPLAT_EXPORTS(S, SUFFIX)                                                                   \
    extern "C" int64_t splat_bin_count_##SUFFIX(                                                  \
        const S* means2d, const int32_t* radii, const S* conics, const S* opacities, int64_t n_cams,   \
        int64_t n_gauss, int tile_size, int tiles_x, int tiles_y, int width, int height, int threads,  \
        int32_t* tiles_per_gauss, int32_t* rects, uint64_t* masks) {                                   \
        return bin_count(means2d, radii, conics, opacities, n_cams, n_gauss, tile_size, tiles_x,       \
                         tiles_y, width, height, threads, tiles_per_gauss, rects, masks);              \
    }                                                                                                  \
    extern "C" void splat_bin_fill_##SUFFIX(                                                           \
        const float* depths, const S* means2d, const S* conics, const S* opacities, int64_t n_cams,    \
        int64_t n_gauss, int tile_size, int tiles_x, int tiles_y, int width, int height, int threads,  \
        const int32_t* tiles_per_gauss, const int32_t* rects, const uint64_t* masks,                   \
        int64_t* isect_ids, int32_t* flatten_ids, int32_t* offsets) {                                  \
        bin_fill(depths, means2d, conics, opacities, n_cams, n_gauss, tile_size, tiles_x, tiles_y,     \
                 width, height, threads, tiles_per_gauss, rects, masks, isect_ids, flatten_ids,        \
                 offsets);                                                                             \
    }                                                                                                  \
    extern "C" void splat_forward_##SUFFIX(                                                        \
        const S* means2d, const S* conics, const S* opacities, const S* colors,                    \
        const int32_t* offsets, const int32_t* flatten_ids, int64_t n_isects, int64_t n_cams,      \
        int64_t n_splats,                                                                          \
        int width, int height, int tile_size, int tiles_x, int tiles_y, int channels, int threads, \
        double* reach, const S* backgrounds, S* render, S* trans, int32_t* last,                   \
        int median_channel, S* median) {                                                           \
        const Scene<S> s{means2d, conics, opacities, colors, offsets, flatten_ids, n_isects,       \
                         n_cams, n_splats, width, height, tile_size, tiles_x, tiles_y, channels,   \
                         reach, backgrounds, median_channel, false};                               \
        composite_forward(s, threads, render, trans, last, median);                                \
    }                                                                                              \
    extern "C" void splat_backward_##SUFFIX(                                                       \
        const S* means2d, const S* conics, const S* opacities, const S* colors,                    \
        const int32_t* offsets, const int32_t* flatten_ids, int64_t n_isects, int64_t n_cams,      \
        int64_t n_splats,                                                                          \
        int width, int height, int tile_size, int tiles_x, int tiles_y, int channels, int threads, \
        double* reach, const S* backgrounds, const S* trans, const int32_t* last,                  \
        const S* grad_render, const S* grad_trans, S* grad_isect, S* grad_means2d,                 \
        S* grad_conics, S* grad_opacities, S* grad_colors, S* grad_abs) {                          \
        const Scene<S> s{means2d, conics, opacities, colors, offsets, flatten_ids, n_isects,       \
                         n_cams, n_splats, width, height, tile_size, tiles_x, tiles_y, channels,   \
                         reach, backgrounds, -1, grad_abs != nullptr};                             \
        composite_backward(s, threads, trans, last, grad_render, grad_trans, grad_isect,           \
                           grad_means2d, grad_conics, grad_opacities, grad_colors, grad_abs);      \
    }

SPLAT_EXPORTS(float, f32)
SPLAT_EXPORTS(double, f64)

// The widest instruction set the compositing kernels can use here (0 baseline, 1 AVX2 + FMA,
// 2 AVX-512).
extern "C" int splat_widest_isa() { return static_cast<int>(splat::widest_isa()); }

// Runs the compositing kernels with instruction set `isa` (-1: the widest); returns the set now
// in use, or -1 (and changes nothing) when this CPU does not run `isa`.
extern "C" int splat_use_isa(int isa) {
    if (isa > static_cast<int>(splat::widest_isa())) return -1;
    splat::chosen_isa.store(isa < 0 ? -1 : isa);
    return static_cast<int>(splat::active_isa());
}

// Per-Gaussian work of the CPU rasterizer, forward and backward: EWA projection into pinhole
// cameras and spherical-harmonics colours. The formulas are those of the PyTorch backend
// (splattrain/render/torch_rasterizer.py: project) and of gsplat's SH evaluation
// (splattrain/render/torch_renderer.py: sh_colors), computed per Gaussian in one pass instead
// of a few dozen whole-tensor operations; SH colours are evaluated 16 Gaussians at a time, so
// those loops vectorise. Gradients reach means, quats, scales, opacities and
// SH coefficients; cameras get none. Work is split over Gaussians, each thread summing the
// cameras of its own Gaussians, so results do not depend on the thread count.

#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "common.h"

namespace {

using splat::kAlphaThreshold;
using splat::parallel_for;

constexpr double kRadiusExtent = 3.33;
constexpr double kNormEps = 1e-12;  // F.normalize's eps
constexpr double kDetMin = 1e-10;
constexpr int64_t kChunk = 512;  // Gaussians per work item

// Splits [0, n) into chunks of kChunk run on `threads` threads; body(begin, end).
template <typename F>
void for_ranges(int64_t n, int threads, F&& body) {
    parallel_for((n + kChunk - 1) / kChunk, threads,
                 [&](int64_t chunk) { body(chunk * kChunk, std::min(n, (chunk + 1) * kChunk)); });
}

// Camera inputs of the projection.
template <typename S>
struct Camera {
    S R[3][3], t[3], K[2][3];
    S fx, fy, cx, cy;

    Camera(const S* viewmat, const S* Ks) {
        for (int i = 0; i < 3; ++i) {
            for (int j = 0; j < 3; ++j) R[i][j] = viewmat[4 * i + j];
            t[i] = viewmat[4 * i + 3];
        }
        for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 3; ++j) K[i][j] = Ks[3 * i + j];
        fx = Ks[0];
        fy = Ks[4];
        cx = Ks[2];
        cy = Ks[5];
    }
};

struct Options {
    int width, height;
    double near_plane, far_plane, eps2d;
    bool antialiased;
};

// The projection and SH kernels, compiled once per instruction set with vectors of its register
// width (project_lanes.inc, which includes sh_lanes.inc).
#define SPLAT_KERNELS "project_lanes.inc"
#include "isa_variants.inc"
#undef SPLAT_KERNELS

// The forward and backward range kernels of the active instruction set (float64, used to check
// gradients, runs the baseline build).
template <typename S>
struct ProjectKernels {
    void (*forward)(const S*, const S*, const S*, const S*, const Camera<S>*, int64_t, int64_t, const Options&,
                    int64_t, int64_t, int32_t*, S*, S*, S*, S*);
    void (*backward)(const S*, const S*, const S*, const S*, const Camera<S>*, int64_t, int64_t, const Options&,
                     int64_t, int64_t, const S*, const S*, const S*, const S*, S*, S*, S*, S*);
};

template <typename S>
ProjectKernels<S> project_kernels() {
    if constexpr (std::is_same_v<S, float>) {
        switch (splat::active_isa()) {
#if SPLAT_X86_VARIANTS
            case splat::Isa::kAvx512:
                return {avx512::project_forward_range<S>, avx512::project_backward_range<S>};
            case splat::Isa::kAvx2:
                return {avx2::project_forward_range<S>, avx2::project_backward_range<S>};
#endif
            default: break;
        }
    }
    return {baseline::project_forward_range<S>, baseline::project_backward_range<S>};
}

template <typename S>
void project_forward(const S* means, const S* quats, const S* scales, const S* opacities,
                     const S* viewmats, const S* Ks, int64_t n_cams, int64_t n_gauss, const Options& o,
                     int threads, int32_t* radii, S* means2d, S* depths, S* conics, S* opacities_out) {
    std::vector<Camera<S>> cams;
    for (int64_t c = 0; c < n_cams; ++c) cams.emplace_back(viewmats + 16 * c, Ks + 9 * c);
    const auto run = project_kernels<S>().forward;
    for_ranges(n_gauss, threads, [&](int64_t begin, int64_t end) {
        run(means, quats, scales, opacities, cams.data(), n_cams, n_gauss, o, begin, end, radii, means2d, depths,
            conics, opacities_out);
    });
}

// Writes every gradient output (no need to clear them first).
template <typename S>
void project_backward(const S* means, const S* quats, const S* scales, const S* opacities,
                      const S* viewmats, const S* Ks, int64_t n_cams, int64_t n_gauss, const Options& o,
                      int threads, const S* g_means2d, const S* g_depths, const S* g_conics,
                      const S* g_opacities_out, S* g_means, S* g_quats, S* g_scales, S* g_opacities) {
    std::vector<Camera<S>> cams;
    for (int64_t c = 0; c < n_cams; ++c) cams.emplace_back(viewmats + 16 * c, Ks + 9 * c);
    const auto run = project_kernels<S>().backward;
    for_ranges(n_gauss, threads, [&](int64_t begin, int64_t end) {
        run(means, quats, scales, opacities, cams.data(), n_cams, n_gauss, o, begin, end, g_means2d, g_depths,
            g_conics, g_opacities_out, g_means, g_quats, g_scales, g_opacities);
    });
}

template <typename S>
std::vector<S> camera_positions(const S* viewmats, int64_t n_cams) {
    std::vector<S> campos(3 * n_cams);
    for (int64_t c = 0; c < n_cams; ++c) {
        const S* v = viewmats + 16 * c;
        for (int i = 0; i < 3; ++i) campos[3 * c + i] = -(v[i] * v[3] + v[4 + i] * v[7] + v[8 + i] * v[11]);
    }
    return campos;
}

// The SH range kernels of the active instruction set (float64 runs the baseline build).
template <typename S>
struct ShKernels {
    void (*forward)(const S*, const S*, const S*, int64_t, const S*, int64_t, int64_t, int, S*);
    void (*backward)(const S*, const S*, const S*, int64_t, const S*, int64_t, int64_t, int, const S*, bool, S*,
                     S*, S*);
};

template <typename S>
ShKernels<S> sh_kernels() {
    if constexpr (std::is_same_v<S, float>) {
        switch (splat::active_isa()) {
#if SPLAT_X86_VARIANTS
            case splat::Isa::kAvx512: return {avx512::sh_forward_range<S>, avx512::sh_backward_range<S>};
            case splat::Isa::kAvx2: return {avx2::sh_forward_range<S>, avx2::sh_backward_range<S>};
#endif
            default: break;
        }
    }
    return {baseline::sh_forward_range<S>, baseline::sh_backward_range<S>};
}

template <typename S>
void sh_forward(const S* means, const S* sh0, const S* shN, int64_t rest, const S* viewmats,
                int64_t n_cams, int64_t n_gauss, int degree, int threads, S* colors) {
    const std::vector<S> campos = camera_positions(viewmats, n_cams);
    const auto run = sh_kernels<S>().forward;
    for_ranges(n_gauss, threads, [&](int64_t begin, int64_t end) {
        for (int64_t c = 0; c < n_cams; ++c)
            run(means, sh0, shN, rest, campos.data() + 3 * c, begin, end, degree, colors + 3 * c * n_gauss);
    });
}

// Writes every gradient output (no need to clear them first).
template <typename S>
void sh_backward(const S* means, const S* sh0, const S* shN, int64_t rest, const S* viewmats,
                 int64_t n_cams, int64_t n_gauss, int degree, int threads, const S* g_colors,
                 S* g_means, S* g_sh0, S* g_shN) {
    if (n_cams == 0) {
        std::fill(g_means, g_means + 3 * n_gauss, S(0));
        std::fill(g_sh0, g_sh0 + 3 * n_gauss, S(0));
        std::fill(g_shN, g_shN + 3 * rest * n_gauss, S(0));
        return;
    }
    const std::vector<S> campos = camera_positions(viewmats, n_cams);
    const auto run = sh_kernels<S>().backward;
    for_ranges(n_gauss, threads, [&](int64_t begin, int64_t end) {
        for (int64_t c = 0; c < n_cams; ++c)
            run(means, sh0, shN, rest, campos.data() + 3 * c, begin, end, degree, g_colors + 3 * c * n_gauss, c == 0,
                g_means, g_sh0, g_shN);
    });
}

}  // namespace

#define SPLAT_PROJECT_EXPORTS(S, SUFFIX)                                                           \
    extern "C" void splat_project_forward_##SUFFIX(                                               \
        const S* means, const S* quats, const S* scales, const S* opacities, const S* viewmats,    \
        const S* Ks, int64_t n_cams, int64_t n_gauss, int width, int height, double near_plane,    \
        double far_plane, double eps2d, int antialiased, int threads, int32_t* radii, S* means2d,  \
        S* depths, S* conics, S* opacities_out) {                                                  \
        const Options o{width, height, near_plane, far_plane, eps2d, antialiased != 0};           \
        project_forward(means, quats, scales, opacities, viewmats, Ks, n_cams, n_gauss, o,        \
                        threads, radii, means2d, depths, conics, opacities_out);                   \
    }                                                                                              \
    extern "C" void splat_project_backward_##SUFFIX(                                              \
        const S* means, const S* quats, const S* scales, const S* opacities, const S* viewmats,    \
        const S* Ks, int64_t n_cams, int64_t n_gauss, int width, int height, double near_plane,    \
        double far_plane, double eps2d, int antialiased, int threads, const S* g_means2d,          \
        const S* g_depths, const S* g_conics, const S* g_opacities_out, S* g_means, S* g_quats,    \
        S* g_scales, S* g_opacities) {                                                             \
        const Options o{width, height, near_plane, far_plane, eps2d, antialiased != 0};           \
        project_backward(means, quats, scales, opacities, viewmats, Ks, n_cams, n_gauss, o,       \
                         threads, g_means2d, g_depths, g_conics, g_opacities_out, g_means,        \
                         g_quats, g_scales, g_opacities);                                          \
    }                                                                                              \
    extern "C" void splat_sh_forward_##SUFFIX(const S* means, const S* sh0, const S* shN,         \
                                              int64_t rest, const S* viewmats, int64_t n_cams,    \
                                              int64_t n_gauss, int degree, int threads,           \
                                              S* colors) {                                         \
        sh_forward(means, sh0, shN, rest, viewmats, n_cams, n_gauss, degree, threads, colors);    \
    }                                                                                              \
    extern "C" void splat_sh_backward_##SUFFIX(                                                    \
        const S* means, const S* sh0, const S* shN, int64_t rest, const S* viewmats,               \
        int64_t n_cams, int64_t n_gauss, int degree, int threads, const S* g_colors, S* g_means,   \
        S* g_sh0, S* g_shN) {                                                                      \
        sh_backward(means, sh0, shN, rest, viewmats, n_cams, n_gauss, degree, threads, g_colors,  \
                    g_means, g_sh0, g_shN);                                                        \
    }

SPLAT_PROJECT_EXPORTS(float, f32)
SPLAT_PROJECT_EXPORTS(double, f64)

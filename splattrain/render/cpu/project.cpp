// Per-Gaussian work of the CPU rasterizer, forward and backward: EWA projection into pinhole
// cameras and spherical-harmonics colours. The formulas are those of the PyTorch backend
// (splattrain/render/torch_rasterizer.py: project) and of gsplat's SH evaluation
// (splattrain/render/torch_renderer.py: sh_colors), computed per Gaussian in one pass instead
// of a few dozen whole-tensor operations; SH colours are evaluated 16 Gaussians at a time, so
// those loops vectorise. Gradients reach means, quats, scales, opacities and
// SH coefficients; cameras get none. Work is split over Gaussians, each thread summing the
// cameras of its own Gaussians, so results do not depend on the thread count.

#include <cmath>
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

// for_ranges, with body(i) called for each index.
template <typename F>
void for_chunks(int64_t n, int threads, F&& body) {
    for_ranges(n, threads, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) body(i);
    });
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

// One Gaussian in one camera: the forward values and the intermediates its VJP needs.
template <typename S>
struct Projection {
    // inputs
    S q[4], qn[4], qnorm, s[3], opacity;
    // rotation-scale and camera space
    S Rq[3][3], cam_m[3][3], p[3], z;
    bool in_depth, clamp_x, clamp_y;
    S bound_x, bound_y, tx, ty;
    // Jacobian rows times cam_m, and the 2D covariance
    S jx[3], jy[3], xx0, xy, yy0, xx, yy, det_orig, det_raw, det, comp, ratio;
    // outputs
    S means2d[2], conic[3], opacity_out;

    Projection(const S* mean, const S* quat, const S* scale, S opac, const Camera<S>& cam,
               const Options& o) {
        for (int i = 0; i < 4; ++i) q[i] = quat[i];
        qnorm = std::sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
        const S inv = S(1) / std::max(qnorm, S(kNormEps));
        for (int i = 0; i < 4; ++i) qn[i] = q[i] * inv;
        for (int i = 0; i < 3; ++i) s[i] = scale[i];
        opacity = opac;
        const S w = qn[0], x = qn[1], y = qn[2], zq = qn[3];
        const S r[3][3] = {
            {1 - 2 * (y * y + zq * zq), 2 * (x * y - w * zq), 2 * (x * zq + w * y)},
            {2 * (x * y + w * zq), 1 - 2 * (x * x + zq * zq), 2 * (y * zq - w * x)},
            {2 * (x * zq - w * y), 2 * (y * zq + w * x), 1 - 2 * (x * x + y * y)},
        };
        for (int i = 0; i < 3; ++i)
            for (int j = 0; j < 3; ++j) Rq[i][j] = r[i][j];
        for (int i = 0; i < 3; ++i) {
            p[i] = cam.R[i][0] * mean[0] + cam.R[i][1] * mean[1] + cam.R[i][2] * mean[2] + cam.t[i];
            for (int j = 0; j < 3; ++j)
                cam_m[i][j] = (cam.R[i][0] * Rq[0][j] + cam.R[i][1] * Rq[1][j] + cam.R[i][2] * Rq[2][j]) * s[j];
        }
        in_depth = p[2] > S(o.near_plane) && p[2] < S(o.far_plane);
        z = in_depth ? p[2] : S(1);
        const S inv_z = S(1) / z;
        // gsplat evaluates the Jacobian at the centre clamped to 1.3x the field of view
        const S lim_x = S(0.15 * o.width) / cam.fx, lim_y = S(0.15 * o.height) / cam.fy;
        tx = clamp_ratio(p[0] * inv_z, -(cam.cx / cam.fx + lim_x), (S(o.width) - cam.cx) / cam.fx + lim_x,
                         clamp_x, bound_x) * z;
        ty = clamp_ratio(p[1] * inv_z, -(cam.cy / cam.fy + lim_y), (S(o.height) - cam.cy) / cam.fy + lim_y,
                         clamp_y, bound_y) * z;
        for (int j = 0; j < 3; ++j) {
            jx[j] = (cam.fx * inv_z) * (cam_m[0][j] - (tx * inv_z) * cam_m[2][j]);
            jy[j] = (cam.fy * inv_z) * (cam_m[1][j] - (ty * inv_z) * cam_m[2][j]);
        }
        xx0 = jx[0] * jx[0] + jx[1] * jx[1] + jx[2] * jx[2];
        xy = jx[0] * jy[0] + jx[1] * jy[1] + jx[2] * jy[2];
        yy0 = jy[0] * jy[0] + jy[1] * jy[1] + jy[2] * jy[2];
        det_orig = xx0 * yy0 - xy * xy;
        xx = xx0 + S(o.eps2d);
        yy = yy0 + S(o.eps2d);
        det_raw = xx * yy - xy * xy;
        det = std::max(det_raw, S(kDetMin));
        const S inv_det = S(1) / det;
        conic[0] = yy * inv_det;
        conic[1] = -xy * inv_det;
        conic[2] = xx * inv_det;
        for (int i = 0; i < 2; ++i)
            means2d[i] = (cam.K[i][0] * p[0] + cam.K[i][1] * p[1] + cam.K[i][2] * p[2]) * inv_z;
        ratio = det_orig / det;
        comp = o.antialiased ? std::sqrt(std::max(ratio, S(0))) : S(1);
        opacity_out = opacity * comp;
    }

    static S clamp_ratio(S value, S lo, S hi, bool& clamped, S& bound) {
        clamped = value < lo || value > hi;
        bound = value < lo ? lo : hi;
        return clamped ? bound : value;
    }

    // Opacity-aware bounding radii (x, y) in pixels, 0 when culled.
    void radii(const Options& o, int32_t* out) const {
        const S threshold = S(kAlphaThreshold);
        const S extent = std::min(std::sqrt(S(2) * std::log(std::max(opacity_out, threshold) / threshold)),
                                  S(kRadiusExtent));
        const S rx = std::ceil(extent * std::sqrt(xx)), ry = std::ceil(extent * std::sqrt(yy));
        const bool keep = in_depth && det_raw > S(0) && opacity_out >= threshold && rx > 0 && ry > 0 &&
                          means2d[0] + rx > 0 && means2d[1] + ry > 0 && means2d[0] - rx < S(o.width) &&
                          means2d[1] - ry < S(o.height);
        out[0] = keep ? static_cast<int32_t>(rx) : 0;
        out[1] = keep ? static_cast<int32_t>(ry) : 0;
    }

    // Adds the gradients of (means2d, depth, conic, opacity_out) to the mean, quat, scale and
    // opacity gradients.
    void vjp(const Camera<S>& cam, const Options& o, const S* g_m2, S g_depth, const S* g_conic,
             S g_opacity_out, S* g_mean, S* g_quat, S* g_scale, S* g_opacity) const {
        *g_opacity += g_opacity_out * comp;
        // reciprocals once: multiplications are far cheaper than divisions
        const S inv_det = S(1) / det, inv_z = S(1) / z, inv_z2 = inv_z * inv_z;
        S g_det = 0, g_det_orig = 0, g_xx = 0, g_yy = 0, g_xy = 0;
        if (o.antialiased && ratio > S(0)) {
            const S g_ratio = g_opacity_out * opacity * S(0.5) / comp;
            g_det_orig += g_ratio * inv_det;
            g_det -= g_ratio * ratio * inv_det;
        }
        g_yy += g_conic[0] * inv_det;
        g_xy -= g_conic[1] * inv_det;
        g_xx += g_conic[2] * inv_det;
        g_det -= (g_conic[0] * conic[0] + g_conic[1] * conic[1] + g_conic[2] * conic[2]) * inv_det;
        if (det_raw >= S(kDetMin)) {  // else det was clamped
            g_xx += g_det * yy;
            g_yy += g_det * xx;
            g_xy -= S(2) * g_det * xy;
        }
        g_xx += g_det_orig * yy0;
        g_yy += g_det_orig * xx0;
        g_xy -= S(2) * g_det_orig * xy;

        S g_p[3] = {0, 0, 0}, g_z = 0, g_tx = 0, g_ty = 0, g_cam_m[3][3] = {};
        for (int j = 0; j < 3; ++j) {
            const S g_jx = S(2) * g_xx * jx[j] + g_xy * jy[j];
            const S g_jy = S(2) * g_yy * jy[j] + g_xy * jx[j];
            // jx = fx / z * (cam_m0 - tx / z * cam_m2), jy likewise with fy, cam_m1, ty
            g_cam_m[0][j] += g_jx * cam.fx * inv_z;
            g_cam_m[1][j] += g_jy * cam.fy * inv_z;
            g_cam_m[2][j] -= (g_jx * cam.fx * tx + g_jy * cam.fy * ty) * inv_z2;
            g_tx -= g_jx * cam.fx * cam_m[2][j] * inv_z2;
            g_ty -= g_jy * cam.fy * cam_m[2][j] * inv_z2;
            g_z -= (g_jx * jx[j] + g_jy * jy[j]) * inv_z;
            g_z += (g_jx * cam.fx * tx + g_jy * cam.fy * ty) * cam_m[2][j] * inv_z2 * inv_z;
        }
        // tx = z * clamp(x / z): d/dx = 1 inside the clamp; d/dz = the bound when clamped
        if (clamp_x) g_z += g_tx * bound_x; else g_p[0] += g_tx;
        if (clamp_y) g_z += g_ty * bound_y; else g_p[1] += g_ty;
        for (int i = 0; i < 2; ++i) {
            for (int j = 0; j < 3; ++j) g_p[j] += g_m2[i] * cam.K[i][j] * inv_z;
            g_z -= g_m2[i] * means2d[i] * inv_z;
        }
        if (in_depth) g_p[2] += g_z;
        g_p[2] += g_depth;
        for (int j = 0; j < 3; ++j) g_mean[j] += cam.R[0][j] * g_p[0] + cam.R[1][j] * g_p[1] + cam.R[2][j] * g_p[2];

        // cam_m = R_cam @ Rq @ diag(s)
        S g_rq[3][3];
        for (int i = 0; i < 3; ++i) {
            for (int j = 0; j < 3; ++j) {
                const S g_m = cam.R[0][i] * g_cam_m[0][j] + cam.R[1][i] * g_cam_m[1][j] + cam.R[2][i] * g_cam_m[2][j];
                g_scale[j] += g_m * Rq[i][j];
                g_rq[i][j] = g_m * s[j];
            }
        }
        const S w = qn[0], x = qn[1], y = qn[2], zq = qn[3];
        const S g_qn[4] = {
            2 * (x * (g_rq[2][1] - g_rq[1][2]) + y * (g_rq[0][2] - g_rq[2][0]) + zq * (g_rq[1][0] - g_rq[0][1])),
            2 * (-2 * x * (g_rq[1][1] + g_rq[2][2]) + y * (g_rq[1][0] + g_rq[0][1]) + zq * (g_rq[2][0] + g_rq[0][2]) +
                 w * (g_rq[2][1] - g_rq[1][2])),
            2 * (x * (g_rq[1][0] + g_rq[0][1]) - 2 * y * (g_rq[0][0] + g_rq[2][2]) + zq * (g_rq[2][1] + g_rq[1][2]) +
                 w * (g_rq[0][2] - g_rq[2][0])),
            2 * (x * (g_rq[2][0] + g_rq[0][2]) + y * (g_rq[2][1] + g_rq[1][2]) - 2 * zq * (g_rq[0][0] + g_rq[1][1]) +
                 w * (g_rq[1][0] - g_rq[0][1])),
        };
        // qn = q / max(|q|, eps)
        if (qnorm > S(kNormEps)) {
            const S dot = qn[0] * g_qn[0] + qn[1] * g_qn[1] + qn[2] * g_qn[2] + qn[3] * g_qn[3];
            const S inv_norm = S(1) / qnorm;
            for (int i = 0; i < 4; ++i) g_quat[i] += (g_qn[i] - qn[i] * dot) * inv_norm;
        } else {
            for (int i = 0; i < 4; ++i) g_quat[i] += g_qn[i] / S(kNormEps);
        }
    }
};

template <typename S>
void project_forward(const S* means, const S* quats, const S* scales, const S* opacities,
                     const S* viewmats, const S* Ks, int64_t n_cams, int64_t n_gauss, const Options& o,
                     int threads, int32_t* radii, S* means2d, S* depths, S* conics, S* opacities_out) {
    std::vector<Camera<S>> cams;
    for (int64_t c = 0; c < n_cams; ++c) cams.emplace_back(viewmats + 16 * c, Ks + 9 * c);
    for_chunks(n_gauss, threads, [&](int64_t n) {
        for (int64_t c = 0; c < n_cams; ++c) {
            const int64_t i = c * n_gauss + n;
            const Projection<S> pr(means + 3 * n, quats + 4 * n, scales + 3 * n, opacities[n], cams[c], o);
            pr.radii(o, radii + 2 * i);
            means2d[2 * i] = pr.means2d[0];
            means2d[2 * i + 1] = pr.means2d[1];
            depths[i] = pr.p[2];
            for (int j = 0; j < 3; ++j) conics[3 * i + j] = pr.conic[j];
            opacities_out[i] = pr.opacity_out;
        }
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
    for_chunks(n_gauss, threads, [&](int64_t n) {
        std::fill(g_means + 3 * n, g_means + 3 * n + 3, S(0));
        std::fill(g_quats + 4 * n, g_quats + 4 * n + 4, S(0));
        std::fill(g_scales + 3 * n, g_scales + 3 * n + 3, S(0));
        g_opacities[n] = S(0);
        for (int64_t c = 0; c < n_cams; ++c) {
            const int64_t i = c * n_gauss + n;
            const Projection<S> pr(means + 3 * n, quats + 4 * n, scales + 3 * n, opacities[n], cams[c], o);
            pr.vjp(cams[c], o, g_means2d + 2 * i, g_depths[i], g_conics + 3 * i, g_opacities_out[i],
                   g_means + 3 * n, g_quats + 4 * n, g_scales + 3 * n, g_opacities + n);
        }
    });
}

// Value and gradient (d/dx, d/dy, d/dz) carried together: evaluating the SH bases on Duals
// gives their derivatives without hand-written formulas.
template <typename S>
struct Dual {
    S v, d[3];
};
template <typename S>
Dual<S> operator+(Dual<S> a, Dual<S> b) { return {a.v + b.v, {a.d[0] + b.d[0], a.d[1] + b.d[1], a.d[2] + b.d[2]}}; }
template <typename S>
Dual<S> operator-(Dual<S> a, Dual<S> b) { return {a.v - b.v, {a.d[0] - b.d[0], a.d[1] - b.d[1], a.d[2] - b.d[2]}}; }
template <typename S>
Dual<S> operator*(Dual<S> a, Dual<S> b) {
    return {a.v * b.v, {a.d[0] * b.v + a.v * b.d[0], a.d[1] * b.v + a.v * b.d[1], a.d[2] * b.v + a.v * b.d[2]}};
}
template <typename S>
Dual<S> operator*(S k, Dual<S> a) { return {k * a.v, {k * a.d[0], k * a.d[1], k * a.d[2]}}; }
template <typename S>
Dual<S> operator+(Dual<S> a, S k) { return {a.v + k, {a.d[0], a.d[1], a.d[2]}}; }
// The constant k in the number type of `like`.
template <typename S>
S lift(S k, S) { return k; }
template <typename S>
Dual<S> lift(S k, Dual<S>) { return {k, {0, 0, 0}}; }

// The first `count` real SH bases at unit direction (x, y, z): gsplat's _eval_sh_bases_fast
// (Sloan, "Efficient Spherical Harmonic Evaluation", JCGT 2013), up to degree 4.
template <typename S, typename T>
[[gnu::always_inline]] inline void sh_bases(int count, T x, T y, T z, T* out, int stride) {
    out[0 * stride] = lift(S(0.2820947917738781), x);
    if (count <= 1) return;
    out[1 * stride] = S(-0.48860251190292) * y;
    out[2 * stride] = S(0.48860251190292) * z;
    out[3 * stride] = S(-0.48860251190292) * x;
    if (count <= 4) return;
    const T z2 = z * z;
    const T fTmpB = S(-1.092548430592079) * z;
    const T fC1 = x * x - y * y;
    const T fS1 = S(2) * (x * y);
    out[6 * stride] = S(0.9461746957575601) * z2 + S(-0.3153915652525201);
    out[7 * stride] = fTmpB * x;
    out[5 * stride] = fTmpB * y;
    out[8 * stride] = S(0.5462742152960395) * fC1;
    out[4 * stride] = S(0.5462742152960395) * fS1;
    if (count <= 9) return;
    const T fTmpC = S(-2.285228997322329) * z2 + S(0.4570457994644658);
    const T fTmpB3 = S(1.445305721320277) * z;
    const T fC2 = x * fC1 - y * fS1;
    const T fS2 = x * fS1 + y * fC1;
    out[12 * stride] = z * (S(1.865881662950577) * z2 + S(-1.119528997770346));
    out[13 * stride] = fTmpC * x;
    out[11 * stride] = fTmpC * y;
    out[14 * stride] = fTmpB3 * fC1;
    out[10 * stride] = fTmpB3 * fS1;
    out[15 * stride] = S(-0.5900435899266435) * fC2;
    out[9 * stride] = S(-0.5900435899266435) * fS2;
    if (count <= 16) return;
    const T fTmpD = z * (S(-4.683325804901025) * z2 + S(2.007139630671868));
    const T fTmpC4 = S(3.31161143515146) * z2 + S(-0.47308734787878);
    const T fTmpB4 = S(-1.770130769779931) * z;
    const T fC3 = x * fC2 - y * fS2;
    const T fS3 = x * fS2 + y * fC2;
    out[20 * stride] = S(1.984313483298443) * (z2 * (S(1.865881662950577) * z2 + S(-1.119528997770346))) +
              S(-1.006230589874905) * (S(0.9461746957575601) * z2 + S(-0.3153915652525201));
    out[21 * stride] = fTmpD * x;
    out[19 * stride] = fTmpD * y;
    out[22 * stride] = fTmpC4 * fC1;
    out[18 * stride] = fTmpC4 * fS1;
    out[23 * stride] = fTmpB4 * fC2;
    out[17 * stride] = fTmpB4 * fS2;
    out[24 * stride] = S(0.6258357354491763) * fC3;
    out[16 * stride] = S(0.6258357354491763) * fS3;
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

// Gaussians evaluated together in the SH passes: the loops over a block vectorise.
constexpr int kBlock = 16;

// Colours of Gaussians [n0, n0 + m) in one camera, kCount bases (a constant, so the bases'
// branches vanish and the loops over the block's lanes vectorise).
template <int kCount, typename S>
[[gnu::always_inline]] inline void sh_forward_block(const S* means, const S* sh0, const S* shN, int64_t rest,
                                                    const S* campos, int64_t n0, int m, S* colors) {
    alignas(64) S bases[kCount][kBlock];
    const S cx = campos[0], cy = campos[1], cz = campos[2];
#pragma omp simd
    for (int l = 0; l < m; ++l) {
        const S* mean = means + 3 * (n0 + l);
        const S dx = mean[0] - cx, dy = mean[1] - cy, dz = mean[2] - cz;
        const S scale = S(1) / std::max(std::sqrt(dx * dx + dy * dy + dz * dz), S(kNormEps));
        sh_bases<S, S>(kCount, dx * scale, dy * scale, dz * scale, &bases[0][l], kBlock);
    }
    for (int ch = 0; ch < 3; ++ch) {
#pragma omp simd
        for (int l = 0; l < m; ++l) {
            const int64_t n = n0 + l;
            S sum = bases[0][l] * sh0[3 * n + ch];
#pragma GCC unroll 24
            for (int k = 1; k < kCount; ++k) sum += bases[k][l] * shN[3 * (n * rest + k - 1) + ch];
            colors[3 * n + ch] = std::max(sum + S(0.5), S(0));
        }
    }
}

// Calls call(K) with the number of bases of `degree` as a constant.
#define SPLAT_BY_DEGREE(degree, call) \
    switch (degree) {                 \
        case 0: call(1); break;       \
        case 1: call(4); break;       \
        case 2: call(9); break;       \
        case 3: call(16); break;      \
        default: call(25);            \
    }

template <typename S>
SPLAT_CLONES void sh_forward_range(const S* means, const S* sh0, const S* shN, int64_t rest, const S* campos,
                      int64_t begin, int64_t end, int degree, S* colors) {
    for (int64_t n0 = begin; n0 < end; n0 += kBlock) {
        const int m = static_cast<int>(std::min<int64_t>(kBlock, end - n0));
#define SPLAT_SH_FORWARD(K) sh_forward_block<K>(means, sh0, shN, rest, campos, n0, m, colors)
        SPLAT_BY_DEGREE(degree, SPLAT_SH_FORWARD)
#undef SPLAT_SH_FORWARD
    }
}

template <typename S>
void sh_forward(const S* means, const S* sh0, const S* shN, int64_t rest, const S* viewmats,
                int64_t n_cams, int64_t n_gauss, int degree, int threads, S* colors) {
    const std::vector<S> campos = camera_positions(viewmats, n_cams);
    for_ranges(n_gauss, threads, [&](int64_t begin, int64_t end) {
        for (int64_t c = 0; c < n_cams; ++c)
            sh_forward_range(means, sh0, shN, rest, campos.data() + 3 * c, begin, end, degree,
                                 colors + 3 * c * n_gauss);
    });
}

// Adds the gradients of Gaussians [n0, n0 + m) in one camera, kCount bases, to g_means, g_sh0
// and g_shN (the SH bases carry their derivatives as Duals, stored [base][lane]).
template <int kCount, typename S>
[[gnu::always_inline]] inline void sh_backward_block(const S* means, const S* sh0, const S* shN, int64_t rest,
                                                     const S* campos, int64_t n0, int m, const S* g_colors,
                                                     S* g_means, S* g_sh0, S* g_shN) {
    alignas(64) Dual<S> bases[kCount][kBlock];
    alignas(64) S unit[3][kBlock], norm[kBlock];
    const S cx = campos[0], cy = campos[1], cz = campos[2];
#pragma omp simd
    for (int l = 0; l < m; ++l) {
        const S* mean = means + 3 * (n0 + l);
        const S dx = mean[0] - cx, dy = mean[1] - cy, dz = mean[2] - cz;
        norm[l] = std::sqrt(dx * dx + dy * dy + dz * dz);
        const S scale = S(1) / std::max(norm[l], S(kNormEps));
        unit[0][l] = dx * scale;
        unit[1][l] = dy * scale;
        unit[2][l] = dz * scale;
        const Dual<S> x{unit[0][l], {1, 0, 0}}, y{unit[1][l], {0, 1, 0}}, z{unit[2][l], {0, 0, 1}};
        sh_bases<S, Dual<S>>(kCount, x, y, z, &bases[0][l], kBlock);
    }
#pragma omp simd
    for (int l = 0; l < m; ++l) {
        const int64_t n = n0 + l;
        S g[3];
#pragma GCC unroll 3
        for (int ch = 0; ch < 3; ++ch) {  // clamp_min(0) passes the gradient where sum + 0.5 >= 0
            S sum = bases[0][l].v * sh0[3 * n + ch];
#pragma GCC unroll 24
            for (int k = 1; k < kCount; ++k) sum += bases[k][l].v * shN[3 * (n * rest + k - 1) + ch];
            const S g_in = g_colors[3 * n + ch];
            g[ch] = sum + S(0.5) >= S(0) ? g_in : S(0);
        }
        S g_unit[3] = {0, 0, 0};
#pragma GCC unroll 25
        for (int k = 0; k < kCount; ++k) {
            const S* cf = k == 0 ? sh0 + 3 * n : shN + 3 * (n * rest + k - 1);
            S* g_cf = k == 0 ? g_sh0 + 3 * n : g_shN + 3 * (n * rest + k - 1);
            S weight = 0;
#pragma GCC unroll 3
            for (int ch = 0; ch < 3; ++ch) {
                g_cf[ch] += bases[k][l].v * g[ch];
                weight += cf[ch] * g[ch];
            }
#pragma GCC unroll 3
            for (int j = 0; j < 3; ++j) g_unit[j] += weight * bases[k][l].d[j];
        }
        // unit = dir / max(|dir|, eps)
        const bool normalised = norm[l] > S(kNormEps);
        const S dot = normalised ? unit[0][l] * g_unit[0] + unit[1][l] * g_unit[1] + unit[2][l] * g_unit[2] : S(0);
        const S inv = S(1) / std::max(norm[l], S(kNormEps));
#pragma GCC unroll 3
        for (int j = 0; j < 3; ++j) g_means[3 * n + j] += (g_unit[j] - unit[j][l] * dot) * inv;
    }
}

template <typename S>
SPLAT_CLONES void sh_backward_range(const S* means, const S* sh0, const S* shN, int64_t rest, const S* campos,
                       int64_t begin, int64_t end, int degree, const S* g_colors, S* g_means, S* g_sh0,
                       S* g_shN) {
    for (int64_t n0 = begin; n0 < end; n0 += kBlock) {
        const int m = static_cast<int>(std::min<int64_t>(kBlock, end - n0));
#define SPLAT_SH_BACKWARD(K) \
    sh_backward_block<K>(means, sh0, shN, rest, campos, n0, m, g_colors, g_means, g_sh0, g_shN)
        SPLAT_BY_DEGREE(degree, SPLAT_SH_BACKWARD)
#undef SPLAT_SH_BACKWARD
    }
}

// Writes every gradient output (no need to clear them first).
template <typename S>
void sh_backward(const S* means, const S* sh0, const S* shN, int64_t rest, const S* viewmats,
                 int64_t n_cams, int64_t n_gauss, int degree, int threads, const S* g_colors,
                 S* g_means, S* g_sh0, S* g_shN) {
    const std::vector<S> campos = camera_positions(viewmats, n_cams);
    for_ranges(n_gauss, threads, [&](int64_t begin, int64_t end) {
        std::fill(g_means + 3 * begin, g_means + 3 * end, S(0));
        std::fill(g_sh0 + 3 * begin, g_sh0 + 3 * end, S(0));
        std::fill(g_shN + 3 * rest * begin, g_shN + 3 * rest * end, S(0));
        for (int64_t c = 0; c < n_cams; ++c)
            sh_backward_range(means, sh0, shN, rest, campos.data() + 3 * c, begin, end, degree,
                                  g_colors + 3 * c * n_gauss, g_means, g_sh0, g_shN);
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

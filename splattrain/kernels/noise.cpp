// MCMC densification's position noise in one pass over the Gaussians: each mean moves by
// Sigma * eps * sigmoid(100 * ((1 - opacity) - 0.995)) * scale, where Sigma = R S S R^T is the
// Gaussian's covariance (R from its normalised quaternion, wxyz; S = diag(exp(log-scales))),
// opacity = sigmoid(its logit) and eps is the caller's standard normal draw. The arithmetic is
// the PyTorch path's (splattrain/strategy/relocation.py) in float: the rotation as
// quat_to_rotmat writes it, R S, then (R S)(R S)^T, then the matrix times the gated draw. Each
// mean is written by one thread, so the result does not depend on the thread count.

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common.h"

namespace {

using splat::parallel_for;

constexpr int64_t kChunk = 4096;  // Gaussians per work item

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

SPLAT_CLONES void noise_range(float* means, const float* quats, const float* log_scales, const float* logits,
                              const float* eps, float scale, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
        const float* q = quats + 4 * i;
        const float norm = std::max(std::sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]), 1e-12f);
        const float w = q[0] / norm, x = q[1] / norm, y = q[2] / norm, z = q[3] / norm;
        const float rot[3][3] = {
            {1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)},
            {2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)},
            {2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)},
        };
        const float s[3] = {std::exp(log_scales[3 * i]), std::exp(log_scales[3 * i + 1]),
                            std::exp(log_scales[3 * i + 2])};
        float factor[3][3];
        for (int r = 0; r < 3; ++r)
            for (int c = 0; c < 3; ++c) factor[r][c] = rot[r][c] * s[c];
        const float gate = sigmoid(100.0f * ((1.0f - sigmoid(logits[i])) - 0.995f));
        const float noise[3] = {eps[3 * i] * gate * scale, eps[3 * i + 1] * gate * scale,
                                eps[3 * i + 2] * gate * scale};
        for (int r = 0; r < 3; ++r) {
            float moved = 0.0f;
            for (int c = 0; c < 3; ++c) {
                const float cov = factor[r][0] * factor[c][0] + factor[r][1] * factor[c][1] + factor[r][2] * factor[c][2];
                moved += cov * noise[c];
            }
            means[3 * i + r] += moved;
        }
    }
}

}  // namespace

// means, quats, log_scales: [n, 3], [n, 4], [n, 3]; logits, eps: [n], [n, 3]; all contiguous float.
extern "C" void splat_mcmc_noise_f32(float* means, const float* quats, const float* log_scales, const float* logits,
                                     const float* eps, int64_t n, float scale, int32_t threads) {
    const int64_t items = (n + kChunk - 1) / kChunk;
    parallel_for(items, threads, [&](int64_t item) {
        noise_range(means, quats, log_scales, logits, eps, scale, item * kChunk, std::min(n, (item + 1) * kChunk));
    });
}

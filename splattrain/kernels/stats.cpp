// The default densification strategy's per-step statistics in one pass: for every (camera,
// Gaussian) seen with both radii > 0, the norm of its image-plane gradient in [-1, 1] screen
// units (times the step's view count) is added to grad2d, 1 to count, and, when max_radii is
// given, its larger radius over the image's larger side is kept if larger. The arithmetic is the
// PyTorch path's (splattrain/strategy/default.py), in the same order: cameras one after another,
// so each sum is built as index_add_ builds it.

#include <cmath>
#include <cstdint>

namespace {

template <typename S>
void accumulate_grad2d(const S* grads, const int32_t* radii, int64_t n_cams, int64_t n_gauss, S scale_x,
                       S scale_y, S radius_scale, S* grad2d, S* count, S* max_radii) {
    for (int64_t c = 0; c < n_cams; ++c) {
        for (int64_t n = 0; n < n_gauss; ++n) {
            const int64_t i = c * n_gauss + n;
            const int32_t rx = radii[2 * i], ry = radii[2 * i + 1];
            if (rx <= 0 || ry <= 0) continue;
            const S gx = grads[2 * i] * scale_x, gy = grads[2 * i + 1] * scale_y;
            const S sq = gx * gx;
            grad2d[n] += std::sqrt(sq + gy * gy);
            count[n] += S(1);
            if (max_radii != nullptr) {
                const S r = static_cast<S>(rx > ry ? rx : ry) / radius_scale;
                if (max_radii[n] < r) max_radii[n] = r;
            }
        }
    }
}

}  // namespace

extern "C" void splat_accumulate_grad2d_f32(const float* grads, const int32_t* radii, int64_t n_cams,
                                            int64_t n_gauss, float scale_x, float scale_y, float radius_scale,
                                            float* grad2d, float* count, float* max_radii) {
    accumulate_grad2d(grads, radii, n_cams, n_gauss, scale_x, scale_y, radius_scale, grad2d, count, max_radii);
}

// SSIM of image batches and its gradient on the CPU, by pytorch_msssim's definition (the
// reference it is tested against): an 11-tap Gaussian window (sigma 1.5) run along every side
// of at least 11 pixels as a valid convolution (shorter sides are not blurred),
// C1 = 0.01^2 and C2 = 0.03^2 for data in [0, 1], and the mean over images, channels and
// positions. Images are [N, H, W, C] (channels last).
//
// The forward pass also keeps, per position, the derivatives of the SSIM map with respect to
// the blurred statistics a prediction x enters (mean of x, of x^2 and of x*y), so the backward
// pass is one transposed blur of those three maps. Work items are bands of rows of one channel
// plane; partial sums are added in a fixed order, so results do not depend on the thread count.

#include <cmath>
#include <vector>

#include "common.h"

namespace {

using splat::parallel_for;

constexpr int kWindow = 11;
constexpr double kSigma = 1.5;
constexpr double kC1 = 0.01 * 0.01, kC2 = 0.03 * 0.03;
constexpr int kBandRows = 32;  // rows of a plane per work item

// The window along a side of `length` pixels: the normalised Gaussian taps, or a single tap of
// 1 when the side is shorter than the window.
template <typename S>
struct Window {
    int size;
    S w[kWindow];

    explicit Window(int length) : size(length >= kWindow ? kWindow : 1), w{} {
        if (size == 1) {
            w[0] = S(1);
            return;
        }
        double taps[kWindow], sum = 0;
        for (int k = 0; k < kWindow; ++k) {
            const double x = k - kWindow / 2;
            taps[k] = std::exp(-(x * x) / (2 * kSigma * kSigma));
            sum += taps[k];
        }
        for (int k = 0; k < kWindow; ++k) w[k] = static_cast<S>(taps[k] / sum);
    }
};

// Shapes shared by both passes. The SSIM map has ho x wo positions per plane; its derivative
// maps are stored with pad_y zero rows above and below and pad_x zero columns either side
// (hp x wp), so that the backward pass blurs them like the forward pass blurs images.
struct Shape {
    int64_t images;
    int height, width, channels, ho, wo, pad_y, pad_x, hp, wp;

    Shape(int64_t n, int h, int w, int c, int window_y, int window_x)
        : images(n), height(h), width(w), channels(c), ho(h - window_y + 1), wo(w - window_x + 1),
          pad_y(window_y - 1), pad_x(window_x - 1), hp(ho + 2 * pad_y), wp(wo + 2 * pad_x) {}
    int64_t planes() const { return images * channels; }
    size_t padded_size() const { return static_cast<size_t>(hp) * wp; }
    int bands(int rows) const { return (rows + kBandRows - 1) / kBandRows; }
    // Pixel (row i, column 0) of plane p in a channels-last batch; columns are `channels` apart.
    int64_t row_start(int64_t plane, int i) const {
        return (plane / channels * height + i) * static_cast<int64_t>(width) * channels + plane % channels;
    }
};

// out[j] = sum_k w[k] * in[j + k * step] for j < n: the window along a row (step 1) or down
// the rows of a plane (step = its row length).
template <typename S>
[[gnu::always_inline]] inline void blur(const Window<S>& win, const S* __restrict in, size_t step, int n,
                                        S* __restrict out) {
    if (win.size == 1) {
        for (int j = 0; j < n; ++j) out[j] = in[j];
        return;
    }
    for (int j = 0; j < n; ++j) {
        S sum = win.w[0] * in[j];
#pragma GCC unroll 16
        for (int k = 1; k < kWindow; ++k) sum += win.w[k] * in[j + k * step];
        out[j] = sum;
    }
}

// Per-thread scratch.
template <typename S>
std::vector<S>& scratch(size_t n) {
    thread_local std::vector<S> buffer;
    if (buffer.size() < n) buffer.resize(n);
    return buffer;
}

// One row of the SSIM map from the blurred statistics stat [5][wo] (x, y, x^2, y^2, xy); with
// kDerivatives also its derivatives along the blurred x, x^2 and x*y.
template <typename S, bool kDerivatives>
[[gnu::always_inline]] inline void ssim_row(const S* __restrict stat, int wo, S* __restrict map,
                                            S* __restrict d_mu, S* __restrict d_xx, S* __restrict d_xy) {
    const S* mxs = stat;
    const S* mys = stat + wo;
    const S* exxs = stat + 2 * wo;
    const S* eyys = stat + 3 * wo;
    const S* exys = stat + 4 * wo;
    for (int j = 0; j < wo; ++j) {
        const S mx = mxs[j], my = mys[j];
        const S b1 = mx * mx + my * my + S(kC1);
        const S b2 = (exxs[j] - mx * mx) + (eyys[j] - my * my) + S(kC2);
        const S lum = (S(2) * mx * my + S(kC1)) / b1;
        const S cs = (S(2) * (exys[j] - mx * my) + S(kC2)) / b2;
        map[j] = lum * cs;
        if constexpr (kDerivatives) {
            // derivatives of lum and cs along mx (var_x = exx - mx^2, cov = exy - mx * my)
            const S d_lum = (S(2) * my - lum * S(2) * mx) / b1;
            const S d_cs = (S(2) * mx * cs - S(2) * my) / b2;
            d_mu[j] = d_lum * cs + lum * d_cs;
            d_xx[j] = -lum * cs / b2;
            d_xy[j] = S(2) * lum / b2;
        }
    }
}

// Sums the SSIM map of plane rows [o0, o1) and, when dmaps is set, writes its derivatives there
// ([3][planes][hp][wp], padded: with respect to the blurred x, x^2 and x*y), zeros included.
template <typename S>
SPLAT_CLONES double forward_band(const S* pred, const S* target, const Shape& sh, const Window<S>& wy,
                                 const Window<S>& wx, int64_t plane, int o0, int o1, S* dmaps) {
    const int rows = o1 - o0 + wy.size - 1;  // input rows the band reads
    const int W = sh.width, wo = sh.wo;
    // Input rows (x, y, x^2, y^2, xy) blurred along the row: [5][rows][wo].
    std::vector<S>& buf = scratch<S>(static_cast<size_t>(5) * rows * wo + 5 * static_cast<size_t>(W) + 6 * wo);
    S* hb = buf.data();
    S* line = hb + static_cast<size_t>(5) * rows * wo;  // [5][W]
    S* stat = line + 5 * static_cast<size_t>(W);           // [5][wo] blurred, then the map [wo]
    for (int r = 0; r < rows; ++r) {
        const S* xs = pred + sh.row_start(plane, o0 + r);
        const S* ys = target + sh.row_start(plane, o0 + r);
        for (int j = 0; j < W; ++j) {
            const S x = xs[j * sh.channels], y = ys[j * sh.channels];
            line[j] = x;
            line[W + j] = y;
            line[2 * W + j] = x * x;
            line[3 * W + j] = y * y;
            line[4 * W + j] = x * y;
        }
        for (int m = 0; m < 5; ++m) blur(wx, line + m * W, 1, wo, hb + (static_cast<size_t>(m) * rows + r) * wo);
    }
    const size_t apart = sh.padded_size() * sh.planes();  // from one derivative map to the next
    if (dmaps != nullptr) {  // the zero rows above and below
        for (int m = 0; m < 3; ++m) {
            S* first = dmaps + m * apart + plane * sh.padded_size();
            if (o0 == 0) std::fill(first, first + static_cast<size_t>(sh.pad_y) * sh.wp, S(0));
            if (o1 == sh.ho)
                std::fill(first + static_cast<size_t>(sh.pad_y + sh.ho) * sh.wp, first + sh.padded_size(), S(0));
        }
    }
    double sum = 0;
    for (int o = o0; o < o1; ++o) {
        for (int m = 0; m < 5; ++m)
            blur(wy, hb + (static_cast<size_t>(m) * rows + (o - o0)) * wo, wo, wo, stat + m * wo);
        S* map = stat + 5 * wo;
        if (dmaps == nullptr) {
            ssim_row<S, false>(stat, wo, map, nullptr, nullptr, nullptr);
        } else {
            S* row = dmaps + plane * sh.padded_size() + static_cast<size_t>(sh.pad_y + o) * sh.wp;
            for (int m = 0; m < 3; ++m) {  // the zero columns either side
                std::fill(row + m * apart, row + m * apart + sh.pad_x, S(0));
                std::fill(row + m * apart + sh.pad_x + wo, row + m * apart + sh.wp, S(0));
            }
            S* d_mu = row + sh.pad_x;
            ssim_row<S, true>(stat, wo, map, d_mu, d_mu + apart, d_mu + 2 * apart);
        }
        S row_sum = 0;
        for (int j = 0; j < wo; ++j) row_sum += map[j];
        sum += row_sum;
    }
    return sum;
}

// Writes the gradient of plane rows [i0, i1) of the prediction: scale times the transposed blur
// of the three derivative maps, d/dx = a + 2 x b + y c. The window is symmetric, so the
// transposed blur is the blur of the zero-padded maps.
template <typename S>
SPLAT_CLONES void backward_band(const S* pred, const S* target, const Shape& sh, const Window<S>& wy,
                                const Window<S>& wx, int64_t plane, int i0, int i1, const S* dmaps, S scale,
                                S* grad) {
    const int W = sh.width;
    const size_t apart = sh.padded_size() * sh.planes();
    std::vector<S>& buf = scratch<S>(3 * static_cast<size_t>(sh.wp) + 3 * static_cast<size_t>(W));
    S* col = buf.data();         // [3][wp]: maps blurred down the column
    S* row = col + 3 * sh.wp;    // [3][W]: and then along the row
    for (int i = i0; i < i1; ++i) {
        for (int m = 0; m < 3; ++m) {
            const S* map = dmaps + m * apart + plane * sh.padded_size() + static_cast<size_t>(i) * sh.wp;
            blur(wy, map, sh.wp, sh.wp, col + m * sh.wp);
            blur(wx, col + m * sh.wp, 1, W, row + m * W);
        }
        const int64_t start = sh.row_start(plane, i);
        for (int j = 0; j < W; ++j) {
            const int64_t p = start + static_cast<int64_t>(j) * sh.channels;
            grad[p] = scale * (row[j] + S(2) * pred[p] * row[W + j] + target[p] * row[2 * W + j]);
        }
    }
}

template <typename S>
double ssim_forward(const S* pred, const S* target, int64_t n, int h, int w, int c, int threads, S* dmaps) {
    const Window<S> wy(h), wx(w);
    const Shape sh(n, h, w, c, wy.size, wx.size);
    const int bands = sh.bands(sh.ho);
    std::vector<double> sums(static_cast<size_t>(sh.planes()) * bands, 0.0);
    parallel_for(sh.planes() * bands, threads, [&](int64_t item) {
        const int64_t plane = item / bands;
        const int o0 = static_cast<int>(item % bands) * kBandRows;
        sums[item] = forward_band(pred, target, sh, wy, wx, plane, o0, std::min(sh.ho, o0 + kBandRows), dmaps);
    });
    double total = 0;
    for (double s : sums) total += s;
    return total / (static_cast<double>(sh.planes()) * sh.ho * sh.wo);
}

template <typename S>
void ssim_backward(const S* pred, const S* target, int64_t n, int h, int w, int c, int threads, const S* dmaps,
                   double grad_mean, S* grad) {
    const Window<S> wy(h), wx(w);
    const Shape sh(n, h, w, c, wy.size, wx.size);
    const S scale = static_cast<S>(grad_mean / (static_cast<double>(sh.planes()) * sh.ho * sh.wo));
    const int bands = sh.bands(h);
    parallel_for(sh.planes() * bands, threads, [&](int64_t item) {
        const int64_t plane = item / bands;
        const int i0 = static_cast<int>(item % bands) * kBandRows;
        backward_band(pred, target, sh, wy, wx, plane, i0, std::min(h, i0 + kBandRows), dmaps, scale, grad);
    });
}

}  // namespace

#define SPLAT_SSIM_EXPORTS(S, SUFFIX)                                                              \
    extern "C" double splat_ssim_forward_##SUFFIX(const S* pred, const S* target, int64_t images,  \
                                                  int height, int width, int channels,             \
                                                  int threads, S* dmaps) {                          \
        return ssim_forward(pred, target, images, height, width, channels, threads, dmaps);         \
    }                                                                                              \
    extern "C" void splat_ssim_backward_##SUFFIX(const S* pred, const S* target, int64_t images,   \
                                                 int height, int width, int channels, int threads,  \
                                                 const S* dmaps, double grad_mean, S* grad) {       \
        ssim_backward(pred, target, images, height, width, channels, threads, dmaps, grad_mean,    \
                      grad);                                                                       \
    }

SPLAT_SSIM_EXPORTS(float, f32)
SPLAT_SSIM_EXPORTS(double, f64)

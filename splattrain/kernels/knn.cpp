// Nearest-neighbour distances of a few thousand starting points by direct comparison, on the
// library's threads: each point against every other, keeping its k smallest distances. The
// arithmetic is that of the PyTorch path it replaces (splattrain/model/neighbours.py): each
// distance as torch.cdist computes it without matrix products (the squared differences summed in
// x, y, z order, then the square root), and the mean of the k smallest distances squared, summed
// in ascending order; the caller takes its root with torch.sqrt (whose vectorised float64 root is
// not always the correctly rounded one), so both paths give the same float64 values.

#include <cmath>
#include <cstdint>

#include "common.h"

namespace {

constexpr int kMaxK = 16;

// The k (<= kMaxK) smallest distances from point i to the other points, ascending, into best.
void nearest(const double* pts, int64_t n, int64_t i, int k, double* best) {
    int found = 0;
    const double xi = pts[3 * i], yi = pts[3 * i + 1], zi = pts[3 * i + 2];
    for (int64_t j = 0; j < n; ++j) {
        if (j == i) continue;
        const double dx = std::abs(xi - pts[3 * j]), dy = std::abs(yi - pts[3 * j + 1]),
                     dz = std::abs(zi - pts[3 * j + 2]);
        double sum = 0.0;
        sum = sum + dx * dx;
        sum = sum + dy * dy;
        sum = sum + dz * dz;
        if (found == k && !(sum < best[k - 1] * best[k - 1])) continue;  // cheap reject on the square
        const double d = std::sqrt(sum);
        if (found == k && !(d < best[k - 1])) continue;
        int slot = found < k ? found++ : k - 1;
        while (slot > 0 && best[slot - 1] > d) {
            best[slot] = best[slot - 1];
            --slot;
        }
        best[slot] = d;
    }
}

}  // namespace

// out[q] = mean of the k smallest squared distances from point first + q to the others, for
// q in [0, count), of n points xyz-interleaved in pts (n >= k + 1, 1 <= k <= 16); returns 0, or -1
// for arguments out of range.
extern "C" int splat_knn_mean_f64(const double* pts, int64_t n, int64_t first, int64_t count, int k, double* out,
                                  int threads) {
    if (k < 1 || k > kMaxK || n < k + 1 || first < 0 || count < 0 || first + count > n) return -1;
    splat::parallel_for(count, threads, [&](int64_t q) {
        double best[kMaxK];
        nearest(pts, n, first + q, k, best);
        double sum = 0.0;
        for (int m = 0; m < k; ++m) sum = sum + best[m] * best[m];
        out[q] = sum / k;
    });
    return 0;
}

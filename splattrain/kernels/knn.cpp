// Nearest-neighbour distances of the starting points through a k-d tree, on the library's threads.
// The arithmetic is that of the PyTorch comparison it stands for (splattrain/model/neighbours.py):
// each distance as torch.cdist computes it without matrix products (the squared differences summed
// in x, y, z order, then the square root), and the mean of the k smallest distances squared, summed
// in ascending order; the caller takes its root with torch.sqrt (whose vectorised float64 root is
// not always the correctly rounded one), so both paths give the same float64 values, except where
// torch.cdist's own vectorised roots round differently (the last bit, far from the origin). The tree only
// skips points that cannot be among the k nearest, so it finds the same distances as comparing
// every point with every other, in O(N log N) instead of O(N^2).
//
// The tree is implicit: perm holds the point indices, and each range [lo, hi) longer than a leaf
// is split at its middle entry mid, a point whose coordinate on axis[mid] is the split value; the
// entries before mid lie on or below it, those after on or above it.

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common.h"

namespace {

constexpr int kMaxK = 16;
constexpr int64_t kLeaf = 8;

struct Tree {
    const double* pts;
    const int64_t* perm;
    const int8_t* axis;
};

void build(const double* pts, int64_t* perm, int8_t* axis, int64_t lo, int64_t hi) {
    while (hi - lo > kLeaf) {
        double low[3] = {INFINITY, INFINITY, INFINITY}, high[3] = {-INFINITY, -INFINITY, -INFINITY};
        for (int64_t i = lo; i < hi; ++i) {
            for (int a = 0; a < 3; ++a) {
                low[a] = std::min(low[a], pts[3 * perm[i] + a]);
                high[a] = std::max(high[a], pts[3 * perm[i] + a]);
            }
        }
        int a = 0;  // the axis of the widest spread
        for (int b = 1; b < 3; ++b)
            if (high[b] - low[b] > high[a] - low[a]) a = b;
        const int64_t mid = lo + (hi - lo) / 2;
        std::nth_element(perm + lo, perm + mid, perm + hi,
                         [&](int64_t x, int64_t y) { return pts[3 * x + a] < pts[3 * y + a]; });
        axis[mid] = static_cast<int8_t>(a);
        build(pts, perm, axis, mid + 1, hi);
        hi = mid;
    }
}

// The k smallest distances found so far, ascending.
struct Nearest {
    const double* q;
    int64_t self;
    int k;
    int found = 0;
    double best[kMaxK];

    void offer(const double* pts, int64_t j) {
        if (j == self) return;
        const double dx = std::abs(q[0] - pts[3 * j]), dy = std::abs(q[1] - pts[3 * j + 1]),
                     dz = std::abs(q[2] - pts[3 * j + 2]);
        double sum = 0.0;
        sum = sum + dx * dx;
        sum = sum + dy * dy;
        sum = sum + dz * dz;
        if (found == k && !(sum < best[k - 1] * best[k - 1])) return;  // cheap reject on the square
        const double d = std::sqrt(sum);
        if (found == k && !(d < best[k - 1])) return;
        int slot = found < k ? found++ : k - 1;
        while (slot > 0 && best[slot - 1] > d) {
            best[slot] = best[slot - 1];
            --slot;
        }
        best[slot] = d;
    }

    // Whether a point at least `gap` away along one axis could still be among the k nearest (the
    // margin keeps every point whose rounded distance might tie or beat the k-th).
    bool reaches(double gap) const { return found < k || gap <= best[k - 1] * (1.0 + 1e-9); }
};

void search(const Tree& t, int64_t lo, int64_t hi, Nearest& near) {
    while (hi - lo > kLeaf) {
        const int64_t mid = lo + (hi - lo) / 2;
        const int a = t.axis[mid];
        const double gap = near.q[a] - t.pts[3 * t.perm[mid] + a];
        near.offer(t.pts, t.perm[mid]);
        const bool below = gap < 0;
        if (below)
            search(t, lo, mid, near);
        else
            search(t, mid + 1, hi, near);
        if (!near.reaches(std::abs(gap))) return;
        if (below)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (int64_t i = lo; i < hi; ++i) near.offer(t.pts, t.perm[i]);
}

}  // namespace

// Builds the tree of n points (xyz-interleaved in pts) into perm [n] and axis [n].
extern "C" void splat_knn_tree_build_f64(const double* pts, int64_t n, int64_t* perm, int8_t* axis) {
    for (int64_t i = 0; i < n; ++i) perm[i] = i;
    std::fill(axis, axis + n, int8_t{0});
    build(pts, perm, axis, 0, n);
}

// out[q] = mean of the k smallest squared distances from point first + q to the others, for
// q in [0, count), through the tree of splat_knn_tree_build_f64 (n >= k + 1, 1 <= k <= 16);
// returns 0, or -1 for arguments out of range.
extern "C" int splat_knn_tree_mean_f64(const double* pts, int64_t n, const int64_t* perm, const int8_t* axis,
                                       int64_t first, int64_t count, int k, double* out, int threads) {
    if (k < 1 || k > kMaxK || n < k + 1 || first < 0 || count < 0 || first + count > n) return -1;
    const Tree tree{pts, perm, axis};
    splat::parallel_for(count, threads, [&](int64_t q) {
        Nearest near{pts + 3 * (first + q), first + q, k};
        search(tree, 0, n, near);
        double sum = 0.0;
        for (int m = 0; m < k; ++m) sum = sum + near.best[m] * near.best[m];
        out[q] = sum / k;
    });
    return 0;
}

// Adam for every Gaussian parameter group in one call: one pass over each group's memory that
// reads the parameter, its gradient and both moments and writes the three back (PyTorch's
// single-tensor Adam makes five passes and a temporary). The arithmetic is torch.optim.Adam's
// (no weight decay, no amsgrad): exp_avg.lerp_(grad, 1 - beta1),
// exp_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * grad^2,
// param -= step_size * exp_avg / (sqrt(exp_avg_sq) / bias_correction2_sqrt + eps),
// with the per-group scalars computed by the caller in double precision as PyTorch does.
//
// With a visibility mask (one byte per Gaussian, shared by all groups, whose rows are
// Gaussians), rows whose byte is 0 are left untouched: parameters and both moments, as in
// gsplat's SelectiveAdam. Work items are chunks of rows of one group; each element is written
// by one thread, so results do not depend on the thread count.

#include <cmath>
#include <cstdint>
#include <vector>

#include "common.h"

namespace {

using splat::parallel_for;

constexpr int64_t kChunkElements = 16384;  // elements of one group per work item

struct Group {
    float* param;
    const float* grad;
    float* exp_avg;
    float* exp_avg_sq;
    int64_t rows, row_size;
    float step_size, beta1, beta2, bc2_sqrt, eps;
    int64_t first_item;  // index of this group's first work item
    int64_t rows_per_item;
};

SPLAT_CLONES void adam_rows(const Group& g, int64_t row_begin, int64_t row_end) {
    const float w = 1.0f - g.beta1, one_minus_beta2 = 1.0f - g.beta2, beta2 = g.beta2;
    const float step_size = g.step_size, bc2 = g.bc2_sqrt, eps = g.eps;
    const bool small_weight = w < 0.5f;  // torch's lerp: start + w * (end - start) below 0.5
    float* __restrict p = g.param + row_begin * g.row_size;
    const float* __restrict gr = g.grad + row_begin * g.row_size;
    float* __restrict m = g.exp_avg + row_begin * g.row_size;
    float* __restrict v = g.exp_avg_sq + row_begin * g.row_size;
    const int64_t n = (row_end - row_begin) * g.row_size;
    if (small_weight) {
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) {
            const float gi = gr[i];
            const float mi = m[i] + w * (gi - m[i]);
            const float vi = v[i] * beta2 + one_minus_beta2 * gi * gi;
            m[i] = mi;
            v[i] = vi;
            p[i] = p[i] - step_size * (mi / (std::sqrt(vi) / bc2 + eps));
        }
    } else {
        const float w_end = 1.0f - w;
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) {
            const float gi = gr[i];
            const float mi = gi - (gi - m[i]) * w_end;
            const float vi = v[i] * beta2 + one_minus_beta2 * gi * gi;
            m[i] = mi;
            v[i] = vi;
            p[i] = p[i] - step_size * (mi / (std::sqrt(vi) / bc2 + eps));
        }
    }
}

}  // namespace

// params, grads, exp_avgs, exp_avg_sqs: `groups` pointers each; rows, row_sizes: `groups`
// integers; scalars: 5 doubles per group (step_size, beta1, beta2, bias_correction2_sqrt, eps);
// visible: one byte per row (all groups have the same rows), or null for a dense step.
extern "C" void splat_adam_step_f32(void* const* params, void* const* grads, void* const* exp_avgs,
                                    void* const* exp_avg_sqs, const int64_t* rows,
                                    const int64_t* row_sizes, const double* scalars, int32_t groups,
                                    const uint8_t* visible, int32_t threads) {
    std::vector<Group> list(groups);
    int64_t items = 0;
    for (int32_t k = 0; k < groups; ++k) {
        Group& g = list[k];
        g.param = static_cast<float*>(params[k]);
        g.grad = static_cast<const float*>(grads[k]);
        g.exp_avg = static_cast<float*>(exp_avgs[k]);
        g.exp_avg_sq = static_cast<float*>(exp_avg_sqs[k]);
        g.row_size = row_sizes[k] > 0 ? row_sizes[k] : 1;
        g.rows = row_sizes[k] > 0 ? rows[k] : 0;  // an empty parameter has nothing to update
        const double* s = scalars + 5 * k;
        g.step_size = static_cast<float>(s[0]);
        g.beta1 = static_cast<float>(s[1]);
        g.beta2 = static_cast<float>(s[2]);
        g.bc2_sqrt = static_cast<float>(s[3]);
        g.eps = static_cast<float>(s[4]);
        g.rows_per_item = std::max<int64_t>(1, kChunkElements / g.row_size);
        g.first_item = items;
        items += (g.rows + g.rows_per_item - 1) / g.rows_per_item;
    }
    parallel_for(items, threads, [&](int64_t item) {
        int32_t k = 0;
        while (k + 1 < groups && list[k + 1].first_item <= item) ++k;
        const Group& g = list[k];
        const int64_t begin = (item - g.first_item) * g.rows_per_item;
        const int64_t end = std::min(g.rows, begin + g.rows_per_item);
        if (visible == nullptr) {
            adam_rows(g, begin, end);
            return;
        }
        for (int64_t row = begin; row < end;) {  // runs of visible rows
            while (row < end && !visible[row]) ++row;
            int64_t stop = row;
            while (stop < end && visible[stop]) ++stop;
            if (stop > row) adam_rows(g, row, stop);
            row = stop;
        }
    });
}

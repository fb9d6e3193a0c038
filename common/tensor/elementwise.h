#pragma once

#include <cstdint>

#include "common/config/job.h"

// The element-wise passes of a layer, around its GEMMs: one pass forward (bias + activation) and one
// backward (activation derivative + bias gradient). Each is compiled for the x86-64 baseline and for
// AVX2 and AVX-512 machines, chosen once at load time (GCC's target_clones), so a default build uses
// the machine's widest vectors here as OpenBLAS does in the GEMMs. Results can differ in the last bit
// between those machine levels (FMA contraction), never between runs on one machine.
namespace tfd::tensor {

using config::Activation;

// Whether act'(x) cannot be read from y = act(x) alone (gelu, which is not monotone): a layer with
// such an activation keeps its pre-activations for the backward pass.
bool NeedsPreActivation(Activation act);

// y[r][c] = act(y[r][c] + bias[c]) in place, for `rows` rows of `cols` columns. When
// NeedsPreActivation(act), `pre` (rows x cols) receives y + bias before the activation; else it
// may be null.
void BiasActivation(float* y, const float* bias, std::int64_t rows, std::int64_t cols, Activation act, float* pre = nullptr);

// dy[r][c] *= act'(x[r][c]) in place, where y = act(x) is given (and, when NeedsPreActivation(act),
// x itself in `pre`, as BiasActivation wrote it), and dbias[c] = the sum of the new dy over rows
// (summed row by row, in row order). `dbias` may be null when the layer has no bias.
void ActivationGradBias(const float* y, float* dy, std::int64_t rows, std::int64_t cols, Activation act,
                        float* dbias, const float* pre = nullptr);

// exp(x) for float arrays, written so it vectorises: Cephes' range reduction and degree-6 polynomial
// (relative error below 2 ulp on [-87, 88]; inputs outside are clamped there). Exposed for tests.
void ExpArray(const float* x, float* out, std::int64_t n);

}  // namespace tfd::tensor

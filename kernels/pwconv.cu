// Pointwise (1x1) convolution forward and backward-data on bf16 tensor cores, with the producer's
// BatchNorm + activation applied on load (prologue) and the consumer's BatchNorm statistics gathered in the
// epilogue (kernels/pwconv_cuda.h, docs/KERNELS_PWCONV.md); the backward-filter is kernels/pwconv_wgrad.cu.
//
// A GEMM y[rows][n] = x[rows][k] * w[n][k]^T. Grid (n / BN column blocks, chunks); block 256 threads,
// 8 warps. A block owns BN output channels and a contiguous range of 128-row tiles (its chunk), and
// walks (tile, 32-wide k-step) pairs in order: each step's x rows and w rows are staged in shared
// memory (80-byte row pitch: the ldmatrix rows of a warp fall in distinct banks), double-buffered, the
// next step's global loads issued before the current step's mma so that they are in flight during it.
// The prologue is applied to the x values between the register and the shared-memory copy, with
// exactly bn_act_apply's arithmetic (kernels/bn_act_device.cuh). Warp w computes rows 16w..16w+15 of the
// tile and all BN columns: BN / 8 accumulator fragments, two mma k-steps per staged step.
// Epilogue, per tile: the accumulators rounded to bf16 and stored (rows past the end are not), and with
// statistics each thread adds its stored values, shifted by the block's own first row, to per-column
// fp32 sums; at the end of the chunk the block reduces them in a fixed order (lanes by a butterfly,
// warps in order) and writes (shift, sum, sum of squares) per column. The finalize kernel merges the
// chunks in fp64 in order (Chan's shift change), then writes the statistics as bn_stats_train does.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/bn_act_cuda.h"
#include "kernels/bn_act_device.cuh"
#include "kernels/bn_stats_chunks.cuh"
#include "kernels/cuda_util.cuh"
#include "kernels/mma.cuh"
#include "kernels/pwconv_cuda.h"
#include "kernels/pwconv_device.cuh"
#include "kernels/pwconv_rows.cuh"
#include "runtime/cuda_check.h"
#include "runtime/launch.cuh"
#include "runtime/launch_check.h"

namespace kern {

// The row GEMM kernel, its epilogue kinds and the statistics finalize: kernels/pwconv_rows.cuh.
namespace {

// Empty when supported, else what is not, with its value.
std::string unsupported_reason(const ConvShape& s) {
    if (s.k != 1) return rt::format("kernel size k=%d (only 1x1)", s.k);
    if (s.stride != 1) return rt::format("stride=%d (only 1)", s.stride);
    if (s.pad != 0) return rt::format("pad=%d (only 0)", s.pad);
    if (s.groups != 1) return rt::format("groups=%d (only 1)", s.groups);
    if (s.bias) return "bias=true (no bias)";
    if (s.cin <= 0 || s.cin % 32 != 0) return rt::format("cin=%d (must be a positive multiple of 32)", s.cin);
    if (s.cout <= 0 || s.cout % 32 != 0) return rt::format("cout=%d (must be a positive multiple of 32)", s.cout);
    if (s.n <= 0 || s.h <= 0 || s.w <= 0)
        return rt::format("input dims n=%d h=%d w=%d (must be positive)", s.n, s.h, s.w);
    const double rows = static_cast<double>(s.n) * s.h * s.w;
    if (rows + kPwTileM > static_cast<double>(INT_MAX))
        return rt::format("%.0f rows (n=%d h=%d w=%d): too many for 32-bit row indexing", rows, s.n, s.h, s.w);
    if (rows * std::max(s.cin, s.cout) > 1099511627776.0)
        return rt::format("%.0f rows x %d channels: too large", rows, std::max(s.cin, s.cout));
    return "";
}

// pwconv_rows_kernel over the GEMM geometry g (rows, k, n: the GEMM's; for the dgrad k = cout, n = cin).
template <int BN, PwA kA, Act A, bool kTransW, bool kAccum, PwEpi kE, Act AE = A>
void launch_rows(const rt::Exec& ex, const PwConvPlan& g, const bf16* a, const bf16* w, bf16* y, const PwStage& st,
                 const PwStage& ep, float* part) {
    rt::launch(ex, "pwconv_rows_kernel", pwconv_rows_kernel<BN, kA, A, kTransW, kAccum, kE, AE>,
               dim3(g.n_blocks, g.chunks), dim3(kPwThreads), 0, static_cast<int>(g.rows), g.k, g.n, g.tiles, g.chunks,
               dev(a), dev(w), dev(y), st, ep, part);
}

// act: the A staging's activation, or with kE == BnGrad the producer BN's (the staging is then plain).
template <PwA kA, bool kTransW, bool kAccum, PwEpi kE>
void dispatch_rows(const rt::Exec& ex, const PwConvPlan& g, Act act, const bf16* a, const bf16* w, bf16* y,
                   const PwStage& st, float* part, const PwStage& ep = PwStage{}) {
    const auto go = [&](auto bn) {
        constexpr int BN = decltype(bn)::value;
        if constexpr (kA == PwA::Plain && kE != PwEpi::BnGrad) {
            launch_rows<BN, kA, Act::None, kTransW, kAccum, kE>(ex, g, a, w, y, st, ep, part);
        } else {
            switch (act) {
                case Act::Silu: return launch_rows<BN, kA, Act::Silu, kTransW, kAccum, kE>(ex, g, a, w, y, st, ep, part);
                case Act::Relu: return launch_rows<BN, kA, Act::Relu, kTransW, kAccum, kE>(ex, g, a, w, y, st, ep, part);
                default: return launch_rows<BN, kA, Act::None, kTransW, kAccum, kE>(ex, g, a, w, y, st, ep, part);
            }
        }
    };
    if (g.bn == 64) go(std::integral_constant<int, 64>{});
    else go(std::integral_constant<int, 32>{});
}

// The dgrad with the following BN's dx formed on load (activation act) and the producer BN's backward
// reductions in the epilogue (activation act_e).
template <bool kAccum>
void dispatch_dgrad_both(const rt::Exec& ex, const PwConvPlan& g, Act act, Act act_e, const bf16* dy, const bf16* w,
                         bf16* dx, const PwStage& st, float* part, const PwStage& ep) {
    const auto go = [&](auto bn, auto a) {
        constexpr int BN = decltype(bn)::value;
        constexpr Act A = decltype(a)::value;
        switch (act_e) {
            case Act::Silu:
                return launch_rows<BN, PwA::Backward, A, true, kAccum, PwEpi::BnGrad, Act::Silu>(ex, g, dy, w, dx, st, ep, part);
            case Act::Relu:
                return launch_rows<BN, PwA::Backward, A, true, kAccum, PwEpi::BnGrad, Act::Relu>(ex, g, dy, w, dx, st, ep, part);
            default:
                return launch_rows<BN, PwA::Backward, A, true, kAccum, PwEpi::BnGrad, Act::None>(ex, g, dy, w, dx, st, ep, part);
        }
    };
    const auto with_bn = [&](auto a) {
        if (g.bn == 64) go(std::integral_constant<int, 64>{}, a);
        else go(std::integral_constant<int, 32>{}, a);
    };
    switch (act) {
        case Act::Silu: return with_bn(std::integral_constant<Act, Act::Silu>{});
        case Act::Relu: return with_bn(std::integral_constant<Act, Act::Relu>{});
        default: return with_bn(std::integral_constant<Act, Act::None>{});
    }
}

}  // namespace

bool pwconv_supported(const ConvShape& s) { return unsupported_reason(s).empty(); }

PwConvPlan pwconv_plan(const ConvShape& s) {
    const std::string why = unsupported_reason(s);
    SF_CHECK(why.empty(), "pwconv: unsupported shape: %s", why.c_str());
    return pwconv_geometry(static_cast<long long>(s.n) * s.h * s.w, s.cin, s.cout);
}

size_t pwconv_workspace_floats(const ConvShape& s) {
    const PwConvPlan pl = pwconv_plan(s);
    return 3 * static_cast<size_t>(pl.chunks) * static_cast<size_t>(pl.n);
}

void pwconv_forward_cuda(const rt::Exec& ex, const ConvShape& s, const bf16* x, const bf16* w, bf16* y,
                         const DwPrologue* pro, const BnStatsOut* stats, float* workspace, size_t workspace_floats) {
    const char* op = "pwconv_forward_cuda";
    rt::check_cuda_exec(op, ex);
    const PwConvPlan pl = pwconv_plan(s);
    SF_CHECK(!pro || pl.k <= kPwMaxPrologueK, "%s: a prologue needs cin <= %d, got %d", op, kPwMaxPrologueK, pl.k);
    rt::check_device_ptr(op, "x", x, 16);
    rt::check_device_ptr(op, "w", w, 16);
    rt::check_device_ptr(op, "y", y, 16);
    const size_t xb = static_cast<size_t>(pl.rows) * pl.k * sizeof(bf16), yb = static_cast<size_t>(pl.rows) * pl.n * sizeof(bf16);
    const size_t wb = static_cast<size_t>(pl.n) * pl.k * sizeof(bf16);
    SF_CHECK(!rt::overlap(y, yb, x, xb), "%s: y must not alias x", op);
    SF_CHECK(!rt::overlap(y, yb, w, wb), "%s: y must not alias w", op);
    check_dw_prologue(op, pro, pl.k, {{y, yb}});
    PwStage st{nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, false, 0.0};
    if (pro) st = PwStage{pro->gamma, pro->beta, pro->mean, pro->invstd, nullptr, nullptr, pro->eval, pro->eps};
    check_bn_stats_out(op, stats, pl.n, pl.rows, workspace, workspace_floats, stats ? pwconv_workspace_floats(s) : 0,
                       {{x, xb, "x"}, {w, wb, "w"}, {y, yb, "y"}});
    float* part = stats ? workspace : nullptr;
    const Act act = pro ? pro->act : Act::None;
    if (pro && stats) dispatch_rows<PwA::Apply, false, false, PwEpi::Stats>(ex, pl, act, x, w, y, st, part);
    else if (pro) dispatch_rows<PwA::Apply, false, false, PwEpi::None>(ex, pl, act, x, w, y, st, part);
    else if (stats) dispatch_rows<PwA::Plain, false, false, PwEpi::Stats>(ex, pl, act, x, w, y, st, part);
    else dispatch_rows<PwA::Plain, false, false, PwEpi::None>(ex, pl, act, x, w, y, st, part);
    if (stats)
        rt::launch(ex, "pwconv_stats_finalize_kernel", pwconv_stats_finalize_kernel, dim3(pl.finalize_blocks),
                   dim3(kPwFinalizeX, kPwFinalizeY), 0, static_cast<int>(pl.rows), pl.n, pl.tiles, pl.chunks,
                   static_cast<const float*>(part), stats->save_mean, stats->save_invstd, stats->running_mean,
                   stats->running_var, stats->momentum, stats->eps);
}

size_t pwconv_dgrad_workspace_floats(const ConvShape& s) {
    const PwConvPlan fwd = pwconv_plan(s);
    const PwConvPlan g = pwconv_geometry(fwd.rows, fwd.n, fwd.k);
    return 2 * static_cast<size_t>(g.chunks) * static_cast<size_t>(g.n);
}

void pwconv_backward_data_cuda(const rt::Exec& ex, const ConvShape& s, const bf16* dy, const bf16* w, bf16* dx,
                               bool accumulate, const DwBnBackward* bnb, const BnGradSums* bng, float* workspace,
                               size_t workspace_floats) {
    const char* op = "pwconv_backward_data_cuda";
    rt::check_cuda_exec(op, ex);
    const PwConvPlan fwd = pwconv_plan(s);
    const PwConvPlan g = pwconv_geometry(fwd.rows, fwd.n, fwd.k);  // dx[rows][cin] = dy[rows][cout] * w[cout][cin]
    SF_CHECK(!bnb || g.k <= kPwMaxPrologueK, "%s: a BN-backward prologue needs cout <= %d, got %d", op,
             kPwMaxPrologueK, g.k);
    rt::check_device_ptr(op, "dy", dy, 16);
    rt::check_device_ptr(op, "w", w, 16);
    rt::check_device_ptr(op, "dx", dx, 16);
    const size_t dyb = static_cast<size_t>(g.rows) * g.k * sizeof(bf16), dxb = static_cast<size_t>(g.rows) * g.n * sizeof(bf16);
    const size_t wb = static_cast<size_t>(g.n) * g.k * sizeof(bf16);
    SF_CHECK(!rt::overlap(dx, dxb, dy, dyb), "%s: dx must not alias dy", op);
    SF_CHECK(!rt::overlap(dx, dxb, w, wb), "%s: dx must not alias w", op);
    check_dw_bn_backward(op, bnb, g.k, dyb, {{dx, dxb}}, "dx");
    PwStage st{nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, false, 0.0};
    if (bnb) st = PwStage{bnb->gamma, bnb->beta, bnb->mean, bnb->invstd, bnb->coef, dev(bnb->x), false, 0.0};
    const Act act = bnb ? bnb->act : Act::None;
    if (bng) {
        const size_t need = pwconv_dgrad_workspace_floats(s), pb = need * sizeof(float);
        rt::check_device_ptr(op, "workspace", workspace, alignof(float));
        SF_CHECK(workspace_floats >= need, "%s: workspace of %zu floats, need %zu", op, workspace_floats, need);
        // With bnb as well, its BN's input and vectors are read too (checked apart from dx by check_dw_bn_backward
        // above; apart from the epilogue's outputs and workspace here; empty ranges without it), as the fused
        // depthwise launcher lists them.
        const DwBnBackward nb = bnb ? *bnb : DwBnBackward{};
        const size_t kb = bnb ? static_cast<size_t>(g.k) * sizeof(float) : 0;
        check_bn_grad_sums(op, bng, g.n, g.rows, dxb,
                           {{dy, dyb, "dy"}, {w, wb, "w"}, {nb.x, bnb ? dyb : 0, "bnb->x"}, {nb.gamma, kb, "bnb->gamma"},
                            {nb.beta, kb, "bnb->beta"}, {nb.mean, kb, "bnb->mean"}, {nb.invstd, kb, "bnb->invstd"},
                            {nb.coef, 2 * kb, "bnb->coef"}},
                           {{dx, dxb, "dx"}, {workspace, pb, "the workspace"}});
        if (bnb) check_dw_bn_backward(op, bnb, g.k, dyb, {{workspace, pb}}, "the workspace");
        SF_CHECK(!rt::overlap(workspace, pb, dy, dyb) && !rt::overlap(workspace, pb, w, wb),
                 "%s: the workspace must not alias dy or w", op);
        const PwStage ep{bng->gamma, bng->beta, bng->mean, bng->invstd, nullptr, dev(bng->x), false, 0.0};
        if (bnb && accumulate)
            dispatch_dgrad_both<true>(ex, g, bnb->act, bng->act, dy, w, dx, st, workspace, ep);
        else if (bnb)
            dispatch_dgrad_both<false>(ex, g, bnb->act, bng->act, dy, w, dx, st, workspace, ep);
        else if (accumulate)
            dispatch_rows<PwA::Plain, true, true, PwEpi::BnGrad>(ex, g, bng->act, dy, w, dx, st, workspace, ep);
        else
            dispatch_rows<PwA::Plain, true, false, PwEpi::BnGrad>(ex, g, bng->act, dy, w, dx, st, workspace, ep);
        bn_act_backward_finalize(ex, static_cast<size_t>(g.rows), g.n, g.chunks, workspace, bng->dgamma, bng->dbeta,
                                 bng->coef);
        return;
    }
    if (bnb && accumulate) dispatch_rows<PwA::Backward, true, true, PwEpi::None>(ex, g, act, dy, w, dx, st, nullptr);
    else if (bnb) dispatch_rows<PwA::Backward, true, false, PwEpi::None>(ex, g, act, dy, w, dx, st, nullptr);
    else if (accumulate) dispatch_rows<PwA::Plain, true, true, PwEpi::None>(ex, g, act, dy, w, dx, st, nullptr);
    else dispatch_rows<PwA::Plain, true, false, PwEpi::None>(ex, g, act, dy, w, dx, st, nullptr);
}

}  // namespace kern

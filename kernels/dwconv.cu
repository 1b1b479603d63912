// Checked launchers of the CUDA depthwise 3x3 convolution, pad 1, stride 1 or 2, no bias, on bf16
// NHWC activations with fp32 accumulation (kernels/dwconv_cuda.h, docs/KERNELS_DWCONV.md): the shape,
// the variants, pointers, alignment, aliasing and the workspace are checked here, then the kernels run
// (forward and backward-data: kernels/dwconv_gather.cu; backward-filter: kernels/dwconv_wgrad.cu).
#include <algorithm>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "kernels/dwconv_device.cuh"
#include "runtime/cuda_check.h"
#include "runtime/launch_check.h"

namespace kern {

namespace {

// Empty when the shape is supported, else what is not, with its value.
std::string unsupported_reason(const ConvShape& s) {
    if (s.k != 3) return rt::format("kernel size k=%d (only 3x3)", s.k);
    if (s.pad != 1) return rt::format("pad=%d (only pad 1)", s.pad);
    if (s.stride != 1 && s.stride != 2) return rt::format("stride=%d (only 1 or 2)", s.stride);
    if (s.groups != s.cin || s.cout != s.cin)
        return rt::format("groups=%d cin=%d cout=%d (depthwise only: groups == cin == cout)", s.groups, s.cin, s.cout);
    if (s.cin <= 0 || s.cin % 8 != 0)
        return rt::format("C=%d (must be a positive multiple of 8: 128-bit bf16 vectors)", s.cin);
    if (s.bias) return "bias=true (no bias)";
    if (s.n <= 0 || s.h <= 0 || s.w <= 0)
        return rt::format("input dims n=%d h=%d w=%d (must be positive)", s.n, s.h, s.w);
    // Tensor sizes within 2^40 elements keep every index product and 1-D grid in range.
    const double elems = static_cast<double>(s.n) * s.h * s.w * s.cin;
    if (elems > 1099511627776.0)
        return rt::format("input of %.0f elements (n=%d h=%d w=%d C=%d): too large", elems, s.n, s.h, s.w, s.cin);
    // The kernels index threads and tiles in 32 bits (the default variants here; variant_reason
    // checks the others).
    const DwConvPlan pl = dwconv3x3_geometry(s.n, s.h, s.w, s.cin, s.stride);
    const long long most = std::max(std::max(pl.fwd.items, pl.dgrad.items), pl.wgrad.items);
    if (most > INT_MAX)
        return rt::format("%lld thread tiles (n=%d h=%d w=%d C=%d): too large for 32-bit indexing", most, s.n, s.h, s.w,
                          s.cin);
    return "";
}

void check_bf16(const char* op, const char* name, const bf16* p) { rt::check_device_ptr(op, name, p, 16); }

size_t in_bytes(const DwConvPlan& pl) { return static_cast<size_t>(pl.n) * pl.h * pl.w * pl.c * sizeof(bf16); }
size_t out_bytes(const DwConvPlan& pl) { return static_cast<size_t>(pl.n) * pl.p * pl.q * pl.c * sizeof(bf16); }
size_t w_bytes(const DwConvPlan& pl) { return static_cast<size_t>(pl.c) * 9 * sizeof(bf16); }

// Empty when variant v can run the pass (forward, or dgrad) of the supported shape s, else why.
std::string variant_reason(const ConvShape& s, int v, bool dgrad) {
    const char* pass = dgrad ? "dgrad" : "forward";
    if (v < 0 || v >= kDwVariantCount)
        return rt::format("%s variant %d (valid: 0..%d)", pass, v, kDwVariantCount - 1);
    if (!dw_variant_valid(v, s.stride, dgrad))
        return rt::format("dgrad variant %d (%s) at stride %d (the stride-2 dgrad needs even tile sides)", v,
                          dwconv3x3_variant_name(v), s.stride);
    const DwConvPlan pl = dwconv3x3_geometry(s.n, s.h, s.w, s.cin, s.stride, v, v);
    const long long items = dgrad ? pl.dgrad.items : pl.fwd.items;
    if (items > INT_MAX)
        return rt::format("%s variant %d (%s): %lld thread tiles (n=%d h=%d w=%d C=%d): too large for 32-bit indexing",
                          pass, v, dwconv3x3_variant_name(v), items, s.n, s.h, s.w, s.cin);
    return "";
}

// Empty when wgrad variant v can run (the shape is supported), else why.
std::string wgrad_variant_reason(int v) {
    if (v < 0 || v >= kDwWgradVariantCount)
        return rt::format("wgrad variant %d (valid: 0..%d)", v, kDwWgradVariantCount - 1);
    return "";
}

}  // namespace

void check_dw_bn_backward(const char* op, const DwBnBackward* bnb, int c, size_t x_bytes,
                          std::initializer_list<DwWritten> outs, const char* outs_name) {
    if (!bnb) return;
    SF_CHECK(bnb->act == Act::None || bnb->act == Act::Silu || bnb->act == Act::Relu,
             "%s: BN backward activation %d is not one of none, silu, relu", op, static_cast<int>(bnb->act));
    check_bf16(op, "BN input x", bnb->x);
    const char* names[5] = {"BN gamma", "BN beta", "BN mean", "BN invstd", "BN coef"};
    const float* vecs[5] = {bnb->gamma, bnb->beta, bnb->mean, bnb->invstd, bnb->coef};
    for (int i = 0; i < 5; ++i) {
        rt::check_device_ptr(op, names[i], vecs[i], alignof(float));
        const size_t vb = static_cast<size_t>(i == 4 ? 2 : 1) * c * sizeof(float);
        for (const DwWritten& o : outs)
            SF_CHECK(!rt::overlap(o.p, o.bytes, vecs[i], vb), "%s: %s must not overlap the %s vector", op, outs_name,
                     names[i]);
    }
    for (const DwWritten& o : outs)
        SF_CHECK(!rt::overlap(o.p, o.bytes, bnb->x, x_bytes), "%s: %s must not alias the BN input x", op, outs_name);
}

void check_dw_prologue(const char* op, const DwPrologue* pro, int c, std::initializer_list<DwWritten> outs) {
    if (!pro) return;
    SF_CHECK(pro->act == Act::None || pro->act == Act::Silu || pro->act == Act::Relu,
             "%s: prologue activation %d is not one of none, silu, relu", op, static_cast<int>(pro->act));
    const char* names[4] = {"prologue gamma", "prologue beta", "prologue mean", "prologue invstd"};
    const float* vecs[4] = {pro->gamma, pro->beta, pro->mean, pro->invstd};
    for (int i = 0; i < 4; ++i) {
        rt::check_device_ptr(op, names[i], vecs[i], alignof(float));
        for (const DwWritten& o : outs)
            SF_CHECK(!rt::overlap(o.p, o.bytes, vecs[i], static_cast<size_t>(c) * sizeof(float)),
                     "%s: the output must not alias the %s vector", op, names[i]);
    }
    SF_CHECK(!pro->eval || (pro->eps > 0 && pro->eps < 1e300), "%s: eval-mode prologue needs eps > 0, got %g", op,
             pro->eps);
}

void check_bn_grad_sums(const char* op, const BnGradSums* bng, int c, long long rows, size_t x_bytes,
                        std::initializer_list<DwNamed> read, std::initializer_list<DwNamed> written) {
    if (!bng) return;
    SF_CHECK(bng->act == Act::None || bng->act == Act::Silu || bng->act == Act::Relu,
             "%s: BN-backward epilogue activation %d is not one of none, silu, relu", op, static_cast<int>(bng->act));
    SF_CHECK(rows >= 2, "%s: BatchNorm backward reductions need at least 2 rows, got %lld", op, rows);
    rt::check_device_ptr(op, "bng->x", bng->x, 16);
    for (const DwNamed& o : written)
        SF_CHECK(!rt::overlap(o.p, o.bytes, bng->x, x_bytes), "%s: %s must not alias the BN's input bng->x", op,
                 o.name);
    const size_t vb = static_cast<size_t>(c) * sizeof(float);
    const char* in_names[4] = {"bng->gamma", "bng->beta", "bng->mean", "bng->invstd"};
    const float* ins[4] = {bng->gamma, bng->beta, bng->mean, bng->invstd};
    for (int i = 0; i < 4; ++i) rt::check_device_ptr(op, in_names[i], ins[i], alignof(float));
    const char* out_names[3] = {"bng->dgamma", "bng->dbeta", "bng->coef"};
    const float* outs[3] = {bng->dgamma, bng->dbeta, bng->coef};
    const size_t out_bytes[3] = {vb, vb, 2 * vb};
    for (int i = 0; i < 3; ++i) {
        rt::check_device_ptr(op, out_names[i], outs[i], alignof(float));
        SF_CHECK(!rt::overlap(outs[i], out_bytes[i], bng->x, x_bytes), "%s: %s must not alias the BN's input bng->x",
                 op, out_names[i]);
        for (const std::initializer_list<DwNamed>& list : {read, written})
            for (const DwNamed& o : list)
                SF_CHECK(!rt::overlap(outs[i], out_bytes[i], o.p, o.bytes), "%s: %s must not alias %s", op,
                         out_names[i], o.name);
        for (int j = 0; j < 4; ++j)
            SF_CHECK(!rt::overlap(outs[i], out_bytes[i], ins[j], vb), "%s: %s must not alias %s", op, out_names[i],
                     in_names[j]);
        for (int j = 0; j < i; ++j)
            SF_CHECK(!rt::overlap(outs[i], out_bytes[i], outs[j], out_bytes[j]), "%s: %s must not alias %s", op,
                     out_names[i], out_names[j]);
    }
}

void check_bn_stats_out(const char* op, const BnStatsOut* st, int c, long long count, const float* workspace,
                        size_t workspace_floats, size_t need, std::initializer_list<DwNamed> apart) {
    if (!st) return;
    SF_CHECK(count >= 2, "%s: batch statistics need at least 2 values per channel, got %lld", op, count);
    SF_CHECK(st->momentum >= 0 && st->momentum <= 1, "%s: momentum %g outside [0, 1]", op, st->momentum);
    SF_CHECK(st->eps > 0 && st->eps < 1e300, "%s: eps must be > 0, got %g", op, st->eps);
    rt::check_device_ptr(op, "workspace", workspace, alignof(float));
    SF_CHECK(workspace_floats >= need, "%s: workspace of %zu floats, need %zu", op, workspace_floats, need);
    const size_t vb = static_cast<size_t>(c) * sizeof(float), pb = need * sizeof(float);
    for (const DwNamed& o : apart)
        SF_CHECK(!rt::overlap(workspace, pb, o.p, o.bytes), "%s: the workspace must not alias %s", op, o.name);
    const char* names[4] = {"save_mean", "save_invstd", "running_mean", "running_var"};
    const float* vecs[4] = {st->save_mean, st->save_invstd, st->running_mean, st->running_var};
    for (int i = 0; i < 4; ++i) {
        rt::check_device_ptr(op, names[i], vecs[i], alignof(float));
        for (const DwNamed& o : apart)
            SF_CHECK(!rt::overlap(vecs[i], vb, o.p, o.bytes), "%s: %s must not alias %s", op, names[i], o.name);
        SF_CHECK(!rt::overlap(vecs[i], vb, workspace, pb), "%s: %s must not alias the workspace", op, names[i]);
        for (int j = 0; j < i; ++j)
            SF_CHECK(!rt::overlap(vecs[i], vb, vecs[j], vb), "%s: %s must not alias %s", op, names[i], names[j]);
    }
}

// ---- launchers ----

bool dwconv3x3_supported(const ConvShape& s) { return unsupported_reason(s).empty(); }

bool dwconv3x3_variant_supported(const ConvShape& s, int variant, bool dgrad) {
    return unsupported_reason(s).empty() && variant_reason(s, variant, dgrad).empty();
}

bool dwconv3x3_wgrad_variant_supported(const ConvShape& s, int variant) {
    return unsupported_reason(s).empty() && wgrad_variant_reason(variant).empty();
}

DwConvPlan dwconv3x3_plan(const ConvShape& s, int fwd_variant, int dgrad_variant, int wgrad_variant) {
    const std::string why = unsupported_reason(s);
    SF_CHECK(why.empty(), "dwconv3x3: unsupported shape: %s", why.c_str());
    for (const std::string& bad : {variant_reason(s, fwd_variant, false), variant_reason(s, dgrad_variant, true),
                                   wgrad_variant_reason(wgrad_variant)})
        SF_CHECK(bad.empty(), "dwconv3x3: unsupported %s", bad.c_str());
    return dwconv3x3_geometry(s.n, s.h, s.w, s.cin, s.stride, fwd_variant, dgrad_variant, wgrad_variant);
}

bool dwconv3x3_fused_supported(const ConvShape& s) { return unsupported_reason(s).empty() && s.stride == 1; }

DwFusedPlan dwconv3x3_fused_plan(const ConvShape& s, int max_blocks) {
    const std::string why = unsupported_reason(s);
    SF_CHECK(why.empty(), "dwconv3x3: unsupported shape: %s", why.c_str());
    SF_CHECK(s.stride == 1, "dwconv3x3: the fused backward runs stride 1 only (stride=%d)", s.stride);
    SF_CHECK(max_blocks >= 1, "dwconv3x3: the fused backward's max_blocks must be positive, got %d", max_blocks);
    return dwconv3x3_fused_geometry(s.n, s.h, s.w, s.cin, max_blocks);
}

size_t dwconv3x3_fused_workspace_floats(const ConvShape& s, int max_blocks, bool bn_grad) {
    const DwFusedPlan fp = dwconv3x3_fused_plan(s, max_blocks);
    return fp.workspace_floats + (bn_grad ? fp.bn_grad_floats : 0);
}

const char* dwconv3x3_variant_name(int v) {
    static const char* const names[] = {"8ch 2x4",       "8ch 1x4",       "4ch 2x4",
                                        "4ch 1x4",       "2ch 2x4",       "2ch 4x4",
                                        "8ch 2x4 s8x32", "4ch 2x4 s8x32", "2ch 4x4 s8x32",
                                        "8ch 2x4 lean"};
    static_assert(sizeof(names) / sizeof(names[0]) == kDwVariantCount, "a name per variant");
    return v >= 0 && v < kDwVariantCount ? names[v] : "variant ?";
}

const char* dwconv3x3_wgrad_variant_name(int v) {
    static const char* const names[] = {"8ch 1x4 w1",       "4ch 1x4 w2",       "2ch 1x4 w4",
                                        "4ch 1x4 w1",       "2ch 1x4 w1",       "8ch 1x4 w1 hoist",
                                        "4ch 1x4 w1 hoist", "4ch 1x4 w1 prefetch", "2ch 1x4 w1 prefetch"};
    static_assert(sizeof(names) / sizeof(names[0]) == kDwWgradVariantCount, "a name per wgrad variant");
    return v >= 0 && v < kDwWgradVariantCount ? names[v] : "variant ?";
}

size_t dwconv3x3_workspace_floats(const ConvShape& s) { return dwconv3x3_plan(s).workspace_floats; }

size_t dwconv3x3_stats_workspace_floats(const ConvShape& s, int variant) {
    const DwConvPlan pl = dwconv3x3_plan(s, variant, 0);
    SF_CHECK(dw_variant_staged(variant), "dwconv3x3: variant %d (%s) has no statistics epilogue (the staged ones have)",
             variant, dwconv3x3_variant_name(variant));
    return 3 * static_cast<size_t>(pl.n) * pl.fwd.blocks_h * pl.fwd.blocks_w * static_cast<size_t>(pl.c);
}

size_t dwconv3x3_stats_workspace_floats(const ConvShape& s) {
    size_t most = 0;
    for (int v = 0; v < kDwVariantCount; ++v)
        if (dw_variant_staged(v) && dwconv3x3_variant_supported(s, v, false))
            most = std::max(most, dwconv3x3_stats_workspace_floats(s, v));
    return most;
}

void dwconv3x3_forward_cuda(const rt::Exec& ex, const ConvShape& s, const bf16* x, const bf16* w, bf16* y,
                            const DwPrologue* pro, int variant, const BnStatsOut* stats, float* workspace,
                            size_t workspace_floats) {
    const char* op = "dwconv3x3_forward_cuda";
    rt::check_cuda_exec(op, ex);
    const DwConvPlan pl = dwconv3x3_plan(s, variant, 0);
    SF_CHECK(!pro || dw_variant_prologue(variant),
             "%s: variant %d (%s) has no BN prologue (the direct variants with 8 channels per thread and the staged "
             "ones have)",
             op, variant, dwconv3x3_variant_name(variant));
    SF_CHECK(!stats || dw_variant_staged(variant), "%s: variant %d (%s) has no statistics epilogue (the staged ones have)",
             op, variant, dwconv3x3_variant_name(variant));
    check_bf16(op, "x", x);
    check_bf16(op, "w", w);
    check_bf16(op, "y", y);
    SF_CHECK(!rt::overlap(y, out_bytes(pl), x, in_bytes(pl)) && !rt::overlap(y, out_bytes(pl), w, w_bytes(pl)),
             "%s: y must not alias x or w", op);
    check_dw_prologue(op, pro, pl.c, {{y, out_bytes(pl)}});
    if (stats) {  // the prologue's vectors are read too (empty ranges without one)
        const DwPrologue np = pro ? *pro : DwPrologue{};
        const size_t vb = pro ? static_cast<size_t>(pl.c) * sizeof(float) : 0;
        check_bn_stats_out(op, stats, pl.c, static_cast<long long>(pl.n) * pl.p * pl.q, workspace, workspace_floats,
                           dwconv3x3_stats_workspace_floats(s, variant),
                           {{x, in_bytes(pl), "x"}, {w, w_bytes(pl), "w"}, {y, out_bytes(pl), "y"},
                            {np.gamma, vb, "the prologue gamma"}, {np.beta, vb, "the prologue beta"},
                            {np.mean, vb, "the prologue mean"}, {np.invstd, vb, "the prologue invstd"}});
    }
    dw_launch_forward(ex, pl, x, w, y, pro, stats, workspace);
}

void dwconv3x3_backward_data_cuda(const rt::Exec& ex, const ConvShape& s, const bf16* dy, const bf16* w, bf16* dx,
                                  bool accumulate, int variant) {
    const char* op = "dwconv3x3_backward_data_cuda";
    rt::check_cuda_exec(op, ex);
    const DwConvPlan pl = dwconv3x3_plan(s, 0, variant);
    check_bf16(op, "dy", dy);
    check_bf16(op, "w", w);
    check_bf16(op, "dx", dx);
    SF_CHECK(!rt::overlap(dx, in_bytes(pl), dy, out_bytes(pl)) && !rt::overlap(dx, in_bytes(pl), w, w_bytes(pl)),
             "%s: dx must not alias dy or w", op);
    dw_launch_backward_data(ex, pl, dy, w, dx, accumulate);
}

void dwconv3x3_backward_filter_cuda(const rt::Exec& ex, const ConvShape& s, const bf16* x, const bf16* dy, float* dw,
                                    float* workspace, size_t workspace_floats, const DwPrologue* pro, int variant) {
    const char* op = "dwconv3x3_backward_filter_cuda";
    rt::check_cuda_exec(op, ex);
    const DwConvPlan pl = dwconv3x3_plan(s, 0, 0, variant);
    SF_CHECK(!pro || variant == 0, "%s: the BN prologue runs in variant 0 only (got variant %d, %s)", op, variant,
             dwconv3x3_wgrad_variant_name(variant));
    check_bf16(op, "x", x);
    check_bf16(op, "dy", dy);
    rt::check_device_ptr(op, "dw", dw, alignof(float));
    rt::check_device_ptr(op, "workspace", workspace, 16);
    SF_CHECK(workspace_floats >= pl.workspace_floats,
             "%s: workspace of %zu floats is too small for n=%d h=%d w=%d C=%d stride=%d (need "
             "dwconv3x3_workspace_floats = %zu)",
             op, workspace_floats, pl.n, pl.h, pl.w, pl.c, pl.stride, pl.workspace_floats);
    const size_t dw_bytes = static_cast<size_t>(pl.c) * 9 * sizeof(float);
    const size_t ws_bytes = pl.workspace_floats * sizeof(float);
    SF_CHECK(!rt::overlap(dw, dw_bytes, x, in_bytes(pl)) && !rt::overlap(dw, dw_bytes, dy, out_bytes(pl)) &&
                 !rt::overlap(dw, dw_bytes, workspace, ws_bytes),
             "%s: dw must not alias x, dy or the workspace", op);
    SF_CHECK(!rt::overlap(workspace, ws_bytes, x, in_bytes(pl)) && !rt::overlap(workspace, ws_bytes, dy, out_bytes(pl)),
             "%s: the workspace must not alias x or dy", op);
    check_dw_prologue(op, pro, pl.c, {{dw, dw_bytes}, {workspace, ws_bytes}});
    dw_launch_backward_filter(ex, pl, x, dy, dw, workspace, pro);
}

void dwconv3x3_backward_fused_cuda(const rt::Exec& ex, const ConvShape& s, const bf16* x, const bf16* dy,
                                   const bf16* w, bf16* dx, float* dw, float* workspace, size_t workspace_floats,
                                   bool accumulate, const DwBnBackward* bnb, int max_blocks, const DwPrologue* pro,
                                   const BnGradSums* bng) {
    const char* op = "dwconv3x3_backward_fused_cuda";
    rt::check_cuda_exec(op, ex);
    const DwFusedPlan fp = dwconv3x3_fused_plan(s, max_blocks);
    const size_t need = fp.workspace_floats + (bng ? fp.bn_grad_floats : 0);
    check_bf16(op, "x", x);
    check_bf16(op, "dy", dy);
    check_bf16(op, "w", w);
    check_bf16(op, "dx", dx);
    rt::check_device_ptr(op, "dw", dw, alignof(float));
    rt::check_device_ptr(op, "workspace", workspace, 16);
    SF_CHECK(workspace_floats >= need,
             "%s: workspace of %zu floats is too small for n=%d h=%d w=%d C=%d%s (need "
             "dwconv3x3_fused_workspace_floats = %zu)",
             op, workspace_floats, fp.n, fp.h, fp.w, fp.c, bng ? " with the BN-backward epilogue" : "", need);
    const size_t act = static_cast<size_t>(fp.n) * fp.h * fp.w * fp.c * sizeof(bf16);
    const size_t wb = static_cast<size_t>(fp.c) * 9 * sizeof(bf16);
    const size_t dw_bytes = static_cast<size_t>(fp.c) * 9 * sizeof(float);
    const size_t ws_bytes = need * sizeof(float);
    SF_CHECK(!rt::overlap(dx, act, dy, act) && !rt::overlap(dx, act, x, act) && !rt::overlap(dx, act, w, wb),
             "%s: dx must not alias dy, x or w", op);
    SF_CHECK(!rt::overlap(dw, dw_bytes, x, act) && !rt::overlap(dw, dw_bytes, dy, act) &&
                 !rt::overlap(dw, dw_bytes, dx, act) && !rt::overlap(dw, dw_bytes, workspace, ws_bytes),
             "%s: dw must not alias x, dy, dx or the workspace", op);
    SF_CHECK(!rt::overlap(workspace, ws_bytes, x, act) && !rt::overlap(workspace, ws_bytes, dy, act) &&
                 !rt::overlap(workspace, ws_bytes, dx, act),
             "%s: the workspace must not alias x, dy or dx", op);
    // the BN prologue's inputs: read while dx, dw and the partials are written
    check_dw_bn_backward(op, bnb, fp.c, act, {{dx, act}, {dw, dw_bytes}, {workspace, ws_bytes}},
                         "dx, dw and the workspace");
    check_dw_prologue(op, pro, fp.c, {{dx, act}, {dw, dw_bytes}, {workspace, ws_bytes}});
    if (bng) {
        // The epilogue reduces the prologue's BN: the same input, vectors and activation, in train mode.
        SF_CHECK(pro && !pro->eval,
                 "%s: the BN-backward epilogue (bng) reduces the forward prologue's BatchNorm: it needs a train-mode "
                 "prologue (pro)",
                 op);
        SF_CHECK(bng->x == x, "%s: bng->x must be x (the prologue's pre-BN input)", op);
        SF_CHECK(bng->act == pro->act, "%s: bng->act (%d) must be the prologue's activation (%d)", op,
                 static_cast<int>(bng->act), static_cast<int>(pro->act));
        SF_CHECK(bng->gamma == pro->gamma && bng->beta == pro->beta && bng->mean == pro->mean &&
                     bng->invstd == pro->invstd,
                 "%s: bng's gamma, beta, mean and invstd must be the prologue's", op);
        // The BN-backward prologue's inputs are read too (empty ranges without it).
        const DwBnBackward nb = bnb ? *bnb : DwBnBackward{};
        const size_t cb = bnb ? static_cast<size_t>(fp.c) * sizeof(float) : 0;
        check_bn_grad_sums(op, bng, fp.c, static_cast<long long>(fp.n) * fp.h * fp.w, act,
                           {{dy, act, "dy"}, {w, wb, "w"}, {nb.x, bnb ? act : 0, "bnb->x"}, {nb.gamma, cb, "bnb->gamma"},
                            {nb.beta, cb, "bnb->beta"}, {nb.mean, cb, "bnb->mean"}, {nb.invstd, cb, "bnb->invstd"},
                            {nb.coef, 2 * cb, "bnb->coef"}},
                           {{dx, act, "dx"}, {dw, dw_bytes, "dw"}, {workspace, ws_bytes, "the workspace"}});
    }
    dw_launch_backward_fused(ex, fp, x, dy, w, dx, dw, workspace, accumulate, bnb, pro, bng);
}

}  // namespace kern

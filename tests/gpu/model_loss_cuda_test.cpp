// CUDA fused loss (model/loss.cu) vs the double CPU reference loss_forward_backward_ref<double> on the
// same fp32 logits, soft valid mask and labels, for both variants and these label situations:
//   mixed            fakes 0..4, rotated and unrotated samples, objects on the grid borders, letterbox
//                    rectangles with fractional mask cells, a sample whose gap lies in padding (its
//                    angle and focal-gap weights are 0);
//   plain            no fakes, no rotation (hard negative 0, angle term absent);
//   gaps_in_padding  every gap in padding while rotated: L_ang = 0 (not used), focal-gap guard 0.01,
//                    `sider` offset guard;
//   single           one sample, no padding (padding BCE 0);
//   odd_large        grid 10x40 (w not a warp multiple), logits up to +-25 (focal and BCE clamps);
//   nan_heat         NaN logits: guard values and terms dropped by the NaN rule.
// The soft valid mask is pooled on the device by mask_grid_cuda from a bf16 [gray, mask] input, as the
// training step does; mask_grid_cuda itself is checked bitwise against mask_grid_avg_ref / _min_ref.
// Tolerances (why): every per-cell quantity is computed in double on both sides from the same fp32
// inputs; only the summation order and last-ulp differences of the math library differ, so terms
// agree to ~1e-14 relative (bound 1e-10). Gradients are rounded to fp32 once: per element at most
// 2^-24 relative, hence relative L2 <= 6e-8 (bound 1e-7). Also checked: grad_scale (bitwise for a
// power of two, 1e-7 for 1/3), the forward-only path (same terms bitwise, grads untouched),
// *loss_sum accumulation, two runs and a CUDA-graph replay bitwise identical.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "data/label.h"
#include "kernels/bf16.h"
#include "model/loss.h"
#include "model/loss_cuda.h"
#include "runtime/arena.h"
#include "runtime/cuda_check.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"

namespace {

using model::LossConfig;
using model::LossTerms;
using model::LossVariant;

constexpr int kStride = 4;
constexpr int kChannels = 2;  // gray, mask
constexpr double kTermTol = 1e-10;
constexpr double kGradTol = 1e-7;
constexpr size_t kGuard = 64;  // floats after every gradient tensor that must stay untouched
const float kSentinel = 4321.0f;

struct Case {
    std::string name;
    int n, h, w;
    std::vector<float> zg, zs, zo, za;  // logits (N,h,w,{1,1,4,2})
    std::vector<float> input;           // (N,4h,4w,2), bf16-exact
    std::vector<data::Label> labels;
    size_t cells() const { return static_cast<size_t>(n) * h * w; }
};

data::Label make_label(float gx, float gy, float sx, float sy, float angle, std::vector<std::pair<float, float>> fakes,
                       float x0, float y0, float x1, float y1) {
    data::Label l;
    l.gap_x = gx, l.gap_y = gy, l.slider_x = sx, l.slider_y = sy, l.angle_rad = angle;
    l.num_fakes = static_cast<int>(fakes.size());
    for (size_t k = 0; k < fakes.size(); ++k) l.fake_x[k] = fakes[k].first, l.fake_y[k] = fakes[k].second;
    l.rect_x0 = x0, l.rect_y0 = y0, l.rect_x1 = x1, l.rect_y1 = y1;
    return l;
}

// Input image: random gray, mask = 1 where the pixel centre lies in the label's letterbox rectangle.
// Logits: heatmaps uniform in +-heat_scale, offsets +-2, angles +-1.5.
Case make_case(std::string name, int h, int w, std::vector<data::Label> labels, uint64_t seed, double heat_scale) {
    Case c{std::move(name), static_cast<int>(labels.size()), h, w, {}, {}, {}, {}, {}, std::move(labels)};
    const int H = kStride * h, W = kStride * w;
    const size_t cells = c.cells();
    auto f32 = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
    c.zg = f32(sftest::random_uniform(cells, seed, -heat_scale, heat_scale));
    c.zs = f32(sftest::random_uniform(cells, seed + 1, -heat_scale, heat_scale));
    c.zo = f32(sftest::random_uniform(4 * cells, seed + 2, -2, 2));
    c.za = f32(sftest::random_uniform(2 * cells, seed + 3, -1.5, 1.5));
    const std::vector<double> gray = sftest::random_uniform(static_cast<size_t>(c.n) * H * W, seed + 4, 0, 1);
    c.input.resize(static_cast<size_t>(c.n) * H * W * kChannels);
    for (int b = 0; b < c.n; ++b) {
        const data::Label& l = c.labels[b];
        for (int y = 0; y < H; ++y)
            for (int x = 0; x < W; ++x) {
                const size_t p = (static_cast<size_t>(b) * H + y) * W + x;
                const bool in =
                    x + 0.5 >= l.rect_x0 && x + 0.5 < l.rect_x1 && y + 0.5 >= l.rect_y0 && y + 0.5 < l.rect_y1;
                c.input[p * kChannels] = kern::round_bf16(static_cast<float>(gray[p]));
                c.input[p * kChannels + 1] = in ? 1.0f : 0.0f;
            }
    }
    return c;
}

std::vector<Case> make_cases() {
    const float W = 128, H = 64;  // letterbox of the 16x32 grid
    std::vector<Case> cs;
    cs.push_back(make_case(
        "mixed", 16, 32,
        {make_label(20.3f, 30.7f, 90.2f, 33.1f, 0.02f, {{60.5f, 20.2f}, {100.1f, 50.3f}}, 0, 0, W, H),
         make_label(1.2f, 0.7f, 127.6f, 63.9f, 0.f, {}, 0, 0, W, H),
         make_label(40.6f, 25.5f, 70.f, 30.f, -0.015f, {{126.f, 62.f}, {2.f, 3.f}, {55.5f, 29.9f}, {80.2f, 12.7f}}, 18,
                    6, 110, 58),
         make_label(5.f, 30.f, 60.f, 31.f, 0.01f, {{44.4f, 44.4f}}, 24, 0, W, H),
         make_label(127.9f, 2.1f, 64.f, 62.5f, 0.f, {{3.3f, 60.1f}, {120.f, 1.f}, {64.f, 32.f}}, 0, 9, W, 55)},
        11, 4));
    cs.push_back(make_case("plain", 16, 32,
                           {make_label(30.f, 20.f, 90.f, 22.f, 0, {}, 0, 0, W, H),
                            make_label(64.f, 40.f, 10.f, 41.f, 0, {}, 10, 0, 118, H),
                            make_label(100.f, 10.f, 20.f, 12.f, 0, {}, 0, 0, W, H)},
                           21, 3));
    cs.push_back(make_case("gaps_in_padding", 16, 32,
                           {make_label(6.f, 30.f, 80.f, 30.f, 0.02f, {{50.f, 30.f}}, 32, 0, W, H),
                            make_label(120.f, 20.f, 60.f, 22.f, -0.01f, {}, 0, 0, 96, H)},
                           31, 4));
    cs.push_back(make_case(
        "single", 16, 32,
        {make_label(50.5f, 33.3f, 12.f, 35.f, 0.03f, {{90.f, 30.f}, {20.f, 50.f}, {110.f, 8.f}}, 0, 0, W, H)}, 41, 4));
    cs.push_back(make_case("odd_large", 10, 40,
                           {make_label(70.f, 20.f, 150.f, 22.f, 0.01f, {{30.f, 10.f}}, 0, 4, 160, 36),
                            make_label(159.9f, 39.9f, 0.1f, 0.1f, 0, {{100.f, 20.f}, {10.f, 30.f}}, 7, 0, 153, 40),
                            make_label(80.f, 5.f, 40.f, 35.f, 0.f, {}, 0, 0, 160, 40)},
                           51, 25));
    Case nan_case = cs[0];
    nan_case.name = "nan_heat";
    nan_case.zg[7] = NAN;
    nan_case.zs[200] = NAN;
    cs.push_back(nan_case);
    return cs;
}

// ---- device side ----

void upload(void* dst, const void* src, size_t bytes) {
    SF_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}
template <class T>
std::vector<T> download(const T* src, size_t n) {
    std::vector<T> out(n);
    SF_CUDA_CHECK(cudaMemcpy(out.data(), src, n * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
}

struct GpuResult {
    model::DeviceLossTerms t{};
    double loss_sum = 0;
    std::vector<float> grad[4];  // gap, slider, offset, angle
    bool guards_intact = true;
};

// Every buffer of one loss evaluation in one device arena, inputs uploaded.
struct DeviceLoss {
    rt::Arena arena{"loss_cuda_test", rt::MemKind::Device};
    const Case& c;
    float *z[4] = {}, *grad[4] = {}, *valid = nullptr;
    kern::bf16* input = nullptr;
    data::Label* labels = nullptr;
    void* ws = nullptr;
    size_t ws_bytes = 0;
    model::DeviceLossTerms* out = nullptr;
    double* loss_sum = nullptr;
    static constexpr int kCh[4] = {1, 1, 4, 2};

    explicit DeviceLoss(const Case& cs) : c(cs) {
        const size_t cells = c.cells();
        ws_bytes = model::loss_workspace_bytes(LossConfig{}, c.n, c.h, c.w);
        size_t oz[4], og[4];
        for (int k = 0; k < 4; ++k) {
            oz[k] = arena.reserve(cells * kCh[k] * 4, 256, "logits");
            og[k] = arena.reserve((cells * kCh[k] + kGuard) * 4, 256, "grads");
        }
        const size_t o_in = arena.reserve(c.input.size() * 2, 256, "input");
        const size_t o_v = arena.reserve(cells * 4, 256, "valid");
        const size_t o_l = arena.reserve(c.labels.size() * sizeof(data::Label), 256, "labels");
        const size_t o_ws = arena.reserve(ws_bytes, 256, "workspace");
        const size_t o_out = arena.reserve(sizeof(model::DeviceLossTerms), 256, "out");
        const size_t o_sum = arena.reserve(sizeof(double), 256, "loss_sum");
        arena.allocate();
        arena.seal();
        const std::vector<float>* zs[4] = {&c.zg, &c.zs, &c.zo, &c.za};
        for (int k = 0; k < 4; ++k) {
            z[k] = arena.ptr<float>(oz[k]);
            grad[k] = arena.ptr<float>(og[k]);
            upload(z[k], zs[k]->data(), zs[k]->size() * 4);
        }
        input = arena.ptr<kern::bf16>(o_in);
        std::vector<kern::bf16> in16(c.input.size());
        for (size_t i = 0; i < in16.size(); ++i) in16[i] = kern::float_to_bf16(c.input[i]);
        upload(input, in16.data(), in16.size() * 2);
        valid = arena.ptr<float>(o_v);
        labels = arena.ptr<data::Label>(o_l);
        upload(labels, c.labels.data(), c.labels.size() * sizeof(data::Label));
        ws = arena.at(o_ws);
        out = arena.ptr<model::DeviceLossTerms>(o_out);
        loss_sum = arena.ptr<double>(o_sum);
    }

    void fill_grads_with_sentinel() {
        for (int k = 0; k < 4; ++k) {
            const std::vector<float> s(c.cells() * kCh[k] + kGuard, kSentinel);
            upload(grad[k], s.data(), s.size() * 4);
        }
    }
    void set_loss_sum(double v) { upload(loss_sum, &v, sizeof v); }

    // Enqueues mask pooling + loss on ex's stream (no synchronisation: capturable).
    void enqueue(const rt::Exec& ex, const LossConfig& cfg, bool with_grads, double grad_scale) {
        model::mask_grid_cuda(ex, c.n, kStride * c.h, kStride * c.w, kChannels, kChannels - 1, kStride, input, valid,
                              nullptr);
        const model::HeadLogits<float> zl{c.n, c.h, c.w, z[0], z[1], z[2], z[3]};
        const model::HeadGrads<float> g{grad[0], grad[1], grad[2], grad[3]};
        model::loss_forward_backward_cuda(ex, cfg, zl, valid, labels, with_grads ? &g : nullptr, grad_scale, out,
                                          loss_sum, ws, ws_bytes);
    }

    GpuResult result() const {
        GpuResult r;
        r.t = download(out, 1)[0];
        r.loss_sum = download(loss_sum, 1)[0];
        for (int k = 0; k < 4; ++k) {
            r.grad[k] = download(grad[k], c.cells() * kCh[k] + kGuard);
            for (size_t i = c.cells() * kCh[k]; i < r.grad[k].size(); ++i) r.guards_intact &= r.grad[k][i] == kSentinel;
            r.grad[k].resize(c.cells() * kCh[k]);
        }
        return r;
    }
};

GpuResult run_gpu(const rt::CudaContext& ctx, const Case& c, const LossConfig& cfg, bool with_grads, double grad_scale,
                  double loss_sum0) {
    DeviceLoss d(c);
    d.fill_grads_with_sentinel();
    d.set_loss_sum(loss_sum0);
    SF_CUDA_CHECK(cudaDeviceSynchronize());
    d.enqueue(ctx.exec(), cfg, with_grads, grad_scale);
    ctx.synchronize();
    return d.result();
}

// ---- reference ----

struct RefResult {
    LossTerms t;
    std::vector<double> grad[4];
};

RefResult run_ref(const Case& c, const LossConfig& cfg) {
    const size_t cells = c.cells();
    std::vector<double> m(cells);
    model::mask_grid_avg_ref<double>(c.n, kStride * c.h, kStride * c.w, kChannels, kChannels - 1, kStride,
                                     c.input.data(), m.data());
    const std::vector<double> zg = sftest::to_double(c.zg), zs = sftest::to_double(c.zs), zo = sftest::to_double(c.zo),
                              za = sftest::to_double(c.za);
    RefResult r;
    const int ch[4] = {1, 1, 4, 2};
    for (int k = 0; k < 4; ++k) r.grad[k].assign(cells * ch[k], NAN);
    const model::HeadLogits<double> z{c.n, c.h, c.w, zg.data(), zs.data(), zo.data(), za.data()};
    const model::HeadGrads<double> g{r.grad[0].data(), r.grad[1].data(), r.grad[2].data(), r.grad[3].data()};
    r.t = model::loss_forward_backward_ref<double>(cfg, z, m.data(), c.labels.data(), &g);
    return r;
}

// ---- comparisons ----

const char* const kHeads[4] = {"gap", "slider", "offset", "angle"};

::testing::AssertionResult term_close(const char* name, double got, double ref) {
    const double rel = std::fabs(got - ref) / std::max(std::fabs(ref), 1e-300);
    if (got == ref || rel <= kTermTol || (std::isnan(got) && std::isnan(ref))) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << name << ": got " << got << " ref " << ref << " rel " << rel;
}

void expect_terms(const model::DeviceLossTerms& g, const LossTerms& r, const std::string& what) {
    EXPECT_TRUE(term_close("focal_gap", g.focal_gap, r.focal_gap)) << what;
    EXPECT_TRUE(term_close("focal_slider", g.focal_slider, r.focal_slider)) << what;
    EXPECT_TRUE(term_close("offset", g.offset, r.offset)) << what;
    EXPECT_TRUE(term_close("hard_negative", g.hard_negative, r.hard_negative)) << what;
    EXPECT_TRUE(term_close("angle", g.angle, r.angle)) << what;
    EXPECT_TRUE(term_close("padding_bce", g.padding_bce, r.padding_bce)) << what;
    EXPECT_TRUE(term_close("y_axis", g.y_axis, r.y_axis)) << what;
    EXPECT_TRUE(term_close("total", g.total, r.total)) << what;
    EXPECT_EQ(g.angle_used != 0, r.angle_used) << what;
    EXPECT_EQ(g.dropped_terms, r.dropped_terms) << what;
    EXPECT_EQ(g.nonfinite, std::isfinite(r.total) ? 0 : 1) << what;
    EXPECT_EQ(g.pad, 0) << what;
}

// Relative L2 over the entries where the reference is finite; NaN entries must be NaN on both sides.
void expect_grads(const GpuResult& g, const RefResult& r, double scale, const std::string& what) {
    for (int k = 0; k < 4; ++k) {
        std::vector<double> got, ref;
        size_t nan_mismatch = 0, zero_mismatch = 0;
        for (size_t i = 0; i < r.grad[k].size(); ++i) {
            const double rv = r.grad[k][i] * scale, gv = g.grad[k][i];
            if (std::isnan(rv) || std::isnan(gv)) {
                nan_mismatch += std::isnan(rv) != std::isnan(gv);
                continue;
            }
            // offset and angle gradients are structurally 0 outside their cells: exactly 0 on both sides
            if (k >= 2) zero_mismatch += (rv == 0) != (gv == 0);
            got.push_back(gv);
            ref.push_back(rv);
        }
        EXPECT_EQ(nan_mismatch, 0u) << what << " " << kHeads[k];
        EXPECT_EQ(zero_mismatch, 0u) << what << " " << kHeads[k];
        EXPECT_TRUE(sftest::close_rel_l2(got, ref, kGradTol, what + " grad " + kHeads[k]));
    }
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
bool bitwise_equal(const model::DeviceLossTerms& a, const model::DeviceLossTerms& b) {
    return std::memcmp(&a, &b, sizeof a) == 0;
}

LossConfig config(LossVariant v) {
    LossConfig c;
    c.variant = v;
    return c;
}

// ---- tests ----

TEST(ModelLossCudaGpu, MaskGridMatchesReferencesBitwise) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    struct Shape {
        int n, H, W, C, mask_c, stride;
    };
    const Shape shapes[] = {{2, 64, 128, 2, 1, 4}, {3, 40, 24, 4, 3, 4}, {1, 16, 16, 3, 0, 2}};
    uint64_t seed = 500;
    for (const Shape& s : shapes) {
        const size_t px = static_cast<size_t>(s.n) * s.H * s.W * s.C,
                     cells = size_t(s.n) * (s.H / s.stride) * (s.W / s.stride);
        // Mask values: mostly 0/1 with fractional bf16 values mixed in (the pooling must not assume 0/1).
        const std::vector<double> u = sftest::random_uniform(px, seed += 10, -0.5, 1.5);
        std::vector<float> in(px);
        for (size_t i = 0; i < px; ++i) {
            const double v = u[i] < 0 ? 0.0 : (u[i] > 1 ? 1.0 : u[i]);
            in[i] = kern::round_bf16(static_cast<float>(v));
        }
        std::vector<float> ref_avg(cells), ref_min(cells);
        model::mask_grid_avg_ref<float>(s.n, s.H, s.W, s.C, s.mask_c, s.stride, in.data(), ref_avg.data());
        model::mask_grid_min_ref(s.n, s.H, s.W, s.C, s.mask_c, s.stride, in.data(), ref_min.data());

        rt::Arena arena("mask_grid_test", rt::MemKind::Device);
        const size_t o_in = arena.reserve(px * 2, 256, "input"), o_a = arena.reserve(cells * 4, 256, "avg"),
                     o_m = arena.reserve(cells * 4, 256, "min");
        arena.allocate();
        arena.seal();
        std::vector<kern::bf16> in16(px);
        for (size_t i = 0; i < px; ++i) in16[i] = kern::float_to_bf16(in[i]);
        upload(arena.at(o_in), in16.data(), px * 2);
        SF_CUDA_CHECK(cudaDeviceSynchronize());
        const std::string what = std::to_string(s.n) + "x" + std::to_string(s.H) + "x" + std::to_string(s.W) + "x" +
                                 std::to_string(s.C) + " stride " + std::to_string(s.stride);
        model::mask_grid_cuda(ctx.exec(), s.n, s.H, s.W, s.C, s.mask_c, s.stride, arena.ptr<kern::bf16>(o_in),
                              arena.ptr<float>(o_a), arena.ptr<float>(o_m));
        ctx.synchronize();
        EXPECT_TRUE(bitwise_equal(download(arena.ptr<float>(o_a), cells), ref_avg)) << what << " avg";
        EXPECT_TRUE(bitwise_equal(download(arena.ptr<float>(o_m), cells), ref_min)) << what << " min";
        // One output only.
        SF_CUDA_CHECK(cudaMemset(arena.at(o_a), 0, cells * 4));
        SF_CUDA_CHECK(cudaDeviceSynchronize());  // the legacy-stream memset must land before the kernels
        model::mask_grid_cuda(ctx.exec(), s.n, s.H, s.W, s.C, s.mask_c, s.stride, arena.ptr<kern::bf16>(o_in), nullptr,
                              arena.ptr<float>(o_m));
        model::mask_grid_cuda(ctx.exec(), s.n, s.H, s.W, s.C, s.mask_c, s.stride, arena.ptr<kern::bf16>(o_in),
                              arena.ptr<float>(o_a), nullptr);
        ctx.synchronize();
        EXPECT_TRUE(bitwise_equal(download(arena.ptr<float>(o_a), cells), ref_avg)) << what << " avg alone";
        EXPECT_TRUE(bitwise_equal(download(arena.ptr<float>(o_m), cells), ref_min)) << what << " min alone";
    }
}

TEST(ModelLossCudaGpu, MatchesReferenceBothVariants) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    for (const Case& c : make_cases()) {
        for (LossVariant v : {LossVariant::Sider, LossVariant::Corrected}) {
            const std::string what = c.name + " " + model::loss_variant_name(v);
            const LossConfig cfg = config(v);
            const GpuResult g = run_gpu(ctx, c, cfg, true, 1.0, 0.75);
            const RefResult r = run_ref(c, cfg);
            expect_terms(g.t, r.t, what);
            expect_grads(g, r, 1.0, what);
            EXPECT_TRUE(g.guards_intact) << what << ": wrote past a gradient tensor";
            EXPECT_EQ(g.loss_sum, 0.75 + g.t.total) << what;
        }
    }
}

// The situations the cases are meant to cover really occur (so the comparisons above test them).
TEST(ModelLossCudaGpu, CasesCoverTheIntendedSituations) {
    SF_REQUIRE_GPU();
    const std::vector<Case> cs = make_cases();
    const RefResult mixed = run_ref(cs[0], config(LossVariant::Sider));
    EXPECT_TRUE(mixed.t.angle_used);
    EXPECT_GT(mixed.t.hard_negative, 0.0);
    EXPECT_GT(mixed.t.padding_bce, 0.0);
    const RefResult plain = run_ref(cs[1], config(LossVariant::Sider));
    EXPECT_EQ(plain.t.hard_negative, 0.0);
    EXPECT_EQ(plain.t.angle, 0.0);
    const RefResult pad = run_ref(cs[2], config(LossVariant::Sider));
    EXPECT_FALSE(pad.t.angle_used);  // rotated, but L_ang = 0
    EXPECT_EQ(pad.t.focal_gap, 0.01);
    EXPECT_EQ(pad.t.offset, 0.01);
    const RefResult single = run_ref(cs[3], config(LossVariant::Corrected));
    EXPECT_EQ(single.t.padding_bce, 0.0);
    const RefResult nan_heat = run_ref(cs[5], config(LossVariant::Sider));
    EXPECT_GT(nan_heat.t.dropped_terms, 0);
    EXPECT_EQ(nan_heat.t.focal_gap, 1.0);
}

TEST(ModelLossCudaGpu, GradScaleAndForwardOnly) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const Case c = make_cases()[0];
    for (LossVariant v : {LossVariant::Sider, LossVariant::Corrected}) {
        const std::string what = std::string("mixed ") + model::loss_variant_name(v);
        const LossConfig cfg = config(v);
        const GpuResult one = run_gpu(ctx, c, cfg, true, 1.0, 0.0);
        // A power of two scales every double operation exactly: bitwise 0.25 x the unscaled gradients.
        const GpuResult quarter = run_gpu(ctx, c, cfg, true, 0.25, 0.0);
        EXPECT_TRUE(bitwise_equal(quarter.t, one.t)) << what << ": grad_scale changed the terms";
        for (int k = 0; k < 4; ++k) {
            std::vector<float> scaled(one.grad[k]);
            for (float& x : scaled) x *= 0.25f;
            EXPECT_TRUE(bitwise_equal(quarter.grad[k], scaled)) << what << " " << kHeads[k];
        }
        const GpuResult third = run_gpu(ctx, c, cfg, true, 1.0 / 3.0, 0.0);
        expect_grads(third, run_ref(c, cfg), 1.0 / 3.0, what + " scale 1/3");

        // Forward only: the same terms bit for bit, the gradient buffers untouched.
        const GpuResult fwd = run_gpu(ctx, c, cfg, false, 1.0, 0.0);
        EXPECT_TRUE(bitwise_equal(fwd.t, one.t)) << what;
        for (int k = 0; k < 4; ++k) {
            size_t touched = 0;
            for (float x : fwd.grad[k]) touched += x != kSentinel;
            EXPECT_EQ(touched, 0u) << what << " " << kHeads[k];
        }
    }
}

TEST(ModelLossCudaGpu, DeterministicEagerAndGraphReplay) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    for (const Case& c : make_cases()) {
        const LossConfig cfg = config(c.name == "plain" ? LossVariant::Corrected : LossVariant::Sider);
        DeviceLoss d(c);
        d.fill_grads_with_sentinel();
        d.set_loss_sum(0.0);
        SF_CUDA_CHECK(cudaDeviceSynchronize());
        d.enqueue(ex, cfg, true, 0.5);
        ctx.synchronize();
        const GpuResult first = d.result();
        d.fill_grads_with_sentinel();
        SF_CUDA_CHECK(cudaDeviceSynchronize());
        d.enqueue(ex, cfg, true, 0.5);
        ctx.synchronize();
        const GpuResult second = d.result();

        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        SF_CUDA_CHECK(cudaStreamBeginCapture(ex.stream, cudaStreamCaptureModeThreadLocal));
        d.enqueue(ex, cfg, true, 0.5);
        SF_CUDA_CHECK(cudaStreamEndCapture(ex.stream, &graph));
        SF_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        d.fill_grads_with_sentinel();
        SF_CUDA_CHECK(cudaDeviceSynchronize());
        SF_CUDA_CHECK(cudaGraphLaunch(exec, ex.stream));
        ctx.synchronize();
        const GpuResult replay = d.result();
        SF_CUDA_CHECK(cudaGraphExecDestroy(exec));
        SF_CUDA_CHECK(cudaGraphDestroy(graph));

        EXPECT_TRUE(bitwise_equal(first.t, second.t)) << c.name;
        EXPECT_TRUE(bitwise_equal(first.t, replay.t)) << c.name;
        for (int k = 0; k < 4; ++k) {
            EXPECT_TRUE(bitwise_equal(first.grad[k], second.grad[k])) << c.name << " " << kHeads[k];
            EXPECT_TRUE(bitwise_equal(first.grad[k], replay.grad[k])) << c.name << " " << kHeads[k];
        }
        // *loss_sum += total on each of the three evaluations.
        EXPECT_EQ(replay.loss_sum, ((0.0 + first.t.total) + first.t.total) + first.t.total) << c.name;
    }
}

}  // namespace

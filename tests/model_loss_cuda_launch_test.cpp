// Launch arithmetic of the CUDA loss, mask pooling, decode and metrics (model/loss_cuda.h,
// model/decode_cuda.h), on the CPU: the plan and workspace layout for the model's shapes, plan
// invariants over many shapes, the launchers' documented errors (raised before any launch, so no GPU
// is needed), the DeviceLossTerms -> LossTerms conversion, and MetricSumsView against model::Metrics
// on sums formed as the metrics kernel forms them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "model/decode.h"
#include "model/decode_cuda.h"
#include "model/loss.h"
#include "model/loss_cuda.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"

namespace {

using model::LossPlan;

TEST(ModelLossCudaLaunch, ModelShape) {
    // Batch 128 at 256x512: grid 64x128.
    const LossPlan p = model::loss_plan(128, 64, 128);
    EXPECT_EQ(p.cells, size_t(128) * 64 * 128);
    EXPECT_EQ(p.row_blocks, 128 * 64);
    EXPECT_EQ(p.row_threads, 128);
    EXPECT_EQ(p.sample_blocks, 128);
    EXPECT_EQ(p.grad_blocks, 128 * 64 * 128 / 256);
    EXPECT_EQ(p.off_rows, 0u);
    EXPECT_EQ(p.off_yrow, size_t(128) * 64 * 14 * 8);                 // 917504, a multiple of 256
    EXPECT_EQ(p.off_samples, p.off_yrow + size_t(128) * 64 * 2 * 8);  // + 131072
    EXPECT_EQ(p.off_coefs, p.off_samples + size_t(128) * 32 * 8);     // + 32768
    EXPECT_EQ(p.off_batch, p.off_coefs + size_t(128) * 16 * 8);       // + 16384
    EXPECT_EQ(p.workspace_bytes, p.off_batch + 256);                  // 16 doubles, rounded to 256 bytes
    EXPECT_EQ(p.workspace_bytes, 1097984u);
    EXPECT_EQ(model::loss_workspace_bytes(model::LossConfig{}, 128, 64, 128), p.workspace_bytes);
}

TEST(ModelLossCudaLaunch, OddShape) {
    // 160x40 input: grid 10x40, w not a multiple of a warp; every region rounded up to 256 bytes.
    const LossPlan p = model::loss_plan(3, 10, 40);
    EXPECT_EQ(p.row_threads, 64);
    EXPECT_EQ(p.row_blocks, 30);
    EXPECT_EQ(p.grad_blocks, 5);      // 1200 cells
    EXPECT_EQ(p.off_yrow, 3584u);     // 3*10*14*8 = 3360 -> 3584
    EXPECT_EQ(p.off_samples, 4096u);  // + 480 -> 512
    EXPECT_EQ(p.off_coefs, 4864u);    // + 768
    EXPECT_EQ(p.off_batch, 5376u);    // + 384 -> 512
    EXPECT_EQ(p.workspace_bytes, 5632u);

    EXPECT_EQ(model::loss_row_threads(1), 32);
    EXPECT_EQ(model::loss_row_threads(32), 32);
    EXPECT_EQ(model::loss_row_threads(33), 64);
    EXPECT_EQ(model::loss_row_threads(256), 256);
    EXPECT_EQ(model::loss_row_threads(1000), model::kLossRowMaxThreads);  // the block loops over columns
    EXPECT_EQ(model::mask_grid_blocks(8192), 32u);
    EXPECT_EQ(model::mask_grid_blocks(8193), 33u);
}

// Invariants the kernels rely on, over a sweep of shapes.
TEST(ModelLossCudaLaunch, PlanInvariants) {
    for (int n : {1, 2, 7, 128, 300})
        for (int h : {1, 5, 40, 64, 256})
            for (int w : {1, 31, 32, 33, 80, 128, 257}) {
                const LossPlan p = model::loss_plan(n, h, w);
                const std::string what = std::to_string(n) + "x" + std::to_string(h) + "x" + std::to_string(w);
                EXPECT_EQ(p.row_threads % 32, 0) << what;  // block_sum shuffles whole warps
                EXPECT_LE(p.row_threads, model::kLossRowMaxThreads) << what;
                EXPECT_TRUE(p.row_threads >= w || p.row_threads == model::kLossRowMaxThreads) << what;
                EXPECT_LT(p.row_threads, w + 32) << what;  // no idle warp
                EXPECT_EQ(p.row_blocks, n * h) << what;
                EXPECT_EQ(p.sample_blocks, n) << what;
                EXPECT_GE(size_t(p.grad_blocks) * model::kLossGradThreads, p.cells) << what;
                EXPECT_LT(size_t(p.grad_blocks - 1) * model::kLossGradThreads, p.cells) << what;
                const size_t off[6] = {p.off_rows,  p.off_yrow,  p.off_samples,
                                       p.off_coefs, p.off_batch, p.workspace_bytes};
                const size_t need[5] = {size_t(n) * h * model::kLossRowSlots, size_t(n) * h * model::kLossYRowSlots,
                                        size_t(n) * model::kLossSampleSlots, size_t(n) * model::kLossCoefSlots,
                                        size_t(model::kLossBatchSlots)};
                for (int r = 0; r < 5; ++r) {
                    EXPECT_EQ(off[r] % model::kLossRegionAlign, 0u) << what << " region " << r;
                    EXPECT_GE(off[r + 1] - off[r], need[r] * sizeof(double)) << what << " region " << r;
                    EXPECT_LT(off[r + 1] - off[r], need[r] * sizeof(double) + model::kLossRegionAlign) << what;
                }
            }
}

TEST(ModelLossCudaLaunch, BadShapesRejected) {
    SF_EXPECT_ERROR(model::loss_plan(0, 64, 128), "n=0");
    SF_EXPECT_ERROR(model::loss_plan(-3, 64, 128), "n=-3");
    SF_EXPECT_ERROR(model::loss_plan(2, 0, 128), "h=0");
    SF_EXPECT_ERROR(model::loss_plan(2, 64, 0), "w=0");
    SF_EXPECT_ERROR(model::loss_plan(2, 257, 8), "h=257", "kLossMaxRows");
    SF_EXPECT_ERROR(model::loss_plan(1 << 16, 256, 256), "2^31");
    model::LossConfig bad;
    bad.stride = 0;
    SF_EXPECT_ERROR(model::loss_workspace_bytes(bad, 2, 8, 8), "stride 0");
    bad = model::LossConfig{};
    bad.sigma = 0;
    SF_EXPECT_ERROR(model::loss_workspace_bytes(bad, 2, 8, 8), "sigma 0");
}

// Fake, aligned device addresses: every call below throws before a launch.
struct FakeLoss {
    int n = 4, h = 16, w = 32;
    float* gap = reinterpret_cast<float*>(0x100000);
    float* slider = reinterpret_cast<float*>(0x200000);
    float* offset = reinterpret_cast<float*>(0x300000);
    float* angle = reinterpret_cast<float*>(0x400000);
    float* valid = reinterpret_cast<float*>(0x500000);
    data::Label* labels = reinterpret_cast<data::Label*>(0x600000);
    model::DeviceLossTerms* out = reinterpret_cast<model::DeviceLossTerms*>(0x700000);
    void* ws = reinterpret_cast<void*>(0x800000);
    float* grad[4] = {reinterpret_cast<float*>(0x900000), reinterpret_cast<float*>(0xa00000),
                      reinterpret_cast<float*>(0xb00000), reinterpret_cast<float*>(0xc00000)};
    model::HeadLogits<float> logits() const { return {n, h, w, gap, slider, offset, angle}; }
    model::HeadGrads<float> grads() const { return {grad[0], grad[1], grad[2], grad[3]}; }
    size_t ws_bytes() const { return model::loss_plan(n, h, w).workspace_bytes; }
};

TEST(ModelLossCudaLaunch, LossLauncherRejectsBadArguments) {
    rt::Exec cuda;
    cuda.backend = rt::Backend::Cuda;
    const model::LossConfig cfg;
    const FakeLoss f;
    const model::HeadGrads<float> g = f.grads();
    auto call = [&](const rt::Exec& ex, const model::HeadLogits<float>& z, const float* valid,
                    const data::Label* labels, const model::HeadGrads<float>* grads, model::DeviceLossTerms* out,
                    void* ws, size_t ws_bytes) {
        model::loss_forward_backward_cuda(ex, cfg, z, valid, labels, grads, 1.0, out, nullptr, ws, ws_bytes);
    };
    const size_t wsb = f.ws_bytes();

    SF_EXPECT_ERROR(call(rt::Exec::cpu(), f.logits(), f.valid, f.labels, &g, f.out, f.ws, wsb), "cpu");
    model::HeadLogits<float> z = f.logits();
    z.n = 0;
    SF_EXPECT_ERROR(call(cuda, z, f.valid, f.labels, &g, f.out, f.ws, wsb), "n=0");
    z = f.logits();
    z.h = 300;
    SF_EXPECT_ERROR(call(cuda, z, f.valid, f.labels, &g, f.out, f.ws, wsb), "h=300");
    SF_EXPECT_ERROR(call(cuda, f.logits(), f.valid, nullptr, &g, f.out, f.ws, wsb), "labels must be");
    SF_EXPECT_ERROR(call(cuda, f.logits(), nullptr, f.labels, &g, f.out, f.ws, wsb), "valid_avg");
    SF_EXPECT_ERROR(call(cuda, f.logits(), f.valid, f.labels, &g, nullptr, f.ws, wsb), "out must be");
    z = f.logits();
    z.offset = reinterpret_cast<const float*>(0x300004);
    SF_EXPECT_ERROR(call(cuda, z, f.valid, f.labels, &g, f.out, f.ws, wsb), "logits.offset", "16-byte");
    z = f.logits();
    z.angle = nullptr;
    SF_EXPECT_ERROR(call(cuda, z, f.valid, f.labels, &g, f.out, f.ws, wsb), "logits.angle");
    SF_EXPECT_ERROR(call(cuda, f.logits(), f.valid, f.labels, &g, f.out, nullptr, wsb), "workspace must be");
    SF_EXPECT_ERROR(call(cuda, f.logits(), f.valid, f.labels, &g, f.out, f.ws, wsb - 8), "too small", "n=4 h=16 w=32");
    // A workspace sized for another grid (h/w mismatch).
    SF_EXPECT_ERROR(
        call(cuda, f.logits(), f.valid, f.labels, &g, f.out, f.ws, model::loss_plan(4, 8, 32).workspace_bytes),
        "too small", "h=16");
    model::HeadGrads<float> bad = g;
    bad.angle = nullptr;
    SF_EXPECT_ERROR(call(cuda, f.logits(), f.valid, f.labels, &bad, f.out, f.ws, wsb), "grads->angle");
    bad = g;
    bad.offset = f.offset;
    SF_EXPECT_ERROR(call(cuda, f.logits(), f.valid, f.labels, &bad, f.out, f.ws, wsb), "alias");
    model::LossConfig c2;
    c2.y_tau = 0;
    SF_EXPECT_ERROR(
        model::loss_forward_backward_cuda(cuda, c2, f.logits(), f.valid, f.labels, &g, 1.0, f.out, nullptr, f.ws, wsb),
        "tau 0");
    SF_EXPECT_ERROR(model::loss_forward_backward_cuda(cuda, cfg, f.logits(), f.valid, f.labels, &g, 1.0, f.out,
                                                      reinterpret_cast<double*>(0x4), f.ws, wsb),
                    "loss_sum");
}

TEST(ModelLossCudaLaunch, MaskDecodeMetricsLaunchersRejectBadArguments) {
    rt::Exec cuda;
    cuda.backend = rt::Backend::Cuda;
    auto* in = reinterpret_cast<kern::bf16*>(0x100000);
    auto* avg = reinterpret_cast<float*>(0x200000);
    auto* mn = reinterpret_cast<float*>(0x300000);
    SF_EXPECT_ERROR(model::mask_grid_cuda(rt::Exec::cpu(), 2, 256, 512, 2, 1, 4, in, avg, mn), "cpu");
    SF_EXPECT_ERROR(model::mask_grid_cuda(cuda, 2, 254, 512, 2, 1, 4, in, avg, mn), "254x512", "stride 4");
    SF_EXPECT_ERROR(model::mask_grid_cuda(cuda, 0, 256, 512, 2, 1, 4, in, avg, mn), "bad input shape");
    SF_EXPECT_ERROR(model::mask_grid_cuda(cuda, 2, 256, 512, 2, 2, 4, in, avg, mn), "mask channel 2");
    SF_EXPECT_ERROR(model::mask_grid_cuda(cuda, 2, 256, 512, 2, 1, 4, nullptr, avg, mn), "input");
    SF_EXPECT_ERROR(model::mask_grid_cuda(cuda, 2, 256, 512, 2, 1, 4, in, nullptr, nullptr), "both outputs");

    auto* dec = reinterpret_cast<model::Decoded*>(0x400000);
    SF_EXPECT_ERROR(model::decode_cuda(rt::Exec::cpu(), 2, 64, 128, 4, avg, avg, avg, mn, dec), "cpu");
    SF_EXPECT_ERROR(model::decode_cuda(cuda, 0, 64, 128, 4, avg, avg, avg, mn, dec), "bad decode shape");
    SF_EXPECT_ERROR(model::decode_cuda(cuda, 2, 64, 0, 4, avg, avg, avg, mn, dec), "bad decode shape");
    SF_EXPECT_ERROR(model::decode_cuda(cuda, 2, 64, 128, 0, avg, avg, avg, mn, dec), "stride 0");
    SF_EXPECT_ERROR(model::decode_cuda(cuda, 2, 64, 128, 4, nullptr, avg, avg, mn, dec), "heatmap logits");
    SF_EXPECT_ERROR(model::decode_cuda(cuda, 2, 64, 128, 4, avg, avg, nullptr, mn, dec), "offset logits");
    SF_EXPECT_ERROR(model::decode_cuda(cuda, 2, 64, 128, 4, avg, avg, avg, mn, nullptr), "output");

    auto* labels = reinterpret_cast<data::Label*>(0x500000);
    auto* acc = reinterpret_cast<model::DeviceMetricSums*>(0x600000);
    SF_EXPECT_ERROR(model::metrics_accumulate_cuda(cuda, -1, dec, labels, acc), "n_real=-1");
    SF_EXPECT_ERROR(model::metrics_accumulate_cuda(cuda, 4, dec, nullptr, acc), "labels");
    SF_EXPECT_ERROR(model::metrics_accumulate_cuda(cuda, 4, dec, labels, nullptr), "acc");
    SF_EXPECT_ERROR(model::metrics_accumulate_cuda(rt::Exec::cpu(), 4, dec, labels, acc), "cpu");
}

TEST(ModelLossCudaLaunch, DeviceTermsToLossTerms) {
    model::DeviceLossTerms d{1.5, 2.5, 0.25, 0.125, 0.75, 1.25, 3.5, 9.0, 1, 2, 0, 0};
    const model::LossTerms t = model::to_loss_terms(d);
    EXPECT_EQ(t.focal_gap, 1.5);
    EXPECT_EQ(t.focal_slider, 2.5);
    EXPECT_EQ(t.offset, 0.25);
    EXPECT_EQ(t.hard_negative, 0.125);
    EXPECT_EQ(t.angle, 0.75);
    EXPECT_EQ(t.padding_bce, 1.25);
    EXPECT_EQ(t.y_axis, 3.5);
    EXPECT_EQ(t.total, 9.0);
    EXPECT_TRUE(t.angle_used);
    EXPECT_EQ(t.dropped_terms, 2);
}

// The sums the metrics kernel forms (sample_error per sample, added in sample order) read through
// MetricSumsView give exactly model::Metrics' numbers; an empty view reports 0 like Metrics.
TEST(ModelLossCudaLaunch, MetricSumsViewMatchesMetrics) {
    model::MetricSumsView empty;
    model::Metrics none;
    EXPECT_EQ(empty.count(), none.count());
    EXPECT_EQ(empty.mae_px(), 0.0);
    EXPECT_EQ(empty.rmse_px(), 0.0);
    EXPECT_EQ(empty.hit_le_5px(), 0.0);

    const int n = 37;
    const std::vector<double> u = sftest::random_uniform(8 * n, 7, -1, 1);
    model::Metrics ref;
    model::MetricSumsView v;
    for (int i = 0; i < n; ++i) {
        data::Label l;
        l.gap_x = static_cast<float>(200 + 100 * u[8 * i]), l.gap_y = static_cast<float>(120 + 60 * u[8 * i + 1]);
        l.slider_x = static_cast<float>(60 + 40 * u[8 * i + 2]),
        l.slider_y = static_cast<float>(120 + 60 * u[8 * i + 3]);
        model::Decoded d;  // errors from 0 to ~8 px so that both hit rates are strictly between 0 and 100
        d.gap_x = l.gap_x + static_cast<float>(6 * u[8 * i + 4]),
        d.gap_y = l.gap_y + static_cast<float>(4 * u[8 * i + 5]);
        d.slider_x = l.slider_x + static_cast<float>(5 * u[8 * i + 6]);
        d.slider_y = l.slider_y + static_cast<float>(3 * u[8 * i + 7]);
        ref.add(d, l);
        const model::SampleError e = model::sample_error(d, l);
        ++v.s.n;
        v.s.sum += e.combined;
        v.s.sum_sq += e.combined * e.combined;
        v.s.sum_gap += e.gap;
        v.s.sum_slider += e.slider;
        v.s.hit2 += e.combined <= 2.0;
        v.s.hit5 += e.combined <= 5.0;
    }
    EXPECT_EQ(v.count(), ref.count());
    EXPECT_EQ(v.mae_px(), ref.mae_px());
    EXPECT_EQ(v.rmse_px(), ref.rmse_px());
    EXPECT_EQ(v.gap_mae(), ref.gap_mae());
    EXPECT_EQ(v.slider_mae(), ref.slider_mae());
    EXPECT_EQ(v.hit_le_2px(), ref.hit_le_2px());
    EXPECT_EQ(v.hit_le_5px(), ref.hit_le_5px());
    EXPECT_GT(ref.hit_le_5px(), 0.0);
    EXPECT_LT(ref.hit_le_2px(), 100.0);
}

}  // namespace

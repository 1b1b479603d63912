// CUDA decode and metric sums (model/decode.cu) vs decode_ref and model::Metrics:
//   - decode_cuda on logits vs decode_ref on sigmoid / 0.5*tanh of the same logits (computed here in
//     double, rounded to fp32 as the kernel does): peak scores bit-identical (same cells chosen),
//     coordinates within 1e-4 px; over grids whose cell count is not a multiple of the block, with
//     and without the valid mask, on quantised logits (many tied probabilities: the first maximum
//     must win), saturated logits (ties at 1.0f), NaN logits (the first NaN wins), a fully masked
//     sample and a planted row-alignment case (the weaker object's global maximum lies outside the
//     reference rows r-1..r+1, so the re-search changes it).
//   - two runs bitwise identical.
//   - metrics_accumulate_cuda over two batches (the second with n_real < n) vs model::Metrics fed the
//     same decodes in the same order: every accessor equal bit for bit; n_real = 0 adds nothing.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "data/label.h"
#include "model/decode.h"
#include "model/decode_cuda.h"
#include "runtime/arena.h"
#include "runtime/cuda_check.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"

namespace {

using model::Decoded;

constexpr int kStride = 4;
constexpr double kCoordTol = 1e-4;  // px

struct DecodeCase {
    int n, h, w;
    std::vector<float> zg, zs, zo, valid_min;  // logits (N,h,w), (N,h,w,4); 0/1 mask (N,h,w)
    size_t cells() const { return static_cast<size_t>(n) * h * w; }
    size_t at(int b, int i, int j) const { return (static_cast<size_t>(b) * h + i) * w + j; }
};

// Sample 0: plain random; 1: left third masked; 2: fully masked; 3: NaN logits; 4: planted row
// alignment on small logits (gap peak 12 in row 2; slider's global maximum 10 in the last row, a
// local one 8 in row 3: probabilities distinct in fp32, unlike sigmoid(z >= 17) = 1.0f).
// kind 0: logits quantised to integers (ties), 1: saturating (+-40), 2: continuous.
DecodeCase make_case(int h, int w, int kind, uint64_t seed) {
    DecodeCase c{5, h, w, {}, {}, {}, {}};
    const size_t cells = c.cells();
    const std::vector<double> u = sftest::random_uniform(6 * cells, seed, -1, 1);
    c.zg.resize(cells), c.zs.resize(cells), c.zo.resize(4 * cells), c.valid_min.assign(cells, 1.0f);
    auto logit = [&](double x) {
        return static_cast<float>(kind == 0 ? std::round(4 * x) : (kind == 1 ? 40 * x : 6 * x));
    };
    for (size_t i = 0; i < cells; ++i) c.zg[i] = logit(u[i]), c.zs[i] = logit(u[cells + i]);
    for (size_t i = 0; i < 4 * cells; ++i) c.zo[i] = static_cast<float>(2 * u[2 * cells + i]);
    for (int i = 0; i < h; ++i)
        for (int j = 0; j < w; ++j) {
            if (j < w / 3) c.valid_min[c.at(1, i, j)] = 0;
            c.valid_min[c.at(2, i, j)] = 0;
        }
    c.zg[c.at(3, 0, 5)] = NAN;
    c.zs[c.at(3, 1, 4)] = NAN;
    c.zs[c.at(3, 2, 1)] = NAN;
    for (size_t i = c.at(4, 0, 0); i < cells; ++i)
        c.zg[i] = static_cast<float>(3 * u[i]), c.zs[i] = static_cast<float>(3 * u[cells + i]);
    c.zg[c.at(4, 2, 3)] = 12;
    c.zs[c.at(4, h - 1, 5)] = 10;
    c.zs[c.at(4, 3, 9)] = 8;
    return c;
}

void upload(void* dst, const void* src, size_t bytes) {
    SF_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}
template <class T>
std::vector<T> download(const T* src, size_t n) {
    std::vector<T> out(n);
    SF_CUDA_CHECK(cudaMemcpy(out.data(), src, n * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
}

std::vector<Decoded> decode_on_gpu(const rt::CudaContext& ctx, const DecodeCase& c, bool masked) {
    rt::Arena arena("decode_test", rt::MemKind::Device);
    const size_t cells = c.cells();
    const size_t o_g = arena.reserve(cells * 4, 256, "gap"), o_s = arena.reserve(cells * 4, 256, "slider");
    const size_t o_o = arena.reserve(4 * cells * 4, 256, "offset"), o_v = arena.reserve(cells * 4, 256, "valid");
    const size_t o_d = arena.reserve(c.n * sizeof(Decoded), 256, "decoded");
    arena.allocate();
    arena.seal();
    upload(arena.at(o_g), c.zg.data(), cells * 4);
    upload(arena.at(o_s), c.zs.data(), cells * 4);
    upload(arena.at(o_o), c.zo.data(), 4 * cells * 4);
    upload(arena.at(o_v), c.valid_min.data(), cells * 4);
    SF_CUDA_CHECK(cudaDeviceSynchronize());
    model::decode_cuda(ctx.exec(), c.n, c.h, c.w, kStride, arena.ptr<float>(o_g), arena.ptr<float>(o_s),
                       arena.ptr<float>(o_o), masked ? arena.ptr<float>(o_v) : nullptr, arena.ptr<Decoded>(o_d));
    ctx.synchronize();
    return download(arena.ptr<Decoded>(o_d), c.n);
}

// decode_ref on the fp32 activations the kernel forms: double sigmoid / 0.5*tanh, rounded once.
std::vector<Decoded> decode_on_host(const DecodeCase& c, bool masked) {
    const size_t cells = c.cells();
    std::vector<float> pg(cells), ps(cells), po(4 * cells);
    for (size_t i = 0; i < cells; ++i) {
        pg[i] = static_cast<float>(1.0 / (1.0 + std::exp(-double(c.zg[i]))));
        ps[i] = static_cast<float>(1.0 / (1.0 + std::exp(-double(c.zs[i]))));
    }
    for (size_t i = 0; i < 4 * cells; ++i) po[i] = static_cast<float>(0.5 * std::tanh(double(c.zo[i])));
    std::vector<Decoded> out(c.n);
    model::decode_ref(c.n, c.h, c.w, kStride, pg.data(), ps.data(), po.data(), masked ? c.valid_min.data() : nullptr,
                      out.data());
    return out;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b)); }

void expect_same(const Decoded& g, const Decoded& r, const std::string& what) {
    EXPECT_TRUE(same_bits(g.gap_score, r.gap_score)) << what << ": gap score " << g.gap_score << " vs " << r.gap_score;
    EXPECT_TRUE(same_bits(g.slider_score, r.slider_score))
        << what << ": slider score " << g.slider_score << " vs " << r.slider_score;
    const float got[4] = {g.gap_x, g.gap_y, g.slider_x, g.slider_y},
                ref[4] = {r.gap_x, r.gap_y, r.slider_x, r.slider_y};
    for (int k = 0; k < 4; ++k) EXPECT_NEAR(got[k], ref[k], kCoordTol) << what << " coordinate " << k;
}

TEST(ModelDecodeCudaGpu, MatchesDecodeRef) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    struct Grid {
        int h, w;
    };
    const Grid grids[] = {{16, 32}, {13, 37}, {64, 128}};  // 512, 481 (not a block multiple), the model's grid
    uint64_t seed = 900;
    for (const Grid& g : grids)
        for (int kind = 0; kind < 3; ++kind) {
            const DecodeCase c = make_case(g.h, g.w, kind, seed += 7);
            for (bool masked : {true, false}) {
                const std::vector<Decoded> got = decode_on_gpu(ctx, c, masked), ref = decode_on_host(c, masked);
                for (int b = 0; b < c.n; ++b)
                    expect_same(got[b], ref[b],
                                std::to_string(g.h) + "x" + std::to_string(g.w) + " kind " + std::to_string(kind) +
                                    (masked ? " masked" : " unmasked") + " sample " + std::to_string(b));
                if (masked) {  // the fully masked sample has -inf peaks
                    EXPECT_EQ(ref[2].gap_score, -INFINITY);
                    EXPECT_EQ(ref[2].slider_score, -INFINITY);
                }
                EXPECT_TRUE(std::isnan(ref[3].gap_score));  // the first NaN wins the argmax
                // Planted row alignment: the gap is the reference; the slider's peak (score from the
                // global argmax, in the last row) is replaced by the re-searched one in row 3.
                EXPECT_EQ(ref[4].gap_score, static_cast<float>(1.0 / (1.0 + std::exp(-12.0))));
                EXPECT_EQ(ref[4].slider_score, static_cast<float>(1.0 / (1.0 + std::exp(-10.0))));
                EXPECT_GT(ref[4].slider_y, 3.0f * kStride);
                EXPECT_LT(ref[4].slider_y, 4.0f * kStride);
            }
        }
}

TEST(ModelDecodeCudaGpu, Deterministic) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const DecodeCase c = make_case(13, 37, 0, 77);
    const std::vector<Decoded> a = decode_on_gpu(ctx, c, true), b = decode_on_gpu(ctx, c, true);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(Decoded)), 0);
}

TEST(ModelDecodeCudaGpu, MetricSumsMatchMetrics) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const DecodeCase c = make_case(16, 32, 2, 123);
    const std::vector<Decoded> dec = decode_on_gpu(ctx, c, true);
    // Labels near the decodes (errors 0..~8 px) so that both hit rates lie strictly between 0 and 100.
    const std::vector<double> u = sftest::random_uniform(4 * c.n, 5, -1, 1);
    std::vector<data::Label> labels(c.n);
    for (int i = 0; i < c.n; ++i) {
        labels[i].gap_x = dec[i].gap_x + static_cast<float>(6 * u[4 * i]);
        labels[i].gap_y = dec[i].gap_y + static_cast<float>(1.5 * u[4 * i + 1]);
        labels[i].slider_x = dec[i].slider_x + static_cast<float>(7 * u[4 * i + 2]);
        labels[i].slider_y = dec[i].slider_y + static_cast<float>(1 * u[4 * i + 3]);
    }
    rt::Arena arena("metrics_test", rt::MemKind::Device);  // zero-filled: the sums start at 0
    const size_t o_d = arena.reserve(c.n * sizeof(Decoded), 256, "decoded");
    const size_t o_l = arena.reserve(c.n * sizeof(data::Label), 256, "labels");
    const size_t o_a = arena.reserve(sizeof(model::DeviceMetricSums), 256, "acc");
    arena.allocate();
    arena.seal();
    upload(arena.at(o_d), dec.data(), c.n * sizeof(Decoded));
    upload(arena.at(o_l), labels.data(), c.n * sizeof(data::Label));
    SF_CUDA_CHECK(cudaDeviceSynchronize());
    const rt::Exec& ex = ctx.exec();
    auto* acc = arena.ptr<model::DeviceMetricSums>(o_a);
    model::metrics_accumulate_cuda(ex, c.n, arena.ptr<Decoded>(o_d), arena.ptr<data::Label>(o_l), acc);
    model::metrics_accumulate_cuda(ex, c.n - 2, arena.ptr<Decoded>(o_d), arena.ptr<data::Label>(o_l), acc);
    model::metrics_accumulate_cuda(ex, 0, arena.ptr<Decoded>(o_d), arena.ptr<data::Label>(o_l), acc);
    ctx.synchronize();
    model::MetricSumsView v;
    v.s = download(acc, 1)[0];

    model::Metrics ref;
    for (int i = 0; i < c.n; ++i) ref.add(dec[i], labels[i]);
    for (int i = 0; i < c.n - 2; ++i) ref.add(dec[i], labels[i]);
    EXPECT_EQ(v.count(), ref.count());
    EXPECT_EQ(v.count(), size_t(2 * c.n - 2));
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

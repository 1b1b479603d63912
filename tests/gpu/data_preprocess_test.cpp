// CUDA preprocessing (kernels/preprocess.cu) vs preprocess_ref: the valid mask and the pixel
// values 0 and 255 exactly, every other k/255 within bf16 rounding (|got - ref| <= 2^-8 |ref|),
// for gray and RGB, on the vectorised path (width % 4 == 0, aligned) and the per-pixel fallback
// (odd widths, a misaligned output), with rectangle edges on and between pixel indices; nothing
// is written past the output.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "data/label.h"
#include "kernels/preprocess.h"
#include "runtime/arena.h"
#include "runtime/cuda_check.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"

namespace {

float bf16_to_float(uint16_t v) {
    const uint32_t u = static_cast<uint32_t>(v) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

struct Case {
    int n, h, w, cp;
    size_t out_shift;  // bf16 elements of offset of the output (1 breaks 16-byte alignment)
};

// Rectangles with edges between pixels (2.5), on pixels (3.0), covering the canvas, one pixel.
std::vector<data::Label> labels_for(int n, int h, int w) {
    std::vector<data::Label> out(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
        data::Label& l = out[static_cast<size_t>(i)];
        switch (i % 4) {
            case 0: l.rect_x0 = 2.5f, l.rect_x1 = w - 1.5f, l.rect_y0 = 1.0f, l.rect_y1 = h - 1.0f; break;
            case 1:
                l.rect_x0 = 0, l.rect_x1 = static_cast<float>(w), l.rect_y0 = 0, l.rect_y1 = static_cast<float>(h);
                break;
            case 2: l.rect_x0 = 3.0f, l.rect_x1 = 4.0f, l.rect_y0 = 2.0f, l.rect_y1 = 3.0f; break;
            default: l.rect_x0 = 0, l.rect_x1 = w * 0.5f + 0.25f, l.rect_y0 = h * 0.25f, l.rect_y1 = h - 0.5f; break;
        }
    }
    return out;
}

void run_case(const rt::CudaContext& ctx, const Case& c) {
    const std::string what = "n=" + std::to_string(c.n) + " h=" + std::to_string(c.h) + " w=" + std::to_string(c.w) +
                             " cp=" + std::to_string(c.cp) + " shift=" + std::to_string(c.out_shift);
    const size_t pixels = static_cast<size_t>(c.n) * c.h * c.w;
    const size_t in_bytes = pixels * c.cp, out_elems = pixels * (c.cp + 1);
    const size_t guard = 64;  // bf16 elements after the output that must stay untouched

    std::vector<uint8_t> in(in_bytes);
    const std::vector<double> r = sftest::random_ints(in_bytes, 1234 + in_bytes, 0, 255);
    for (size_t i = 0; i < in_bytes; ++i) in[i] = static_cast<uint8_t>(r[i]);
    in[0] = 0;
    in[in_bytes - 1] = 255;
    const std::vector<data::Label> labels = labels_for(c.n, c.h, c.w);

    rt::Arena arena("preprocess_test", rt::MemKind::Device);
    const size_t in_off = arena.reserve(in_bytes, 256, "pixels");
    const size_t lab_off = arena.reserve(labels.size() * sizeof(data::Label), 256, "labels");
    const size_t out_off = arena.reserve((out_elems + c.out_shift + guard) * 2, 256, "out");
    arena.allocate();
    arena.seal();
    uint16_t* out_dev = arena.ptr<uint16_t>(out_off) + c.out_shift;
    SF_CUDA_CHECK(cudaMemcpy(arena.at(in_off), in.data(), in_bytes, cudaMemcpyHostToDevice));
    SF_CUDA_CHECK(
        cudaMemcpy(arena.at(lab_off), labels.data(), labels.size() * sizeof(data::Label), cudaMemcpyHostToDevice));
    SF_CUDA_CHECK(cudaMemset(out_dev, 0xFF, (out_elems + guard) * 2));  // bf16 NaN everywhere
    SF_CUDA_CHECK(cudaDeviceSynchronize());  // the legacy-stream memset must land before the kernel

    kern::preprocess_cuda(ctx.exec(), c.n, c.h, c.w, c.cp, arena.ptr<uint8_t>(in_off), arena.ptr<data::Label>(lab_off),
                          out_dev);
    ctx.synchronize();
    std::vector<uint16_t> got(out_elems + guard);
    SF_CUDA_CHECK(cudaMemcpy(got.data(), out_dev, got.size() * 2, cudaMemcpyDeviceToHost));

    std::vector<float> ref(out_elems);
    kern::preprocess_ref(c.n, c.h, c.w, c.cp, in.data(), labels.data(), ref.data());
    std::vector<double> mask_got, mask_ref, end_got, end_ref, val_got, val_ref;
    for (size_t i = 0; i < out_elems; ++i) {
        const double g = bf16_to_float(got[i]), f = ref[i];
        if (i % (c.cp + 1) == static_cast<size_t>(c.cp)) {
            mask_got.push_back(g), mask_ref.push_back(f);
        } else if (f == 0.0 || f == 1.0) {
            end_got.push_back(g), end_ref.push_back(f);
        } else {
            val_got.push_back(g), val_ref.push_back(f);
        }
    }
    EXPECT_TRUE(sftest::close_elementwise(mask_got, mask_ref, 0, 0, what + " mask"));
    EXPECT_TRUE(sftest::close_elementwise(end_got, end_ref, 0, 0, what + " values 0 and 255"));
    EXPECT_TRUE(sftest::close_elementwise(val_got, val_ref, 0, 1.0 / 256, what + " values k/255"));
    for (size_t i = out_elems; i < got.size(); ++i)
        ASSERT_EQ(got[i], 0xFFFFu) << what << ": wrote past the end at " << i;
}

TEST(DataPreprocessGpu, MatchesReference) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const Case cases[] = {
        {3, 5, 8, 1, 0},      // gray, vectorised
        {2, 4, 7, 1, 0},      // gray, odd width -> per pixel
        {4, 6, 12, 3, 0},     // RGB, vectorised
        {2, 3, 5, 3, 0},      // RGB, per pixel
        {2, 4, 8, 1, 1},      // misaligned output -> per pixel
        {5, 256, 512, 1, 0},  // the model's input, several blocks per sample
        {2, 256, 512, 3, 0},
    };
    for (const Case& c : cases) run_case(ctx, c);
}

TEST(DataPreprocessGpu, EmptyBatchLaunchesNothing) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    kern::preprocess_cuda(ctx.exec(), 0, 256, 512, 1, nullptr, nullptr, nullptr);
    ctx.synchronize();
}

TEST(DataPreprocessGpu, RefusesBadArguments) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    EXPECT_THROW(kern::preprocess_cuda(ctx.exec(), 1, 4, 4, 2, nullptr, nullptr, nullptr), rt::Error);
    EXPECT_THROW(kern::preprocess_cuda(ctx.exec(), 1, 4, 4, 1, nullptr, nullptr, nullptr), rt::Error);
    EXPECT_THROW(kern::preprocess_cuda(rt::Exec::cpu(), 1, 4, 4, 1, nullptr, nullptr, nullptr), rt::Error);
}

}  // namespace

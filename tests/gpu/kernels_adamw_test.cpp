// CUDA optimizer (kernels/adamw.cu) vs the CPU reference (kernels/adamw_ref.cpp, model/schedule.cpp):
// three steps of grad_norm_cuda + adamw_cuda against grad_norm_ref / clip_factor / adamw_step_ref
// (relative L2 <= 1e-6 on master, m, v; grads left zeroed; bf16 copy == round_bf16(master) exactly;
// the step counter), a non-finite gradient skipping the update bit-exactly, bitwise determinism, and
// the SGDR schedule kernel vs model::sgdr_lr.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/adamw.h"
#include "kernels/adamw_cuda.h"
#include "kernels/bf16.h"
#include "model/schedule.h"
#include "runtime/arena.h"
#include "runtime/cuda_check.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"

namespace {

constexpr size_t kRealistic = 3284270;  // about the model's flat size; n % 4 == 2

// Every buffer of the optimizer in one device arena (zero-filled, as in the real memory plan).
struct DeviceOptim {
    rt::Arena arena{"adamw_test", rt::MemKind::Device};
    size_t n = 0;
    float *master = nullptr, *grad = nullptr, *m = nullptr, *v = nullptr;
    kern::bf16* working = nullptr;
    double* partials = nullptr;
    kern::DeviceStepState* state = nullptr;
    int32_t* epoch = nullptr;

    explicit DeviceOptim(size_t n_) : n(n_) {
        const size_t f = n * sizeof(float) + 16;
        const size_t o_p = arena.reserve(f, 256, "master"), o_g = arena.reserve(f, 256, "grad");
        const size_t o_m = arena.reserve(f, 256, "m"), o_v = arena.reserve(f, 256, "v");
        const size_t o_w = arena.reserve(n * sizeof(kern::bf16) + 16, 256, "working");
        const size_t o_ws = arena.reserve(kern::grad_norm_partials(n) * sizeof(double), 256, "partials");
        const size_t o_s = arena.reserve(sizeof(kern::DeviceStepState), 256, "state");
        const size_t o_e = arena.reserve(sizeof(int32_t), 256, "epoch");
        arena.allocate();
        arena.seal();
        master = arena.ptr<float>(o_p);
        grad = arena.ptr<float>(o_g);
        m = arena.ptr<float>(o_m);
        v = arena.ptr<float>(o_v);
        working = arena.ptr<kern::bf16>(o_w);
        partials = arena.ptr<double>(o_ws);
        state = arena.ptr<kern::DeviceStepState>(o_s);
        epoch = arena.ptr<int32_t>(o_e);
    }
};

// Copies on the context's stream, then waits: the stream does not synchronise with the legacy one.
template <class T>
void upload(const rt::CudaContext& ctx, T* dst, const std::vector<T>& src) {
    SF_CUDA_CHECK(cudaMemcpyAsync(dst, src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice, ctx.exec().stream));
    ctx.synchronize();
}
template <class T>
std::vector<T> download(const rt::CudaContext& ctx, const T* src, size_t n) {
    std::vector<T> out(n);
    SF_CUDA_CHECK(cudaMemcpyAsync(out.data(), src, n * sizeof(T), cudaMemcpyDeviceToHost, ctx.exec().stream));
    ctx.synchronize();
    return out;
}
void put_state(const rt::CudaContext& ctx, kern::DeviceStepState* dst, const kern::DeviceStepState& s) {
    upload(ctx, dst, std::vector<kern::DeviceStepState>{s});
}
kern::DeviceStepState get_state(const rt::CudaContext& ctx, const kern::DeviceStepState* src) {
    return download(ctx, src, 1)[0];
}

std::vector<float> random_floats(size_t n, uint64_t seed, double lo, double hi) {
    const std::vector<double> d = sftest::random_uniform(n, seed, lo, hi);
    return std::vector<float>(d.begin(), d.end());
}

// The host mirror of the optimizer buffers, advanced by the CPU reference.
struct HostOptim {
    std::vector<float> master, m, v;
    explicit HostOptim(size_t n)
        : master(random_floats(n, 1, -1, 1)), m(random_floats(n, 2, -0.01, 0.01)), v(random_floats(n, 3, 0, 1e-4)) {}
};

kern::AdamWHyper hyper(float lr) {
    kern::AdamWHyper h;
    h.lr = lr;  // the fp32 value the device state holds
    h.beta1 = 0.9;
    h.beta2 = 0.999;
    h.eps = 1e-8;
    h.weight_decay = 0.05;
    return h;
}

void init_device(const rt::CudaContext& ctx, DeviceOptim& d, const HostOptim& h) {
    upload(ctx, d.master, h.master);
    upload(ctx, d.m, h.m);
    upload(ctx, d.v, h.v);
    std::vector<kern::bf16> w(d.n);
    for (size_t i = 0; i < d.n; ++i) w[i] = kern::float_to_bf16(h.master[i]);
    upload(ctx, d.working, w);
    put_state(ctx, d.state, kern::DeviceStepState{});
}

// One optimizer step on the device with this step's lr / clip threshold written into the state.
void device_step(const rt::CudaContext& ctx, DeviceOptim& d, const std::vector<float>& grad, float lr, float max_norm,
                 bool with_working = true) {
    kern::DeviceStepState s = get_state(ctx, d.state);
    s.lr = lr;
    s.max_grad_norm = max_norm;
    put_state(ctx, d.state, s);
    upload(ctx, d.grad, grad);
    const kern::AdamWConsts c = kern::adamw_consts(hyper(lr));
    kern::grad_norm_cuda(ctx.exec(), d.n, d.grad, d.partials, c, d.state);
    kern::adamw_cuda(ctx.exec(), d.n, d.master, with_working ? d.working : nullptr, d.grad, d.m, d.v, c, d.state);
    ctx.synchronize();
}

// master/m/v within relative L2 1e-6 of the reference, grads zero, bf16 copy exact.
void expect_matches(const rt::CudaContext& ctx, const DeviceOptim& d, const HostOptim& h, const std::string& what) {
    const std::vector<float> p = download(ctx, d.master, d.n);
    EXPECT_TRUE(sftest::close_rel_l2(sftest::to_double(p), sftest::to_double(h.master), 1e-6, what + " master"));
    EXPECT_TRUE(
        sftest::close_rel_l2(sftest::to_double(download(ctx, d.m, d.n)), sftest::to_double(h.m), 1e-6, what + " m"));
    EXPECT_TRUE(
        sftest::close_rel_l2(sftest::to_double(download(ctx, d.v, d.n)), sftest::to_double(h.v), 1e-6, what + " v"));
    const std::vector<float> g = download(ctx, d.grad, d.n);
    size_t nonzero = 0;
    for (float x : g) nonzero += x != 0.0f;
    EXPECT_EQ(nonzero, 0u) << what << ": gradients not zeroed";
    const std::vector<kern::bf16> w = download(ctx, d.working, d.n);
    size_t bad = 0, first = d.n;
    for (size_t i = 0; i < d.n; ++i)
        if (w[i].bits != kern::float_to_bf16(p[i]).bits && bad++ == 0) first = i;
    EXPECT_EQ(bad, 0u) << what << ": bf16 copy != round_bf16(master) at " << bad << " elements, first " << first;
}

const float kLr[3] = {1e-3f, 5e-4f, 2e-3f};
const float kMaxNorm[3] = {1.0f, 1e9f, 0.0f};  // clipping active, inactive, disabled

TEST(KernelsAdamWGpu, ThreeStepsMatchReference) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    for (size_t n : {size_t(3), size_t(1003), kRealistic}) {
        const std::string tag = "n=" + std::to_string(n);
        DeviceOptim d(n);
        HostOptim h(n);
        init_device(ctx, d, h);
        for (int k = 1; k <= 3; ++k) {
            const std::string what = tag + " step " + std::to_string(k);
            const std::vector<float> g = random_floats(n, 10 + k, -1, 1);
            const double norm = kern::grad_norm_ref(n, g.data());
            const double scale = kern::clip_factor(norm, kMaxNorm[k - 1]);
            kern::adamw_step_ref(n, h.master.data(), g.data(), h.m.data(), h.v.data(), hyper(kLr[k - 1]), k, scale);
            device_step(ctx, d, g, kLr[k - 1], kMaxNorm[k - 1]);
            const kern::DeviceStepState s = get_state(ctx, d.state);
            EXPECT_EQ(s.step, k) << what;
            EXPECT_EQ(s.nonfinite, 0) << what;
            EXPECT_EQ(s.skipped, 0) << what;
            EXPECT_NEAR(s.grad_norm, norm, 1e-6 * norm) << what;
            EXPECT_NEAR(s.clip_scale, scale, 1e-6 * scale) << what;
            const double bc1 = 1 - std::pow(0.9, k);
            EXPECT_NEAR(s.step_size, kLr[k - 1] / bc1, 1e-6 * kLr[k - 1] / bc1) << what;
            EXPECT_NEAR(s.bc2_sqrt, std::sqrt(1 - std::pow(0.999, k)), 1e-6) << what;
            expect_matches(ctx, d, h, what);
        }
    }
}

TEST(KernelsAdamWGpu, NonFiniteGradientSkipsUpdate) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const size_t n = 1003;
    DeviceOptim d(n);
    HostOptim h(n);
    init_device(ctx, d, h);
    std::vector<float> g = random_floats(n, 11, -1, 1);
    kern::adamw_step_ref(n, h.master.data(), g.data(), h.m.data(), h.v.data(), hyper(kLr[0]), 1,
                         kern::clip_factor(kern::grad_norm_ref(n, g.data()), 1.0));
    device_step(ctx, d, g, kLr[0], 1.0f);

    for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
        const std::string what = std::string("bad value ") + std::to_string(bad);
        const std::vector<float> p0 = download(ctx, d.master, n), m0 = download(ctx, d.m, n),
                                 v0 = download(ctx, d.v, n);
        const std::vector<kern::bf16> w0 = download(ctx, d.working, n);
        const kern::DeviceStepState s0 = get_state(ctx, d.state);
        g = random_floats(n, 12, -1, 1);
        g[517] = bad;   // in the float4 body
        g[1002] = bad;  // in the scalar tail
        device_step(ctx, d, g, kLr[1], 1.0f);
        const kern::DeviceStepState s = get_state(ctx, d.state);
        EXPECT_EQ(s.nonfinite, 1) << what;
        EXPECT_EQ(s.step, 1) << what;
        EXPECT_EQ(s.skipped, s0.skipped + 1) << what;
        EXPECT_EQ(std::memcmp(download(ctx, d.master, n).data(), p0.data(), n * sizeof(float)), 0) << what;
        EXPECT_EQ(std::memcmp(download(ctx, d.m, n).data(), m0.data(), n * sizeof(float)), 0) << what;
        EXPECT_EQ(std::memcmp(download(ctx, d.v, n).data(), v0.data(), n * sizeof(float)), 0) << what;
        EXPECT_EQ(std::memcmp(download(ctx, d.working, n).data(), w0.data(), n * sizeof(kern::bf16)), 0) << what;
        const std::vector<float> gz = download(ctx, d.grad, n);
        size_t nonzero = 0;
        for (float x : gz) nonzero += x != 0.0f;
        EXPECT_EQ(nonzero, 0u) << what << ": gradients not zeroed after a skipped step";
    }

    // The next finite step applies as step 2 and clears the flag.
    g = random_floats(n, 13, -1, 1);
    kern::adamw_step_ref(n, h.master.data(), g.data(), h.m.data(), h.v.data(), hyper(kLr[2]), 2,
                         kern::clip_factor(kern::grad_norm_ref(n, g.data()), 1.0));
    device_step(ctx, d, g, kLr[2], 1.0f);
    const kern::DeviceStepState s = get_state(ctx, d.state);
    EXPECT_EQ(s.nonfinite, 0);
    EXPECT_EQ(s.step, 2);
    EXPECT_EQ(s.skipped, 2);
    expect_matches(ctx, d, h, "after skips");
}

TEST(KernelsAdamWGpu, BitwiseDeterministic) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const size_t n = kRealistic;
    DeviceOptim d(n);
    const HostOptim h(n);
    struct Result {
        std::vector<float> master, m, v;
        std::vector<kern::bf16> working;
        kern::DeviceStepState state;
    };
    auto run = [&](bool with_working) {
        init_device(ctx, d, h);
        for (int k = 1; k <= 3; ++k)
            device_step(ctx, d, random_floats(n, 10 + k, -1, 1), kLr[k - 1], kMaxNorm[0], with_working);
        return Result{download(ctx, d.master, n), download(ctx, d.m, n), download(ctx, d.v, n),
                      download(ctx, d.working, n), get_state(ctx, d.state)};
    };
    const Result a = run(true), b = run(true), c = run(false);
    EXPECT_EQ(std::memcmp(a.master.data(), b.master.data(), n * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(a.m.data(), b.m.data(), n * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(a.v.data(), b.v.data(), n * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(a.working.data(), b.working.data(), n * sizeof(kern::bf16)), 0);
    EXPECT_EQ(std::memcmp(&a.state, &b.state, sizeof(a.state)), 0);
    // Without a working copy the math is the same.
    EXPECT_EQ(std::memcmp(a.master.data(), c.master.data(), n * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(&a.state, &c.state, sizeof(a.state)), 0);
}

TEST(KernelsAdamWGpu, SgdrScheduleMatchesReference) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    DeviceOptim d(4);
    kern::DeviceStepState s0;
    s0.step = 7;
    s0.max_grad_norm = 2.5f;
    put_state(ctx, d.state, s0);
    const double base = 1e-3, eta_min = 1e-5;
    struct Cycle {
        int t0, t_mult;
    };
    for (const Cycle c : {Cycle{1, 2}, Cycle{3, 2}, Cycle{2, 3}, Cycle{5, 1}}) {
        for (int32_t e = 0; e <= 20; ++e) {
            upload(ctx, d.epoch, std::vector<int32_t>{e});
            kern::schedule_sgdr_cuda(ctx.exec(), d.state, base, eta_min, c.t0, c.t_mult, d.epoch);
            const kern::DeviceStepState s = get_state(ctx, d.state);
            const double want = model::sgdr_lr(base, eta_min, c.t0, c.t_mult, e);
            EXPECT_NEAR(s.lr, want, 1.2e-7 * want)
                << "T_0=" << c.t0 << " T_mult=" << c.t_mult << " epoch=" << e;  // one fp32 ulp
            EXPECT_EQ(s.step, 7);
            EXPECT_EQ(s.max_grad_norm, 2.5f);
        }
    }
}

}  // namespace

// Launches and autotuning of the cuDNN convolution plans (kernels/conv_cudnn_engine.h): the
// variant pack + cudnnBackendExecute of one engine (plus the scratch variants' add kernel), and the
// timing of candidates on temporary buffers at plan time.
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/conv_cudnn_engine.h"
#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/log.h"

namespace kern::conv_detail {

// Enqueues e for op: `in0`, `in1` are the op's inputs (fprop: x, w; dgrad: dy, w; wgrad: x, dy),
// `dst` its destination (y, dx, dw). Scratch variants write into the workspace's scratch region and
// add it into dst. With `why` set, a failing cudnnBackendExecute is reported instead of thrown.
cudnnStatus_t launch(const rt::Exec& ex, const ConvShape& s, ConvOp op, const Engine& e, const void* in0,
                     const void* in1, void* dst, void* workspace, std::string* why, bool accumulate) {
    SF_CHECK(accumulate || op == ConvOp::Dgrad, "conv launch: only dgrad can overwrite its destination");
    // A beta = 0 dgrad plan (the overwrite mode's) cannot accumulate: refuse rather than lose dx.
    SF_CHECK(!(op == ConvOp::Dgrad && e.accum == ConvAccum::Overwrite && accumulate),
             "conv launch: a beta=0 dgrad plan was asked to accumulate into dx");
    const ConvWorkspaceLayout lay = conv_workspace_layout(e.cudnn_ws, conv_scratch_bytes(op, e.accum, s));
    const bool direct = !accumulate && e.accum == ConvAccum::ScratchBf16;
    void* target = is_scratch(e.accum) && !direct ? static_cast<char*>(workspace) + lay.scratch_offset : dst;
    if (!accumulate && e.accum == ConvAccum::InPlace)
        SF_CUDA_CHECK(cudaMemsetAsync(dst, 0, s.in().numel() * sizeof(bf16), ex.stream));
    void* a = const_cast<void*>(in0);
    void* b = const_cast<void*>(in1);
    const int64_t uids[3] = {kConvUidX, kConvUidW, kConvUidY};
    void* ptrs[3] = {nullptr, nullptr, nullptr};
    switch (op) {
        case ConvOp::Fprop: ptrs[0] = a, ptrs[1] = b, ptrs[2] = target; break;
        case ConvOp::Dgrad: ptrs[0] = target, ptrs[1] = b, ptrs[2] = a; break;
        case ConvOp::Wgrad: ptrs[0] = a, ptrs[1] = target, ptrs[2] = b; break;
    }
    void* ws = e.cudnn_ws ? workspace : nullptr;
    if (why) {
        const cudnnStatus_t st = rt::cudnn_try_execute(ex.cudnn, e.plan, uids, ptrs, 3, ws, why);
        if (st != CUDNN_STATUS_SUCCESS) return st;
    } else {
        rt::cudnn_execute(ex.cudnn, e.plan, uids, ptrs, 3, ws);
    }
    if (op == ConvOp::Dgrad && e.accum == ConvAccum::ScratchBf16 && !direct)
        conv_add_bf16(ex, static_cast<bf16*>(dst), static_cast<const bf16*>(target), s.in().numel());
    else if (op == ConvOp::Wgrad && e.accum == ConvAccum::ScratchF32)
        conv_add_f32(ex, static_cast<float*>(dst), static_cast<const float*>(target), s.weight_numel());
    else if (op == ConvOp::Wgrad && e.accum == ConvAccum::ScratchBf16)
        conv_add_f32_bf16(ex, static_cast<float*>(dst), static_cast<const bf16*>(target), s.weight_numel());
    return CUDNN_STATUS_SUCCESS;
}

namespace {

// Device temporaries for autotuning one shape (freed on scope exit; plan time only).
struct TuneBuffers {
    void* p[5] = {};  // x / dx (bf16), w (bf16), y / dy (bf16), dw (fp32), workspace
    cudaEvent_t start = nullptr, stop = nullptr;
    ~TuneBuffers() {
        for (void* q : p)
            if (q && cudaFree(q) != cudaSuccess) SF_LOG_ERROR("conv autotune: cudaFree failed");
        if (start) cudaEventDestroy(start);
        if (stop) cudaEventDestroy(stop);
    }
};

// Mean ms per launch over `iters` runs after one warm-up; -1 when the engine fails to launch.
double time_engine(const rt::Exec& ex, const ConvShape& s, ConvOp op, const Engine& e, TuneBuffers& b, int iters,
                   bool accumulate) {
    const void* in0 = op == ConvOp::Dgrad ? b.p[2] : b.p[0];
    const void* in1 = op == ConvOp::Wgrad ? b.p[2] : b.p[1];
    void* dst = op == ConvOp::Fprop ? b.p[2] : (op == ConvOp::Dgrad ? b.p[0] : b.p[3]);
    std::string why;
    for (int i = 0; i <= iters; ++i) {
        if (i == 1) SF_CUDA_CHECK(cudaEventRecord(b.start, ex.stream));
        if (launch(ex, s, op, e, in0, in1, dst, b.p[4], &why, accumulate) != CUDNN_STATUS_SUCCESS) {
            SF_LOG_DEBUG("conv autotune: %s failed to launch: %s", e.cfg.identity().c_str(), why.c_str());
            SF_CUDA_CHECK(cudaStreamSynchronize(ex.stream));
            return -1;
        }
    }
    SF_CUDA_CHECK(cudaEventRecord(b.stop, ex.stream));
    SF_CUDA_CHECK(cudaEventSynchronize(b.stop));
    float ms = 0;
    SF_CUDA_CHECK(cudaEventElapsedTime(&ms, b.start, b.stop));
    return static_cast<double>(ms) / iters;
}

}  // namespace

// Times every candidate on temporary buffers (filled with a small finite constant) and returns the
// index of the fastest; -1 when none ran. accumulate = false: dgrad's overwrite mode (an InPlace
// fallback is timed with its zeroing of dx).
int autotune(const rt::Exec& ex, const ConvShape& s, ConvOp op, std::vector<Engine>& cands, int iters,
             bool accumulate) {
    TuneBuffers b;
    size_t ws = 0;
    for (const Engine& e : cands)
        ws = std::max(ws, conv_workspace_layout(e.cudnn_ws, conv_scratch_bytes(op, e.accum, s)).total);
    const size_t bytes[5] = {s.in().numel() * sizeof(bf16), s.weight_numel() * sizeof(bf16),
                             s.out().numel() * sizeof(bf16), s.weight_numel() * sizeof(float), std::max<size_t>(ws, 1)};
    for (int i = 0; i < 5; ++i) {
        SF_CUDA_CHECK(cudaMalloc(&b.p[i], bytes[i]));
        SF_CUDA_CHECK(cudaMemsetAsync(b.p[i], 0x3C, bytes[i], ex.stream));  // bf16 / fp32 ~ 0.0115
    }
    SF_CUDA_CHECK(cudaEventCreate(&b.start));
    SF_CUDA_CHECK(cudaEventCreate(&b.stop));
    int best = -1;
    for (size_t i = 0; i < cands.size(); ++i) {
        cands[i].ms = time_engine(ex, s, op, cands[i], b, iters, accumulate);
        if (cands[i].ms >= 0 && (best < 0 || cands[i].ms < cands[static_cast<size_t>(best)].ms))
            best = static_cast<int>(i);
    }
    SF_CUDA_CHECK(cudaStreamSynchronize(ex.stream));
    return best;
}

}  // namespace kern::conv_detail

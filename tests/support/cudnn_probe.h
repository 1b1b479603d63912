// The engine configurations a cuDNN library (real, or the emulation of tests/emu) proposes for one
// small NHWC 3x3 convolution with chosen x / w / y data types, on a target (a handle on a GPU, or a
// device property descriptor without one). Header-only: it is compiled into whichever suite
// includes it, against whichever cuDNN that suite links.
//
// The rules it checks. Without a device (a device property descriptor), cuDNN 9.19 has an engine
// for a convolution only when x, w and y share one data type (bf16 or fp32): cudnn_same_type_rule,
// which the emulation follows too. Through a GPU's handle (an H100, 2026-11-24, docs/CONV_CUDNN.md)
// it also has one when only the op's output differs from its two inputs (fprop y, dgrad dx, wgrad
// dW: one configuration, the runtime-compiled fallback engine): cudnn_handle_type_rule. The CPU
// suite checks the first on the real library, the gpu suite the second on a GPU (and the first
// under emulation).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "kernels/conv_cudnn_probe.h"
#include "runtime/cudnn_graph.h"

namespace sftest {

inline bool cudnn_same_type_rule(cudnnDataType_t x, cudnnDataType_t w, cudnnDataType_t y) {
    return x == w && w == y;
}

// The op's two inputs share a type: fprop (x, w), dgrad (dy = y, w), wgrad (x, dy = y).
inline bool cudnn_handle_type_rule(kern::ConvOp op, cudnnDataType_t x, cudnnDataType_t w, cudnnDataType_t y) {
    switch (op) {
        case kern::ConvOp::Fprop: return x == w;
        case kern::ConvOp::Dgrad: return y == w;
        case kern::ConvOp::Wgrad: return x == y;
    }
    return false;
}

// Configurations of mode A + fallback for op on n2 8x8 c16->16 k3 p1 with the given types.
inline size_t cudnn_configs_for_types(const rt::CudnnTarget& t, kern::ConvOp op, cudnnDataType_t x,
                                      cudnnDataType_t w, cudnnDataType_t y, std::string* why) {
    const int64_t n = 2, c = 16, h = 8, wd = 8, k = 16, r = 3;
    auto tensor = [](std::vector<int64_t> dims, int64_t uid, cudnnDataType_t dt) {
        rt::CudnnTensorSpec s;
        s.dtype = dt;
        s.dims = dims;
        s.strides = rt::channels_last_strides(dims);
        s.uid = uid;
        return rt::cudnn_tensor(s);
    };
    rt::CudnnDesc tx = tensor({n, c, h, wd}, 1, x), tw = tensor({k, c, r, r}, 2, w), ty = tensor({n, k, h, wd}, 3, y);
    rt::CudnnConvSpec cs;
    cs.pre_pad = cs.post_pad = {1, 1};
    cs.stride = cs.dilation = {1, 1};
    rt::CudnnDesc conv = rt::cudnn_conv_desc(cs);
    rt::CudnnDesc o;
    if (!kern::conv_cudnn_operation(op, tx, tw, ty, conv, 0.0f, &o, why)) return 0;
    rt::CudnnDesc graph;
    if (!rt::cudnn_try_op_graph(t, {&o}, &graph, why)) return 0;
    return rt::cudnn_engine_configs(t, graph, why).size();
}

}  // namespace sftest

// CUDA column sum of bf16 rows, the bias gradient: out (C) += sum over rows of x (rows, C), in two
// deterministic passes (fixed row chunks, fp32 within a chunk, fp64 across chunks). Declared in
// kernels/eltwise_cuda.h; design and numerics: docs/KERNELS_ELTWISE.md.
#include <algorithm>
#include <cstdint>

#include "kernels/cuda_util.cuh"
#include "kernels/eltwise_cuda.h"
#include "runtime/cuda_check.h"
#include "runtime/launch.cuh"
#include "runtime/launch_check.h"

namespace kern {

namespace {

constexpr int kFinalizeX = 32;  // columns per finalize block
constexpr int kFinalizeY = 8;   // chunk lanes per finalize block

// column_sum, pass 1. grid (grid_x, chunks), block (block_x, block_y); W columns per thread (8:
// one 128-bit load, or 1). Each thread adds its rows of the chunk in order in fp32; a fixed
// shared-memory tree combines the row lanes; lane 0 writes part[chunk][column].
template <int W>
__global__ void column_sum_kernel(size_t rows, int c, int chunks, const bfloat* __restrict__ x,
                                  float* __restrict__ part) {
    rt::pdl_entry();
    __shared__ float sm[W][kEltThreads];
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    const bool active = g < c / W;
    float acc[W] = {};
    if (active) {
        const size_t end = chunk_begin(rows, chunks, blockIdx.y + 1);
        for (size_t r = chunk_begin(rows, chunks, blockIdx.y) + threadIdx.y; r < end; r += blockDim.y) {
            const bfloat* p = x + r * c + static_cast<size_t>(W) * g;
            if constexpr (W == 8) {
                float v[8];
                load8_rw(p, v);
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[j] += v[j];
            } else {
                acc[0] += __bfloat162float(*p);
            }
        }
    }
    // Fixed tree over the row lanes (blockDim.y a power of two): lanes [0, s) add lanes [s, 2s).
    const int t = threadIdx.y * blockDim.x + threadIdx.x;
#pragma unroll
    for (int j = 0; j < W; ++j) sm[j][t] = acc[j];
    __syncthreads();
    for (int s = blockDim.y / 2; s > 0; s >>= 1) {
        if (static_cast<int>(threadIdx.y) < s) {
#pragma unroll
            for (int j = 0; j < W; ++j) sm[j][t] += sm[j][t + s * blockDim.x];
        }
        __syncthreads();
    }
    if (active && threadIdx.y == 0) {
        float* p = part + static_cast<size_t>(blockIdx.y) * c + static_cast<size_t>(W) * g;
#pragma unroll
        for (int j = 0; j < W; ++j) p[j] = sm[j][t];
    }
}

// column_sum, pass 2. grid ceil(C/32), block (32, 8): lane y adds chunks y, y + 8, ... in fp64,
// lane 0 adds the 8 lane sums in order; out[column] += the total.
__global__ void column_sum_finalize_kernel(int c, int chunks, const float* __restrict__ part, float* __restrict__ out) {
    rt::pdl_entry();
    finalize_partials<kFinalizeX, kFinalizeY>(c, chunks, part, AddTo{out});
}

}  // namespace

ColumnSumPlan column_sum_plan(size_t rows, int c, bool vector) {
    SF_CHECK(c > 0, "column_sum: C must be positive, got C=%d", c);
    ColumnSumPlan p;
    p.rows = rows;
    p.c = c;
    p.width = vector ? kEltVec : 1;
    SF_CHECK(c % p.width == 0, "column_sum: the vector path needs C %% 8 == 0, got C=%d", c);
    if (rows == 0) return p;
    p.groups = c / p.width;
    p.block_x = std::min(p.groups, 32);
    p.block_y = 1;
    while (p.block_x * p.block_y * 2 <= kEltThreads) p.block_y *= 2;
    p.grid_x = (p.groups + p.block_x - 1) / p.block_x;
    p.chunks = static_cast<int>(std::min(rows, static_cast<size_t>(kColumnSumChunks)));
    p.finalize_blocks = (c + kFinalizeX - 1) / kFinalizeX;
    p.workspace_floats = static_cast<size_t>(p.chunks) * c;
    return p;
}

size_t column_sum_workspace_floats(size_t rows, int c) { return column_sum_plan(rows, c, false).workspace_floats; }

void column_sum_bf16_cuda(const rt::Exec& ex, size_t rows, int c, const bf16* x, float* out, float* ws,
                          size_t ws_floats) {
    const char* op = "column_sum_bf16_cuda";
    rt::check_cuda_exec(op, ex);
    SF_CHECK(c > 0, "%s: C must be positive, got C=%d", op, c);
    if (rows == 0) return;
    rt::check_device_ptr(op, "x", x, sizeof(bf16));
    rt::check_device_ptr(op, "out", out, sizeof(float));
    const bool vector = c % kEltVec == 0 && reinterpret_cast<uintptr_t>(x) % kEltAlign == 0;
    const ColumnSumPlan pl = column_sum_plan(rows, c, vector);
    rt::check_device_ptr(op, "workspace", ws, sizeof(float));
    SF_CHECK(ws_floats >= pl.workspace_floats,
             "%s: workspace of %zu floats is too small (need column_sum_workspace_floats = %zu)", op, ws_floats,
             pl.workspace_floats);
    const dim3 grid(pl.grid_x, pl.chunks), block(pl.block_x, pl.block_y);
    if (vector)
        rt::launch(ex, "column_sum_kernel", column_sum_kernel<8>, grid, block, 0, rows, c, pl.chunks, dev(x), ws);
    else
        rt::launch(ex, "column_sum_kernel", column_sum_kernel<1>, grid, block, 0, rows, c, pl.chunks, dev(x), ws);
    rt::launch(ex, "column_sum_finalize_kernel", column_sum_finalize_kernel, pl.finalize_blocks,
               dim3(kFinalizeX, kFinalizeY), 0, c, pl.chunks, ws, out);
}

}  // namespace kern

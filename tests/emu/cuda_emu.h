// CPU emulation of the CUDA device side, included first by every source rewritten by
// tests/emu/rewrite_cu.py (docs/EMULATION.md). The real CUDA 13 host headers give the types
// (dim3, float4, __nv_bfloat16 with its host conversions); this header adds what only nvcc knows:
// threadIdx & co., __syncthreads, warp shuffles, atomics, read-only loads, the intrinsics the
// kernels use, block-private __shared__ storage and the launch that replaces <<<...>>>.
// Every emulated thread runs on its own fiber (tests/emu/engine.cpp): a barrier or a shuffle
// suspends it until its block (or its 32-lane warp) has arrived.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

// Host compilers see these as attributes or nothing; under emulation every function is host code.
#undef __forceinline__
#define __forceinline__ inline
#undef __launch_bounds__
#define __launch_bounds__(...)

namespace sfemu {

// What the running emulated thread reads as threadIdx/blockIdx/blockDim/gridDim.
struct Registers {
    uint3 thread_idx;
    uint3 block_idx;
    dim3 block_dim;
    dim3 grid_dim;
};
extern Registers* g_regs;  // the running thread's registers (engine.cpp switches it)

// Suspension points (engine.cpp).
void sync_block();              // __syncthreads
void sync_warp(unsigned mask);  // __syncwarp
enum class Shfl : int { Idx, Up, Down, Xor };
// Exchanges `bits` (up to 8 bytes) with the lanes of `mask`; returns the source lane's bits.
uint64_t shuffle(unsigned mask, uint64_t bits, Shfl kind, int arg, int width);
// Block-private static shared memory: one poisoned allocation per (declaration, block). *fresh: the
// allocation was made by this call (the block's first thread to reach the declaration).
void* shared_alloc(const void* tag, size_t bytes, size_t align, bool* fresh);

template <class T>
T& shared(const void* tag, size_t align) {
    static_assert(std::is_trivially_default_constructible<T>::value, "__shared__ types have no constructors");
    const size_t a = align > alignof(T) ? align : alignof(T);
    bool fresh = false;
    void* p = shared_alloc(tag, sizeof(T), a, &fresh);
    // Default-initialised once per block, by the first thread (the poison stays): at -O1 the placement
    // new of an array is a loop over its elements, and running it in every thread of every block was a
    // tenth of the staged kernels' emulated time.
    if (fresh) ::new (p) T;
    return *std::launder(reinterpret_cast<T*>(p));
}

// ---- launches ----

struct LaunchConfig {
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
};
inline LaunchConfig config(dim3 grid, dim3 block, size_t smem = 0, cudaStream_t stream = nullptr) {
    return LaunchConfig{grid, block, smem, stream};
}

// One launch: the kernel with its parameters, copied (converted to the parameter types) at the
// launch as CUDA copies them into the parameter buffer.
struct KernelCall {
    virtual ~KernelCall() = default;
    virtual void run_thread() const = 0;  // the kernel body for the current thread
    virtual const void* entry() const = 0;  // the kernel function (its symbol names it)
};
template <class... P>
struct KernelCallOf final : KernelCall {
    void (*kernel)(P...);
    std::tuple<std::decay_t<P>...> params;
    template <class... A>
    explicit KernelCallOf(void (*k)(P...), A&&... a) : kernel(k), params(std::forward<A>(a)...) {}
    void run_thread() const override { std::apply(kernel, params); }
    const void* entry() const override { return reinterpret_cast<const void*>(kernel); }
};

// Checks the configuration (a bad one sets the error cudaGetLastError returns) and enqueues the
// grid on cfg.stream (runtime.cpp).
void enqueue_launch(const char* name, const LaunchConfig& cfg, std::shared_ptr<const KernelCall> call);

// A kernel compiled only for the emulation (its own tests): no sm_90 record to check it against.
void emulation_only(const void* kernel);
// Replaces the sm_90 kernel table (a path; "" checks nothing): for the emulation's own tests.
void set_kernel_table(const std::string& path);

template <class... P, class... A>
void launch(const char* name, const LaunchConfig& cfg, void (*kernel)(P...), A&&... args) {
    static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
    enqueue_launch(name, cfg, std::make_shared<const KernelCallOf<P...>>(kernel, std::forward<A>(args)...));
}

template <class T>
uint64_t to_bits(const T& v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffles move up to 8 bytes");
    uint64_t b = 0;
    std::memcpy(&b, &v, sizeof(T));
    return b;
}
template <class T>
T from_bits(uint64_t b) {
    T v;
    std::memcpy(&v, &b, sizeof(T));
    return v;
}

}  // namespace sfemu

// ---- built-in variables ----
#define threadIdx (static_cast<const uint3&>(::sfemu::g_regs->thread_idx))
#define blockIdx (static_cast<const uint3&>(::sfemu::g_regs->block_idx))
#define blockDim (static_cast<const dim3&>(::sfemu::g_regs->block_dim))
#define gridDim (static_cast<const dim3&>(::sfemu::g_regs->grid_dim))
constexpr int warpSize = 32;

// ---- synchronisation ----
inline void __syncthreads() { ::sfemu::sync_block(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::sfemu::sync_warp(mask); }
// One OS thread runs every emulated thread, so memory is always coherent; fences order nothing.
inline void __threadfence() {}
inline void __threadfence_block() {}

template <class T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    return ::sfemu::from_bits<T>(::sfemu::shuffle(mask, ::sfemu::to_bits(v), ::sfemu::Shfl::Idx, src, width));
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return ::sfemu::from_bits<T>(
        ::sfemu::shuffle(mask, ::sfemu::to_bits(v), ::sfemu::Shfl::Up, static_cast<int>(delta), width));
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return ::sfemu::from_bits<T>(
        ::sfemu::shuffle(mask, ::sfemu::to_bits(v), ::sfemu::Shfl::Down, static_cast<int>(delta), width));
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    return ::sfemu::from_bits<T>(::sfemu::shuffle(mask, ::sfemu::to_bits(v), ::sfemu::Shfl::Xor, lane_mask, width));
}

// ---- atomics: plain read-modify-write (no two emulated threads ever run at the same time) ----
template <class T>
T atomicAdd(T* p, T v) {
    const T old = *p;
    *p = old + v;
    return old;
}
template <class T>
T atomicMax(T* p, T v) {
    const T old = *p;
    *p = old < v ? v : old;
    return old;
}
template <class T>
T atomicMin(T* p, T v) {
    const T old = *p;
    *p = v < old ? v : old;
    return old;
}
template <class T>
T atomicExch(T* p, T v) {
    const T old = *p;
    *p = v;
    return old;
}
template <class T>
T atomicCAS(T* p, T compare, T v) {
    const T old = *p;
    if (old == compare) *p = v;
    return old;
}

// ---- loads through the read-only / L2 paths: plain loads ----
template <class T>
T __ldg(const T* p) {
    return *p;
}
template <class T>
T __ldcg(const T* p) {
    return *p;
}

// nvcc declares these in the global namespace for device code.
using std::isfinite;
using std::isinf;
using std::isnan;

// ---- intrinsics: IEEE round-to-nearest on the CPU;
// the approximate ones (__expf) use the correctly rounded libm function instead of the GPU's
// approximation, so their last bits differ from a GPU's. ----
inline float __expf(float x) { return std::exp(x); }
// nvcc never contracts them (PTX mul.rn / add.rn); for the build that compiles the kernels with
// contraction (sf_emu_fma_tests) an empty asm hides a product from the add that follows it, and an
// add's operands from the products before it, so the host compiler cannot fuse them either. The
// same definition in every build: these inline functions are shared with the uncontracted sources.
#if defined(__x86_64__)
#define SFEMU_OPAQUE(v) __asm__("" : "+x"(v))
#else
#define SFEMU_OPAQUE(v) __asm__("" : "+m"(v))
#endif
inline float __fmul_rn(float a, float b) {
    float r = a * b;
    SFEMU_OPAQUE(r);
    return r;
}
inline float __fadd_rn(float a, float b) {
    SFEMU_OPAQUE(a);
    SFEMU_OPAQUE(b);
    return a + b;
}
inline double __dadd_rn(double a, double b) {
    SFEMU_OPAQUE(a);
    SFEMU_OPAQUE(b);
    return a + b;
}
inline double __dmul_rn(double a, double b) {
    double r = a * b;
    SFEMU_OPAQUE(r);
    return r;
}

// nvcc's C++ overload of cudaFuncGetAttributes (cuda_runtime.h declares it for nvcc only).
template <class T>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, T* entry) {
    return ::cudaFuncGetAttributes(attr, reinterpret_cast<const void*>(entry));
}

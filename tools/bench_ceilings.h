// `slidefuse bench ceilings`: the two ceilings a profile of the step is read against, measured on
// the GPU in the same run (docs/BENCH.md "Measured ceilings"): device-to-device copy bandwidth
// (bytes read + written per second, the memory-bound ops' ceiling) and a large dense bf16 GEMM
// through cuBLASLt with fp32 accumulation (the tensor-core ops' ceiling), each next to the datasheet
// peak of tools/roofline.h. Plan-time code: it allocates and synchronises.
// JSON (schema "slidefuse.ceilings/1"):
//   {"schema", "device", "datasheet": {"entry", "tensor_tflops", "hbm_gbps"},
//    "copy": {"bytes", "iters", "ms", "gbps", "of_datasheet"},
//    "gemm": {"n", "iters", "ms", "tflops", "of_datasheet", "algo"} | {"error"}}
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/exec.h"
#include "tools/roofline.h"

namespace tools {

extern const char* const kCeilingsSchema;  // "slidefuse.ceilings/1"

struct CeilingOptions {
    size_t copy_bytes = size_t(1) << 30;  // per buffer (two buffers): 1 GiB, far beyond L2
    int gemm_n = 8192;                    // M = N = K
    int warmup = 3, iters = 10;           // untimed, then timed repetitions of each
    bool gemm = true;
};

struct Ceilings {
    std::string device;
    size_t copy_bytes = 0;
    int copy_iters = 0;
    double copy_ms = 0;    // mean per copy
    double copy_gbps = 0;  // 2 * copy_bytes / copy_ms (read + written)
    int gemm_n = 0, gemm_iters = 0;
    double gemm_ms = 0;       // mean per GEMM
    double gemm_tflops = 0;   // 2 n^3 / gemm_ms
    std::string gemm_algo;    // what cuBLASLt chose (its heuristic's first), or why it could not run
    std::string gemm_error;   // non-empty: no GEMM figure
};

// Parses `bench ceilings` options (--copy-mib N, --gemm-n N (0: no GEMM), --warmup, --iters,
// --json FILE). Throws rt::Error naming the bad option.
CeilingOptions parse_ceiling_args(const std::vector<std::string>& args, std::string* json_path, bool* help);

// D = A * B with A, B, D bf16 n x n (column-major), fp32 accumulation and scale, through cuBLASLt
// on ex's stream, `iters` times after `warmup` untimed; returns the mean ms per GEMM and the algorithm
// cuBLASLt's heuristic chose (*algo). a, b, d: device pointers, 16-byte aligned. Throws on a cuBLASLt
// error (naming the call) or when no algorithm is offered.
double gemm_bf16_ms(const rt::Exec& ex, int n, const void* a, const void* b, void* d, int warmup, int iters,
                    std::string* algo);

// Both measurements on ex's device (allocating their buffers, freed on return).
Ceilings measure_ceilings(const rt::Exec& ex, const std::string& device_name, const CeilingOptions& o);

nlohmann::json ceilings_json(const Ceilings& c, const DevicePeaks& peaks);
std::string ceilings_text(const nlohmann::json& doc);

// The measured GEMM TFLOP/s and copy GB/s of a `bench ceilings --json` file, for the roofline of
// `bench step --ceilings FILE`. Throws naming the file for another schema or a GEMM not measured.
struct MeasuredPeaks {
    double tensor_tflops = 0, hbm_gbps = 0;
};
MeasuredPeaks read_ceilings(const std::string& path);

extern const char* const kCeilingsUsage;
// `slidefuse bench ceilings ...` on GPU 0: prints the table, writes the JSON. Throws without a GPU.
int bench_ceilings_command(const std::vector<std::string>& args);

}  // namespace tools

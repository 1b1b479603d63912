#include "tools/bench_ceilings.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>

#include "kernels/bf16.h"
#include "runtime/arena.h"
#include "runtime/cuda_check.h"
#include "runtime/device_info.h"
#include "runtime/error.h"
#include "runtime/stream_timing.h"
#include "tools/cli_numbers.h"

namespace tools {

const char* const kCeilingsSchema = "slidefuse.ceilings/1";

namespace {

// cuBLASLt descriptors of one GEMM, destroyed on scope exit.
struct LtGemm {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t layout = nullptr;  // A, B and D share it (n x n bf16, column-major)
    cublasLtMatmulPreference_t pref = nullptr;
    ~LtGemm() {
        if (pref) cublasLtMatmulPreferenceDestroy(pref);
        if (layout) cublasLtMatrixLayoutDestroy(layout);
        if (op) cublasLtMatmulDescDestroy(op);
    }
};

}  // namespace

CeilingOptions parse_ceiling_args(const std::vector<std::string>& args, std::string* json_path, bool* help) {
    CeilingOptions o;
    *help = false;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& s = args[i];
        if (s == "--help" || s == "-h") {
            *help = true;
            return o;
        }
        SF_CHECK(s == "--copy-mib" || s == "--gemm-n" || s == "--warmup" || s == "--iters" || s == "--json",
                 "bench ceilings: unexpected argument '%s'", s.c_str());
        SF_CHECK(i + 1 < args.size(), "bench ceilings: %s needs a value", s.c_str());
        const std::string& v = args[++i];
        if (s == "--copy-mib") o.copy_bytes = static_cast<size_t>(parse_int_at_least(s, v, 1)) << 20;
        if (s == "--gemm-n") {
            o.gemm_n = parse_int_at_least(s, v, 0);
            SF_CHECK(o.gemm_n % 8 == 0, "bench ceilings: --gemm-n must be a multiple of 8 (16-byte rows), got %d",
                     o.gemm_n);
            o.gemm = o.gemm_n > 0;
        }
        if (s == "--warmup") o.warmup = parse_int_at_least(s, v, 0);
        if (s == "--iters") o.iters = parse_int_at_least(s, v, 1);
        if (s == "--json") *json_path = v;
    }
    return o;
}

double gemm_bf16_ms(const rt::Exec& ex, int n, const void* a, const void* b, void* d, int warmup, int iters,
                    std::string* algo) {
    SF_CHECK(ex.is_cuda() && ex.cublaslt != nullptr, "gemm_bf16_ms: needs a CUDA Exec with a cuBLASLt handle");
    SF_CHECK(n > 0 && n % 8 == 0 && iters >= 1 && warmup >= 0, "gemm_bf16_ms: n %d (multiple of 8), iters %d", n,
             iters);
    LtGemm g;
    SF_CUBLAS_CHECK(cublasLtMatmulDescCreate(&g.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t no = CUBLAS_OP_N;
    SF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSA, &no, sizeof(no)));
    SF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSB, &no, sizeof(no)));
    SF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g.layout, CUDA_R_16BF, n, n, n));
    const size_t ws_bytes = size_t(32) << 20;
    SF_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&g.pref));
    SF_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(g.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                         sizeof(ws_bytes)));
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    SF_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(ex.cublaslt, g.op, g.layout, g.layout, g.layout, g.layout, g.pref, 1,
                                                   &res, &found));
    SF_CHECK(found > 0, "gemm_bf16_ms: cuBLASLt offers no algorithm for a %dx%dx%d bf16 GEMM", n, n, n);
    rt::Arena ws("gemm workspace", rt::MemKind::Device);
    const size_t ws_off = ws.reserve(std::max<size_t>(res.workspaceSize, 1), 256, "cuBLASLt workspace");
    ws.allocate();
    void* workspace = res.workspaceSize ? ws.at(ws_off) : nullptr;
    if (algo) {
        int id = -1, tile = -1;
        size_t got = 0;
        cublasLtMatmulAlgoConfigGetAttribute(&res.algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &got);
        cublasLtMatmulAlgoConfigGetAttribute(&res.algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &got);
        *algo = rt::format("cuBLASLt heuristic's first: algo %d, tile %d, waves %.2f, workspace %zu B", id, tile,
                           static_cast<double>(res.wavesCount), res.workspaceSize);
    }
    const float alpha = 1.0f, beta = 0.0f;
    return rt::stream_mean_ms(ex.stream, warmup, iters, [&] {
        SF_CUBLAS_CHECK(cublasLtMatmul(ex.cublaslt, g.op, &alpha, a, g.layout, b, g.layout, &beta, d, g.layout, d,
                                       g.layout, &res.algo, workspace, res.workspaceSize, ex.stream));
    });
}

Ceilings measure_ceilings(const rt::Exec& ex, const std::string& device_name, const CeilingOptions& o) {
    SF_CHECK(ex.is_cuda(), "bench ceilings: needs the CUDA backend");
    Ceilings c;
    c.device = device_name;
    {
        rt::Arena buf("copy ceiling", rt::MemKind::Device);
        const size_t src_off = buf.reserve(o.copy_bytes, 256, "copy source");
        const size_t dst_off = buf.reserve(o.copy_bytes, 256, "copy destination");
        buf.allocate();
        void* src = buf.at(src_off);
        void* dst = buf.at(dst_off);
        SF_CUDA_CHECK(cudaMemsetAsync(src, 0x3C, o.copy_bytes, ex.stream));
        c.copy_bytes = o.copy_bytes;
        c.copy_iters = o.iters;
        c.copy_ms = rt::stream_mean_ms(ex.stream, o.warmup, o.iters, [&] {
            SF_CUDA_CHECK(cudaMemcpyAsync(dst, src, o.copy_bytes, cudaMemcpyDeviceToDevice, ex.stream));
        });
        c.copy_gbps = 2.0 * static_cast<double>(o.copy_bytes) / (c.copy_ms * 1e6);
    }
    if (!o.gemm) {
        c.gemm_error = "not measured (--gemm-n 0)";
        return c;
    }
    const int n = o.gemm_n;
    const size_t elems = static_cast<size_t>(n) * n;
    // Random values in [-1, 1): tensor-core power (and so clocks) depends on the data; zeros would
    // flatter the ceiling.
    std::vector<kern::bf16> host(elems);
    uint64_t state = 0x9E3779B97F4A7C15ull;
    for (kern::bf16& v : host) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        v = kern::float_to_bf16(static_cast<float>(static_cast<int64_t>(state >> 40) - (1 << 23)) / (1 << 23));
    }
    rt::Arena buf("GEMM ceiling", rt::MemKind::Device);
    size_t off[3];
    for (size_t& x : off) x = buf.reserve(elems * sizeof(kern::bf16), 256, "GEMM operand");
    buf.allocate();
    void* a = buf.at(off[0]);
    void* b = buf.at(off[1]);
    void* d = buf.at(off[2]);
    SF_CUDA_CHECK(cudaMemcpy(a, host.data(), elems * sizeof(kern::bf16), cudaMemcpyHostToDevice));
    SF_CUDA_CHECK(cudaMemcpy(b, host.data(), elems * sizeof(kern::bf16), cudaMemcpyHostToDevice));
    c.gemm_n = n;
    c.gemm_iters = o.iters;
    try {
        c.gemm_ms = gemm_bf16_ms(ex, n, a, b, d, o.warmup, o.iters, &c.gemm_algo);
        c.gemm_tflops = 2.0 * std::pow(static_cast<double>(n), 3) / (c.gemm_ms * 1e9);
    } catch (const rt::Error& e) {
        c.gemm_error = e.what();
    }
    return c;
}

nlohmann::json ceilings_json(const Ceilings& c, const DevicePeaks& p) {
    auto share = [](double got, double peak) { return peak > 0 ? nlohmann::json(got / peak) : nlohmann::json(); };
    nlohmann::json gemm;
    if (c.gemm_error.empty())
        gemm = {{"n", c.gemm_n},
                {"iters", c.gemm_iters},
                {"ms", c.gemm_ms},
                {"tflops", c.gemm_tflops},
                {"of_datasheet", share(c.gemm_tflops, p.tensor_tflops)},
                {"algo", c.gemm_algo}};
    else
        gemm = {{"error", c.gemm_error}};
    return {{"schema", kCeilingsSchema},
            {"device", c.device},
            {"datasheet",
             {{"entry", p.entry}, {"source", p.source}, {"tensor_tflops", p.tensor_tflops}, {"hbm_gbps", p.hbm_gbps}}},
            {"copy",
             {{"bytes", c.copy_bytes},
              {"iters", c.copy_iters},
              {"ms", c.copy_ms},
              {"gbps", c.copy_gbps},
              {"of_datasheet", share(c.copy_gbps, p.hbm_gbps)}}},
            {"gemm", gemm}};
}

std::string ceilings_text(const nlohmann::json& d) {
    auto pct = [](const nlohmann::json& v) {
        return v.is_null() ? std::string("datasheet peak unknown")
                           : rt::format("%.0f%% of the datasheet peak", 100.0 * v.get<double>());
    };
    const nlohmann::json& c = d["copy"];
    std::string out = rt::format("measured ceilings on %s (datasheet: %s)\n", d["device"].get<std::string>().c_str(),
                                 d["datasheet"]["entry"].get<std::string>().empty()
                                     ? "not in the table"
                                     : d["datasheet"]["entry"].get<std::string>().c_str());
    out += rt::format("  device-to-device copy   %9.1f GB/s  (read + written; %.0f MiB, %.3f ms per copy; %s)\n",
                      c["gbps"].get<double>(), c["bytes"].get<double>() / (1 << 20), c["ms"].get<double>(),
                      pct(c["of_datasheet"]).c_str());
    const nlohmann::json& g = d["gemm"];
    if (g.contains("error"))
        out += "  bf16 GEMM              not measured: " + g["error"].get<std::string>() + "\n";
    else
        out += rt::format("  bf16 GEMM (fp32 acc.)  %9.1f TFLOP/s (n = %d, %.3f ms per GEMM; %s; %s)\n",
                          g["tflops"].get<double>(), g["n"].get<int>(), g["ms"].get<double>(),
                          pct(g["of_datasheet"]).c_str(), g["algo"].get<std::string>().c_str());
    return out;
}

MeasuredPeaks read_ceilings(const std::string& path) {
    std::ifstream f(path);
    SF_CHECK(f.good(), "--ceilings: cannot read '%s'", path.c_str());
    nlohmann::json d;
    try {
        f >> d;
    } catch (const nlohmann::json::exception& e) {
        SF_FAIL("--ceilings: '%s' is not JSON (%s)", path.c_str(), e.what());
    }
    SF_CHECK(d.is_object() && d.value("schema", std::string()) == kCeilingsSchema,
             "--ceilings: '%s' is not a %s record (slidefuse bench ceilings --json)", path.c_str(), kCeilingsSchema);
    const nlohmann::json& g = d["gemm"];
    SF_CHECK(g.is_object() && g.contains("tflops") && g["tflops"].is_number() && g["tflops"].get<double>() > 0,
             "--ceilings: '%s' has no measured GEMM (%s)", path.c_str(),
             g.is_object() && g.contains("error") ? g["error"].get<std::string>().c_str() : "no gemm.tflops");
    const nlohmann::json& c = d["copy"];
    SF_CHECK(c.is_object() && c.contains("gbps") && c["gbps"].is_number() && c["gbps"].get<double>() > 0,
             "--ceilings: '%s' has no measured copy bandwidth (copy.gbps)", path.c_str());
    return MeasuredPeaks{g["tflops"].get<double>(), c["gbps"].get<double>()};
}

const char* const kCeilingsUsage =
    "usage: slidefuse bench ceilings [--copy-mib 1024] [--gemm-n 8192] [--warmup 3] [--iters 10] [--json OUT]\n"
    "  the ceilings a profile of the step is read against, measured on GPU 0 (docs/BENCH.md): a\n"
    "  device-to-device copy of two --copy-mib buffers (GB/s counting bytes read and written) and an\n"
    "  n x n x n bf16 GEMM with fp32 accumulation through cuBLASLt (TFLOP/s; --gemm-n 0 skips it),\n"
    "  each beside the datasheet peak of the roofline table.\n";

int bench_ceilings_command(const std::vector<std::string>& args) {
    std::string json_path;
    bool help = false;
    const CeilingOptions o = parse_ceiling_args(args, &json_path, &help);
    if (help) {
        std::fputs(kCeilingsUsage, stdout);
        return 0;
    }
    const rt::DeviceInfo d = rt::query_device_info(0);
    SF_CHECK(d.available, "bench ceilings: no usable CUDA device: %s", d.reason.c_str());
    rt::CudaContext ctx;
    const Ceilings c = measure_ceilings(ctx.exec(), d.name, o);
    const nlohmann::json doc = ceilings_json(c, peaks_for_device(d.name));
    std::fputs(ceilings_text(doc).c_str(), stdout);
    if (!json_path.empty()) {
        std::ofstream f(json_path);
        SF_CHECK(f.good(), "bench ceilings: cannot write '%s'", json_path.c_str());
        f << doc.dump(2) << "\n";
        SF_CHECK(f.good(), "bench ceilings: writing '%s' failed", json_path.c_str());
        std::printf("wrote %s\n", json_path.c_str());
    }
    return c.gemm_error.empty() || !o.gemm ? 0 : 1;
}

}  // namespace tools

// `slidefuse bench ceilings` without a GPU (tools/bench_ceilings.h): its options, the JSON document
// and table from given figures (shares of the datasheet peaks, a GEMM that could not run, a device
// not in the peak table), and the refusal without a device. The measurement itself is a gpu test
// (tests/gpu/tools_bench_ceilings_test.cpp).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "tests/support/compare.h"
#include "tests/support/ceilings_fixture.h"
#include "tools/bench_ceilings.h"
#include "tools/bench_step.h"

namespace {

tools::CeilingOptions parse(const std::vector<std::string>& args, std::string* json = nullptr) {
    std::string j;
    bool help = false;
    const tools::CeilingOptions o = tools::parse_ceiling_args(args, json ? json : &j, &help);
    EXPECT_FALSE(help);
    return o;
}

TEST(BenchCeilings, Options) {
    const tools::CeilingOptions d = parse({});
    EXPECT_EQ(d.copy_bytes, size_t(1) << 30);
    EXPECT_EQ(d.gemm_n, 8192);
    EXPECT_TRUE(d.gemm);
    std::string json;
    const tools::CeilingOptions o =
        parse({"--copy-mib", "64", "--gemm-n", "0", "--iters", "5", "--warmup", "0", "--json", "c.json"}, &json);
    EXPECT_EQ(o.copy_bytes, size_t(64) << 20);
    EXPECT_FALSE(o.gemm);
    EXPECT_EQ(o.iters, 5);
    EXPECT_EQ(o.warmup, 0);
    EXPECT_EQ(json, "c.json");
    bool help = false;
    std::string j;
    SF_EXPECT_ERROR(tools::parse_ceiling_args({"--gemm-n", "100"}, &j, &help), "multiple of 8", "100");
    SF_EXPECT_ERROR(tools::parse_ceiling_args({"--iters", "0"}, &j, &help), "--iters", ">= 1", "'0'");
    SF_EXPECT_ERROR(tools::parse_ceiling_args({"--copy-mib", "x"}, &j, &help), "--copy-mib", "'x'");
    SF_EXPECT_ERROR(tools::parse_ceiling_args({"--copy-mib"}, &j, &help), "--copy-mib needs a value");
    SF_EXPECT_ERROR(tools::parse_ceiling_args({"--size", "1"}, &j, &help), "unexpected argument '--size'");
    tools::parse_ceiling_args({"--help"}, &j, &help);
    EXPECT_TRUE(help);
}

TEST(BenchCeilings, DocumentAndTable) {
    tools::Ceilings c;
    c.device = "NVIDIA H100 80GB HBM3";
    c.copy_bytes = size_t(1) << 30;
    c.copy_iters = 10;
    c.copy_ms = 0.7158;
    c.copy_gbps = 2.0 * c.copy_bytes / (c.copy_ms * 1e6);  // 3000 GB/s
    c.gemm_n = 8192;
    c.gemm_iters = 10;
    c.gemm_ms = 1.4;
    c.gemm_tflops = 2.0 * 8192.0 * 8192.0 * 8192.0 / (c.gemm_ms * 1e9);
    c.gemm_algo = "cuBLASLt heuristic's first: algo 66";
    const tools::DevicePeaks p = tools::peaks_for_device(c.device);
    ASSERT_TRUE(p.known());
    const nlohmann::json d = tools::ceilings_json(c, p);
    EXPECT_EQ(d["schema"], "slidefuse.ceilings/1");
    EXPECT_NEAR(d["copy"]["of_datasheet"].get<double>(), c.copy_gbps / p.hbm_gbps, 1e-12);
    EXPECT_NEAR(d["gemm"]["of_datasheet"].get<double>(), c.gemm_tflops / p.tensor_tflops, 1e-12);
    EXPECT_EQ(d["gemm"]["n"], 8192);
    const std::string t = tools::ceilings_text(d);
    EXPECT_NE(t.find("device-to-device copy"), std::string::npos) << t;
    EXPECT_NE(t.find("% of the datasheet peak"), std::string::npos) << t;
    EXPECT_NE(t.find("algo 66"), std::string::npos) << t;

    c.gemm_error = "cublasLtMatmulDescCreate: CUBLAS_STATUS_NOT_SUPPORTED";
    c.device = "Some Future GPU";
    const nlohmann::json e = tools::ceilings_json(c, tools::peaks_for_device(c.device));
    EXPECT_TRUE(e["gemm"].contains("error"));
    EXPECT_FALSE(e["gemm"].contains("tflops"));
    EXPECT_TRUE(e["copy"]["of_datasheet"].is_null());
    const std::string te = tools::ceilings_text(e);
    EXPECT_NE(te.find("not measured: cublasLtMatmulDescCreate"), std::string::npos) << te;
    EXPECT_NE(te.find("datasheet peak unknown"), std::string::npos) << te;
}

TEST(BenchCeilings, MeasuredCeilingsBecomeTheRooflinePeaks) {
    tools::Ceilings c = sftest::measured_h100_ceilings();
    const std::string path = ::testing::TempDir() + "sf_ceilings_test.json";
    sftest::write_ceilings(path, c);
    const tools::MeasuredPeaks m = tools::read_ceilings(path);
    EXPECT_EQ(m.tensor_tflops, 733.25);
    EXPECT_EQ(m.hbm_gbps, 2950.5);
    tools::StepBenchOptions o = tools::parse_step_bench_args({"--ceilings", path});
    EXPECT_EQ(o.peak_tflops, 733.25);
    EXPECT_EQ(o.peak_gbps, 2950.5);
    o = tools::parse_step_bench_args({"--ceilings", path, "--peak-tflops", "800"});  // explicit wins
    EXPECT_EQ(o.peak_tflops, 800.0);
    EXPECT_EQ(o.peak_gbps, 2950.5);
    const tools::DevicePeaks p = tools::peaks_for_device(c.device, o.peak_tflops, o.peak_gbps);
    EXPECT_NE(p.source.find("--ceilings"), std::string::npos) << p.source;

    c.gemm_error = "cublasLtMatmul: CUBLAS_STATUS_EXECUTION_FAILED";
    sftest::write_ceilings(path, c);
    SF_EXPECT_ERROR(tools::read_ceilings(path), "has no measured GEMM", "EXECUTION_FAILED");
    {
        std::ofstream f(path);
        f << "{\"schema\": \"slidefuse.bench/1\"}";
    }
    SF_EXPECT_ERROR(tools::read_ceilings(path), "is not a slidefuse.ceilings/1 record");
    SF_EXPECT_ERROR(tools::read_ceilings(path + ".absent"), "cannot read");
    SF_EXPECT_ERROR(tools::parse_step_bench_args({"--peak-tflops", "-3"}), "--peak-tflops", "a number >= 0", "'-3'");
    std::remove(path.c_str());
}

TEST(BenchCeilings, NeedsAGpu) {
    std::string why;
    if (sftest::gpu_available(&why)) GTEST_SKIP() << "a GPU is present";
    SF_EXPECT_ERROR(tools::bench_ceilings_command({"--copy-mib", "1"}), "bench ceilings: no usable CUDA device");
}

}  // namespace

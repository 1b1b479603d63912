// A `bench ceilings --json` file as an H100 run would write it (copy 2950.5 GB/s, GEMM 733.25
// TFLOP/s), for the tests of the commands that read measured ceilings as their roofline's peaks.
#pragma once
#include <fstream>
#include <string>

#include "tools/bench_ceilings.h"

namespace sftest {

inline tools::Ceilings measured_h100_ceilings() {
    tools::Ceilings c;
    c.device = "NVIDIA H100 80GB HBM3";
    c.copy_bytes = 1 << 20;
    c.copy_ms = 0.001;
    c.copy_gbps = 2950.5;
    c.gemm_n = 8192;
    c.gemm_ms = 1.5;
    c.gemm_tflops = 733.25;
    return c;
}

inline void write_ceilings(const std::string& path, const tools::Ceilings& c) {
    std::ofstream f(path);
    f << tools::ceilings_json(c, tools::peaks_for_device(c.device)).dump();
}

}  // namespace sftest

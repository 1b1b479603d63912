// `slidefuse devices`: the CUDA device report of every GPU and whether this build runs on it
// (runtime/device_report.h). scripts/run.sh asks it whether to run the GPU preset. Exit codes:
// 0 device 0 is usable, 2 no usable CUDA device, 3 device 0 is not supported by this build.
// `--cudnn-json FILE` also writes device 0's cuDNN device property JSON (rt::cudnn_device_prop_json):
// what `slidefuse plan --cudnn-device FILE` builds plans for on a machine without that GPU.
#include <cstdio>
#include <fstream>

#include "runtime/cuda_check.h"
#include "runtime/cudnn_graph.h"
#include "runtime/device_info.h"
#include "runtime/device_report.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "tools/commands.h"

namespace tools {

namespace {

// Device 0's cuDNN device property JSON into `path`.
void write_cudnn_json(const std::string& path) {
    const rt::CudaContext ctx(0);
    const std::string json = rt::cudnn_device_prop_json(ctx.exec().cudnn);
    std::ofstream f(path, std::ios::binary);
    SF_CHECK(f.good(), "devices: cannot write '%s'", path.c_str());
    f << json << "\n";
    SF_CHECK(f.good(), "devices: writing '%s' failed", path.c_str());
    std::printf("wrote device 0's cuDNN device properties to %s (%zu bytes)\n", path.c_str(), json.size());
}

}  // namespace

int cmd_devices(const std::vector<std::string>& args) {
    if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
        std::printf(
            "usage: slidefuse devices [--cudnn-json FILE]\n"
            "  prints each CUDA device, its compute capability, driver and runtime versions and whether this\n"
            "  build runs on it; exit 0: device 0 is usable, 2: no usable device, 3: device 0 unsupported\n"
            "  --cudnn-json FILE: also write device 0's cuDNN device property JSON, for\n"
            "  `slidefuse plan --cudnn-device FILE` on machines without that GPU\n");
        return 0;
    }
    std::string cudnn_json;
    if (!args.empty() && args[0] == "--cudnn-json") {
        SF_CHECK(args.size() == 2, "devices: --cudnn-json needs one FILE (got %zu arguments)", args.size() - 1);
        cudnn_json = args[1];
    } else {
        SF_CHECK(args.empty(), "devices: unexpected argument '%s' (only --cudnn-json FILE)", args[0].c_str());
    }
    const std::vector<rt::ArchTarget> archs = rt::parse_cuda_architectures(rt::built_cuda_architectures());
    rt::DeviceInfo d = rt::query_device_info(0);
    if (!d.available) {
        std::printf("no usable CUDA device: %s (driver CUDA %s, runtime CUDA %s)\n", d.reason.c_str(),
                    d.cuda_driver_version ? rt::cuda_version_string(d.cuda_driver_version).c_str() : "none",
                    rt::cuda_version_string(d.cuda_runtime_version).c_str());
        return 2;
    }
    int rc = 0;
    for (int i = 0; d.available; d = rt::query_device_info(++i)) {
        rt::DeviceSupport s = rt::decide_device_support(d.cc_major * 10 + d.cc_minor, d.cuda_driver_version,
                                                        d.cuda_runtime_version, archs);
        std::string why;
        SF_CUDA_CHECK(cudaSetDevice(i));
        if (s.ok && !rt::device_loads_kernels(&why)) {  // the driver has the last word
            s.ok = false;
            s.message = "it cannot load this build's kernels (" + why + ")";
        }
        std::printf("%s\n", rt::device_report_line(d, s).c_str());
        if (!s.ok) std::printf("  not supported: %s\n", s.message.c_str());
        if (i == 0 && !s.ok) rc = 3;
    }
    if (!cudnn_json.empty() && rc == 0) write_cudnn_json(cudnn_json);
    return rc;
}

}  // namespace tools

// `slidefuse plan [--height H] [--width W] [--batch N] [--channels C] [--backend cuda|cpu]
// [--json FILE] [--cudnn-device FILE [--conv-policy deterministic|autotune] [--verbose]]`: the memory
// plan without a GPU (tools/plan_report.h) and, with a device property JSON, every cuDNN plan the
// CUDA step builds, built by the real cuDNN for that device (tools/plan_cudnn.h).
#include <cstdio>
#include <fstream>

#include "runtime/error.h"
#include "tools/commands.h"
#include "tools/eval_model.h"  // parse_positive_int
#include "tools/plan_cudnn.h"
#include "tools/plan_fusion.h"
#include "tools/plan_report.h"
#include "tools/plan_roofline.h"
#include "tools/cli_numbers.h"

namespace tools {

const char* plan_usage() {
    return "usage: slidefuse plan [--height H] [--width W] [--batch N] [--channels C] [--backend cuda|cpu] "
           "[--up-order upsample_first|conv_first] [--fuse-expand-dw] [--fuse-dw-pw] [--merge-heads]\n"
           "                      [--fuse-head-bn] [--fuse-up-bn] [--dw-fused-bwd] [--dw-fused-bwd-bn] "
           "[--dw-fused-bn-grad]\n"
           "                      [--dw-stats] [--pw-stats] [--pw-bn-grad] [--pw-bn-bwd] [--pw-fused-bwd]\n"
           "                      [--head-bn-grad] [--head-bn-dx]\n"
           "                      [--json FILE]\n"
           "                      [--cudnn-device DEVICE.json [--conv-policy deterministic|autotune] [--verbose]\n"
           "                       [--fusion-graphs [--time]]]\n"
           "                      [--roofline [--device NAME] [--ceilings FILE] [--peak-tflops T] [--peak-gbps G]]\n"
           "  the memory plan (parameters, optimizer state, activations, activation gradients, workspace, bytes\n"
           "  zeroed per micro-step) for an input size and batch, without a GPU.\n"
           "  --cudnn-device: also build every cuDNN convolution plan of the CUDA step with the cuDNN library\n"
           "  installed here, for the GPU a device property JSON describes (configs/devices/*.json, or one written\n"
           "  on the GPU by `slidefuse devices --cudnn-json FILE`); no GPU needed. `--cudnn-device gpu`: the same\n"
           "  through a cuDNN handle on this machine's GPU 0. The workspace then includes the conv workspace;\n"
           "  exit 1 when a convolution the step needs has no cuDNN plan.\n"
           "  --fusion-graphs: also ask cuDNN whether the BatchNorm fusion graphs (conv + genstats; scale + bias +\n"
           "  identity/ReLU/SiLU + conv [+ genstats]) have engines and plans for that device (tools/plan_fusion.h)\n"
           "  --time (with --cudnn-device gpu): execute the graphs the step would use on the GPU, each timed against\n"
           "  the plain conv + the step's own BN kernels for the same work and checked against them, and the\n"
           "  project's own 1x1 conv in the same roles on the 1x1 shapes (tools/plan_fusion_time.h,\n"
           "  docs/KERNELS_PWCONV.md)\n"
           "  --up-order: the fusion up paths' order (model.fusion_up_order, docs/MODEL.md)\n"
           "  --fuse-expand-dw: the fused LiteBlock (model.fuse_expand_dw, CUDA only; docs/GPU_STEP.md)\n"
           "  --fuse-dw-pw: depthwise BN + SiLU inside the following 1x1 conv (model.fuse_dw_pw, CUDA only)\n"
           "  --merge-heads: the four heads' conv1 as one 128 -> 256 ConvBN (model.merge_heads, CUDA only)\n"
           "  --fuse-head-bn: each head's conv1 BN + ReLU inside its conv2, the conv1 bias folded into that BN\n"
           "  (model.fuse_head_bn, CUDA only)\n"
           "  --fuse-up-bn: the up paths' upsample (conv_first) inside their BN passes' loads (model.fuse_up_bn, CUDA "
           "only)\n"
           "  --dw-fused-bwd ... --head-bn-dx: the CUDA step's kernel switches, as `bench step` takes them (its\n"
           "  --help; --dw-fused-bn-grad implies --fuse-expand-dw, --head-bn-grad --fuse-head-bn, --head-bn-dx\n"
           "  --head-bn-grad, the --pw-* the project's 1x1 kernel): the plan's\n"
           "  workspace and the roofline's passes are those of the layers that take them (a 1x1 conv's assuming the\n"
           "  project's kernel runs it, which autotuning may not choose)\n"
           "  --roofline: the training step's modelled floor (bytes and FLOPs of every pass, by class and by pass)\n"
           "  at the peaks of --device NAME (datasheet table, default \"H100 SXM\"), or of a `bench ceilings --json`\n"
           "  FILE measured on the GPU, or --peak-tflops/--peak-gbps; no GPU needed (docs/BENCH.md)\n"
           "  defaults: 256x512, batch 8, 2 channels, cuda (bf16 activations; cpu: fp32), upsample_first\n";
}

PlanArgs parse_plan_args(const std::vector<std::string>& args, bool* help) {
    PlanArgs a;
    bool peaks_given = false;  // --device, --ceilings, --peak-*: only with --roofline
    *help = false;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& s = args[i];
        if (s == "--help" || s == "-h") {
            *help = true;
            return a;
        }
        if (s == "--verbose") {
            a.verbose = true;
            continue;
        }
        if (s == "--roofline" || s == "--time") {
            (s == "--roofline" ? a.roofline : a.fusion_time) = true;
            continue;
        }
        if (s == "--merge-heads" || s == "--fuse-head-bn" || s == "--fuse-up-bn") {
            (s == "--merge-heads" ? a.merge_heads : s == "--fuse-head-bn" ? a.fuse_head_bn : a.fuse_up_bn) = true;
            continue;
        }
        // The kernel switches, with bench step's implications (tools/bench_step_args.cpp).
        bool* const sw = s == "--dw-fused-bwd"       ? &a.kernels.dw_fused_bwd
                         : s == "--dw-fused-bwd-bn"  ? &a.kernels.dw_fused_bn_bwd
                         : s == "--dw-fused-bn-grad" ? &a.kernels.dw_fused_bn_grad
                         : s == "--dw-stats"         ? &a.kernels.dw_stats
                         : s == "--pw-stats"         ? &a.kernels.pw_stats
                         : s == "--pw-bn-grad"       ? &a.kernels.pw_bn_grad
                         : s == "--pw-bn-bwd"        ? &a.kernels.pw_bn_bwd
                         : s == "--pw-fused-bwd"     ? &a.kernels.pw_fused_bwd
                         : s == "--head-bn-grad"     ? &a.kernels.head_bn_grad
                         : s == "--head-bn-dx"       ? &a.kernels.head_bn_dx
                                                     : nullptr;
        if (sw) {
            *sw = true;
            if (s.rfind("--dw-fused-", 0) == 0) a.kernels.dw_fused_bwd = true;
            if (s == "--dw-fused-bn-grad") a.fuse_expand_dw = true;
            if (s == "--head-bn-grad" || s == "--head-bn-dx") a.fuse_head_bn = true;
            if (s == "--head-bn-dx") a.kernels.head_bn_grad = true;
            if (s.rfind("--pw-", 0) == 0) a.kernels.pw_custom = true;
            continue;
        }
        if (s == "--fuse-expand-dw" || s == "--fuse-dw-pw" || s == "--fusion-graphs") {
            (s == "--fuse-expand-dw" ? a.fuse_expand_dw : s == "--fuse-dw-pw" ? a.fuse_dw_pw : a.fusion_graphs) = true;
            continue;
        }
        SF_CHECK(s == "--height" || s == "--width" || s == "--batch" || s == "--channels" || s == "--backend" ||
                     s == "--json" || s == "--cudnn-device" || s == "--conv-policy" || s == "--up-order" ||
                     s == "--device" || s == "--ceilings" || s == "--peak-tflops" || s == "--peak-gbps",
                 "plan: unexpected argument '%s'\n%s", s.c_str(), plan_usage());
        SF_CHECK(i + 1 < args.size(), "plan: %s needs a value\n%s", s.c_str(), plan_usage());
        const std::string& v = args[++i];
        if (s == "--height") a.height = parse_positive_int(s, v);
        if (s == "--width") a.width = parse_positive_int(s, v);
        if (s == "--batch") a.batch = parse_positive_int(s, v);
        if (s == "--channels") a.channels = parse_positive_int(s, v);
        if (s == "--json") a.json = v;
        if (s == "--cudnn-device") a.cudnn_device = v;
        peaks_given = peaks_given || s == "--device" || s == "--ceilings" || s == "--peak-tflops" || s == "--peak-gbps";
        if (s == "--device") a.device = v;
        if (s == "--ceilings") a.ceilings = v;
        if (s == "--peak-tflops") a.peak_tflops = parse_nonnegative(s, v);
        if (s == "--peak-gbps") a.peak_gbps = parse_nonnegative(s, v);
        if (s == "--up-order")
            SF_CHECK(model::parse_up_order(v, &a.up_order), "plan: --up-order expects upsample_first or conv_first, got "
                     "'%s'", v.c_str());
        if (s == "--conv-policy") {
            SF_CHECK(v == "deterministic" || v == "autotune", "plan: --conv-policy expects deterministic or autotune, "
                     "got '%s'", v.c_str());
            a.autotune = v == "autotune";
        }
        if (s == "--backend") {
            SF_CHECK(v == "cuda" || v == "cpu", "plan: --backend expects cuda or cpu, got '%s'", v.c_str());
            a.cuda = v == "cuda";
        }
    }
    SF_CHECK(a.cudnn_device.empty() || a.cuda, "plan: --cudnn-device plans the CUDA backend's convolutions; it does "
             "not go with --backend cpu");
    SF_CHECK(!a.fuse_expand_dw || a.cuda, "plan: --fuse-expand-dw fuses CUDA kernels; the CPU reference has no such "
             "variant (it does not go with --backend cpu)");
    SF_CHECK(!a.fuse_dw_pw || a.cuda, "plan: --fuse-dw-pw fuses CUDA kernels; the CPU reference has no such "
             "variant (it does not go with --backend cpu)");
    SF_CHECK(!a.merge_heads || a.cuda,
             "plan: --merge-heads merges CUDA layers; the CPU reference has no such "
             "variant (it does not go with --backend cpu)");
    SF_CHECK(!a.fuse_up_bn || a.cuda,
             "plan: --fuse-up-bn fuses CUDA kernels; the CPU reference has no such "
             "variant (it does not go with --backend cpu)");
    SF_CHECK(!a.fuse_head_bn || a.cuda,
             "plan: --fuse-head-bn fuses CUDA kernels; the CPU reference has no such "
             "variant (it does not go with --backend cpu)");
    SF_CHECK(!a.any_kernel_switch() || a.cuda,
             "plan: the kernel switches (--dw-*, --pw-*) are the CUDA step's; "
             "the CPU reference has none (they do not go with --backend cpu)");
    SF_CHECK(a.roofline || !peaks_given, "plan: --device, --ceilings, --peak-tflops and --peak-gbps set the peaks of "
             "--roofline: give --roofline too");
    SF_CHECK(!a.fusion_graphs || !a.cudnn_device.empty(),
             "plan: --fusion-graphs asks cuDNN about a device: give --cudnn-device FILE|gpu too");
    SF_CHECK(!a.fusion_time || (a.fusion_graphs && a.cudnn_device == "gpu"),
             "plan: --time executes the fusion graphs: give --fusion-graphs --cudnn-device gpu too");
    SF_CHECK(!a.cudnn_device.empty() || (!a.autotune && !a.verbose),
             "plan: --conv-policy and --verbose describe cuDNN plans: give --cudnn-device FILE too");
    return a;
}

int cmd_plan(const std::vector<std::string>& args) {
    bool help = false;
    const PlanArgs a = parse_plan_args(args, &help);
    if (help) {
        std::fputs(plan_usage(), stdout);
        return 0;
    }
    nlohmann::json cudnn;
    int rc = 0;
    if (!a.cudnn_device.empty()) {
        plan_json(a);  // NetShape::validate names a bad size or channel count before cuDNN is asked
        const kern::ConvPolicy policy = kern::run_conv_policy(!a.autotune);
        cudnn = a.cudnn_device == "gpu" ? cudnn_plans_json_gpu(a, policy)
                                         : cudnn_plans_json(a, read_device_json(a.cudnn_device), a.cudnn_device, policy);
        std::fputs(cudnn_plans_text(cudnn, a.verbose).c_str(), stdout);
        if (cudnn["failed"].get<size_t>() > 0) {
            std::fprintf(stderr, "plan: %zu convolution key(s) the step needs have no cuDNN plan on %s (NO PLAN above)\n",
                         cudnn["failed"].get<size_t>(), cudnn["device"].get<std::string>().c_str());
            rc = 1;
        }
    }
    nlohmann::json doc = plan_json(a, cudnn.is_null() ? 0 : cudnn["workspace_bytes"].get<size_t>());
    if (!cudnn.is_null()) {
        doc["cudnn"] = cudnn;
        doc["workspace"]["includes_conv_workspace"] = true;  // even when every plan chosen needs none
    }
    if (a.fusion_graphs) {
        doc["cudnn_fusion"] = a.cudnn_device == "gpu"
                                  ? cudnn_fusion_json_gpu(a)
                                  : cudnn_fusion_json(a, read_device_json(a.cudnn_device), a.cudnn_device);
        std::fputs(cudnn_fusion_text(doc["cudnn_fusion"]).c_str(), stdout);
    }
    std::fputs(plan_text(doc).c_str(), stdout);
    if (a.roofline) {
        doc["roofline"] = plan_roofline_json(a);
        std::fputs(plan_roofline_text(doc["roofline"]).c_str(), stdout);
    }
    if (!a.json.empty()) {
        std::ofstream f(a.json);
        SF_CHECK(f.good(), "plan: cannot write '%s'", a.json.c_str());
        f << doc.dump(2) << "\n";
        SF_CHECK(f.good(), "plan: writing '%s' failed", a.json.c_str());
        std::printf("wrote %s\n", a.json.c_str());
    }
    return rc;
}

}  // namespace tools

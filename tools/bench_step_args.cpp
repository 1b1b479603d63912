// `slidefuse bench step`'s options (tools/bench_step.h): every bad input named, with the usage.
#include <string>
#include <vector>

#include "kernels/bn_act_cuda.h"
#include "runtime/dist.h"
#include "runtime/error.h"
#include "tools/bench_ceilings.h"
#include "tools/bench_configs.h"
#include "tools/bench_report.h"
#include "tools/bench_step.h"
#include "tools/cli_numbers.h"

namespace tools {

namespace {

std::vector<int> parse_int_list(const std::string& opt, const std::string& v) {
    std::vector<int> out;
    size_t start = 0;
    while (start <= v.size()) {
        const size_t comma = v.find(',', start);
        const std::string part = v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        out.push_back(parse_int_at_least(opt, part, 1));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return out;
}

}  // namespace

StepBenchOptions parse_step_bench_args(const std::vector<std::string>& args) {
    StepBenchOptions o;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& s = args[i];
        if (s == "--eager" || s == "--deterministic" || s == "--search" || s == "--layers") {
            (s == "--eager"           ? o.eager
             : s == "--deterministic" ? o.deterministic
             : s == "--search"        ? o.search
                                      : o.layers) = true;
            continue;
        }
        if (s == "--fuse-expand-dw" || s == "--fuse-dw-pw") {
            (s == "--fuse-expand-dw" ? o.fuse_expand_dw : o.fuse_dw_pw) = true;
            continue;
        }
        if (s == "--merge-heads" || s == "--fuse-head-bn" || s == "--fuse-up-bn") {
            (s == "--merge-heads" ? o.merge_heads : s == "--fuse-head-bn" ? o.fuse_head_bn : o.fuse_up_bn) = true;
            continue;
        }
        if (s == "--no-dw-variants") {
            o.cuda.dw_variants = false;
            continue;
        }
        if (s == "--pdl") {
            o.cuda.pdl = true;
            continue;
        }
        if (s == "--upsample-row-loads") {
            o.cuda.upsample_row_loads = true;
            continue;
        }
        if (s == "--branch-lanes") {
            o.cuda.branch_lanes = true;
            continue;
        }
        if (s == "--dw-fused-bwd") {
            o.cuda.dw_fused_bwd = true;
            continue;
        }
        if (s == "--pw-custom") {
            o.cuda.pw_custom = true;
            continue;
        }
        if (s == "--pw-stats") {
            o.cuda.pw_custom = o.cuda.pw_stats = true;
            continue;
        }
        if (s == "--pw-bn-grad") {
            o.cuda.pw_custom = o.cuda.pw_bn_grad = true;
            continue;
        }
        if (s == "--pw-bn-bwd") {
            o.cuda.pw_custom = o.cuda.pw_bn_bwd = true;
            continue;
        }
        if (s == "--pw-fused-bwd") {
            o.cuda.pw_custom = o.cuda.pw_fused_bwd = true;
            continue;
        }
        if (s == "--dw-stats") {
            o.cuda.dw_stats = true;
            continue;
        }
        if (s == "--head-bn-grad") {
            o.cuda.head_bn_grad = o.fuse_head_bn = true;
            continue;
        }
        if (s == "--head-bn-dx") {
            o.cuda.head_bn_dx = o.cuda.head_bn_grad = o.fuse_head_bn = true;
            continue;
        }
        if (s == "--dw-fused-bwd-bn") {
            o.cuda.dw_fused_bwd = o.cuda.dw_fused_bn_bwd = true;
            continue;
        }
        if (s == "--dw-fused-bn-grad") {
            o.cuda.dw_fused_bwd = o.fuse_expand_dw = o.cuda.dw_fused_bn_grad = true;
            continue;
        }
        SF_CHECK(s.rfind("--", 0) == 0, "bench step: unexpected argument '%s'\n%s", s.c_str(), bench_usage());
        SF_CHECK(i + 1 < args.size(), "bench step: %s needs a value", s.c_str());
        const std::string& v = args[++i];
        if (s == "--batch-sizes") {
            o.batch_sizes = parse_int_list(s, v);
        } else if (s == "--size") {
            const size_t x = v.find('x');
            SF_CHECK(x != std::string::npos, "bench step: --size expects HEIGHTxWIDTH, e.g. 256x512, got '%s'",
                     v.c_str());
            o.height = parse_int_at_least(s, v.substr(0, x), 32);
            o.width = parse_int_at_least(s, v.substr(x + 1), 32);
            SF_CHECK(o.height % 32 == 0 && o.width % 32 == 0,
                     "bench step: --size %s: both sides must be multiples of 32", v.c_str());
        } else if (s == "--height" || s == "--width") {
            const int x = parse_int_at_least(s, v, 32);
            SF_CHECK(x % 32 == 0, "bench step: %s %d: must be a multiple of 32", s.c_str(), x);
            (s == "--height" ? o.height : o.width) = x;
        } else if (s == "--channels") {
            o.channels = parse_int_at_least(s, v, 2);
            SF_CHECK(o.channels == 2 || o.channels == 4, "bench step: --channels must be 2 or 4, got %d", o.channels);
        } else if (s == "--steps") {
            o.steps = parse_int_at_least(s, v, 1);
            SF_CHECK(o.steps >= kMinTimedSteps, "bench step: --steps %d: a record needs at least %d timed steps",
                     o.steps, static_cast<int>(kMinTimedSteps));
        } else if (s == "--warmup") {
            o.warmup = parse_int_at_least(s, v, 0);
        } else if (s == "--memory-budget-gb") {
            o.memory_budget_bytes = static_cast<size_t>(parse_nonnegative(s, v) * 1e9);
        } else if (s == "--layers-batch") {
            o.layers_batch = parse_int_at_least(s, v, 1);
        } else if (s == "--conv-candidates") {
            o.conv_candidates = parse_int_at_least(s, v, 1);
        } else if (s == "--peak-tflops") {
            o.peak_tflops = parse_nonnegative(s, v);
        } else if (s == "--peak-gbps") {
            o.peak_gbps = parse_nonnegative(s, v);
        } else if (s == "--ceilings") {
            o.ceilings = v;
        } else if (s == "--world") {
            o.world = parse_int_at_least(s, v, 1);
        } else if (s == "--up-order") {
            SF_CHECK(model::parse_up_order(v, &o.up_order),
                     "bench step: --up-order expects upsample_first or conv_first, got '%s'", v.c_str());
        } else if (s == "--bn-row-batch") {
            o.cuda.bn_row_batch = parse_int_at_least(s, v, 1);
            SF_CHECK(kern::bn_act_row_batch_valid(o.cuda.bn_row_batch),
                     "bench step: --bn-row-batch must be 1 or 4, got %d", o.cuda.bn_row_batch);
        } else if (s == "--bn-min-blocks") {
            o.cuda.bn_min_blocks = parse_int_at_least(s, v, 1);
            SF_CHECK(kern::bn_act_min_blocks_valid(o.cuda.bn_min_blocks),
                     "bench step: --bn-min-blocks must be 1 or 3, got %d", o.cuda.bn_min_blocks);
        } else if (s == "--json") {
            o.json = v;
        } else if (s == "--configs" || s == "--json-dir") {
            SF_CHECK(!v.empty(), "bench step: %s needs a path", s.c_str());
            (s == "--configs" ? o.configs : o.json_dir) = v;
        } else if (s == "--only") {
            o.only = split_names(s, v);
        } else if (s == "--deadline-s") {
            o.deadline_s = parse_nonnegative(s, v);
        } else {
            SF_FAIL("bench step: unknown option '%s'\n%s", s.c_str(), bench_usage());
        }
    }
    o.args = args;
    SF_CHECK(!o.batch_sizes.empty(), "bench step: --batch-sizes is empty");
    check_configs_options(o);
    if (!o.ceilings.empty()) {  // measured ceilings as the roofline's peaks (explicit --peak-* win)
        const MeasuredPeaks m = read_ceilings(o.ceilings);
        if (o.peak_tflops == 0) o.peak_tflops = m.tensor_tflops;
        if (o.peak_gbps == 0) o.peak_gbps = m.hbm_gbps;
    }
    check_bench_world(o.world, rt::comm().world(), o.search);
    return o;
}

void check_bench_world(int n, int job_world, bool search) {
    SF_CHECK(n >= 0, "bench step: --world %d: expected an integer >= 1", n);
    SF_CHECK(n == 0 || n == job_world,
             "bench step: --world %d, but this job has %d rank(s): launch it as mpirun -np %d slidefuse bench step "
             "--world %d",
             n, job_world, n, n);
    SF_CHECK(n > 0 || job_world == 1, "bench step: launched as %d ranks: pass --world %d (the gradient allreduce)",
             job_world, job_world);
    SF_CHECK(!search || job_world == 1,
             "bench step: --search picks batches from one rank's timings; with %d ranks list them (--batch-sizes)",
             job_world);
}

}  // namespace tools

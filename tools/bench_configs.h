// `slidefuse bench step --configs FILE --json-dir DIR`: a list of configurations of the step (the
// switches of OPTIMIZATION_LOG's entries) timed one after another in one process, each written as
// its own `bench step` record, DIR/NAME.json (schema slidefuse.bench/1: tools/bench_ab.py compares
// them as it compares separate runs).
//
// Why one process: a separate `bench step` per A/B starts a CUDA context, loads cuDNN and autotunes
// every convolution again (5.4 s of the H200's per-layer run of 2026-11-27); here the second and
// later configurations rebuild their cuDNN plans from the first one's (kern::ConvPlanStore, the
// process-wide store of autotuning results: 1.1 s for the same network there), so each costs its
// plans, a graph capture and its steps, and every configuration runs the same cuDNN engine for the
// same convolution: an A/B measures its switch, not two autotunings' choices. (The project's own
// kernels' variants are still timed per network, as in separate runs.)
//
// The file: one configuration a line, `NAME [SWITCH...]`; '#' starts a comment; blank lines are
// skipped. The first is the base: timed first (with the command's --layers, its per-layer table)
// and again after the others (NAME_again.json: the drift of the GPU over the list). SWITCHes are the
// step's own (--pdl, --fuse-up-bn, --bn-row-batch 4, ...: kConfigSwitches), applied on top of the
// command's options; sizes, batch, steps, output and search options stay the command's. `--layers` on a
// line gives that configuration the per-layer table too (at the command's --layers-batch).
#pragma once
#include <string>
#include <vector>

#include "tools/bench_report.h"
#include "tools/bench_step.h"

namespace rt {
class CudaContext;
class Nvml;
}  // namespace rt

namespace tools {

struct BenchConfig {
    std::string name;                // [A-Za-z0-9_.-], 1-64 characters, unique in the file
    std::vector<std::string> flags;  // its switches as written
    int line = 0;                    // 1-based line of the file
    StepBenchOptions options;        // the command's options with the switches applied
};

// The switches a configuration line may carry, each with whether it takes a value.
struct ConfigSwitch {
    const char* flag;
    bool takes_value;
};
extern const std::vector<ConfigSwitch> kConfigSwitches;

// The configurations of `text` (origin names it in errors: "FILE:LINE: ..."), each with
// parse_step_bench_args(common_args without --configs/--json-dir/--only/--deadline-s, + its
// switches). Throws rt::Error for a bad name, a repeated name, an option that is not a switch, a
// switch without its value, or no configuration at all.
std::vector<BenchConfig> parse_bench_configs(const std::string& text, const std::string& origin,
                                             const std::vector<std::string>& common_args);
// The same, read from a file (throws naming it when it cannot be read).
std::vector<BenchConfig> read_bench_configs(const std::string& path, const std::vector<std::string>& common_args);
// --only: the base and the named configurations, in the file's order; throws naming a name the list
// does not have. Empty `only`: all of them.
std::vector<BenchConfig> select_bench_configs(const std::vector<BenchConfig>& all,
                                              const std::vector<std::string>& only);
// "a,b,c" -> {a, b, c}; throws on an empty list or an empty name (opt names the option).
std::vector<std::string> split_names(const std::string& opt, const std::string& v);
// The --configs options together: --json-dir and --configs need each other, --only and --deadline-s
// need --configs, which excludes --json, --search, --world and more than one batch size.
void check_configs_options(const StepBenchOptions& o);
// Whether a configuration expected to take est_s seconds, starting elapsed_s after the start, ends
// with reserve_s to spare before deadline_s (0: no deadline).
bool fits_deadline(double elapsed_s, double est_s, double deadline_s, double reserve_s);

// Runs cfgs (read_bench_configs + select_bench_configs of o, read before any device work so that a
// bad list costs no GPU time) on the context's GPU, bench_step's device setup having made h: the
// base, each other configuration, then the base again while o.deadline_s allows, writing each record
// as it ends and DIR/configs_summary.json after each (a run killed at its limit keeps what ended).
// validate: the records' checks (the command's are the schema's own: at least 50 timed steps).
// Returns 0, or kContextLostExit when a failed configuration left the CUDA context unusable (a sticky
// error: an illegal address, a launch failure): the summary then has "context_lost" {after, error} and
// "remaining" (the configurations not run, in order: a new process runs them with --only).
constexpr int kContextLostExit = 3;
int bench_configs(rt::CudaContext& ctx, rt::Nvml& nvml, const BenchHeader& h, const StepBenchOptions& o,
                  const std::vector<BenchConfig>& cfgs, const ValidateOptions& validate = {});

}  // namespace tools

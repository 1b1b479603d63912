// The command line of `slidefuse train` (tools/train.cpp): options, overrides, usage.
#pragma once
#include <string>
#include <vector>

#include "runtime/profile.h"
#include "tools/train.h"  // kDefaultMaxBadSteps

namespace tools {

struct TrainArgs {
    std::string config;
    std::string out;
    std::string resume;  // "", "auto" or a checkpoint path
    bool allow_config_change = false;
    int max_bad_steps = kDefaultMaxBadSteps;
    bool no_graph = false;        // CUDA: eager steps instead of graph replay
    bool deferred_stats = false;  // CPU: collect step statistics only where the CUDA backend does
    rt::StepRange profile;        // --profile-steps a:b (empty: none)
    std::vector<std::string> overrides;
};

// Throws rt::Error naming the bad option (with the usage) or value.
TrainArgs parse_train_args(const std::vector<std::string>& args);

}  // namespace tools

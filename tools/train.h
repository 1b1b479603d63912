// `slidefuse train`: the training driver. Today it runs the CPU reference backend
// (train.backend: cpu) on the fixed deterministic samples (data.source: fixed); the CUDA step and
// the data pipeline plug in here as they land.
#pragma once
#include <string>
#include <vector>

namespace tools {

// args: everything after "train". Returns the process exit code; throws rt::Error on bad input.
int cmd_train(const std::vector<std::string>& args);
std::string train_usage();

}  // namespace tools

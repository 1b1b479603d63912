// `slidefuse train` (tools::cmd_train, tools/commands.h): the training driver. Today it runs the
// CPU reference backend (train.backend: cpu) on the data sources of tools/train_data.h; the CUDA
// step plugs in here as it lands.
#pragma once
#include <string>

#include "tools/commands.h"

namespace tools {

std::string train_usage();

}  // namespace tools

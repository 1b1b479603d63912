// Subcommands of the slidefuse CLI. Each takes the arguments after its name, returns the exit
// code, and throws rt::Error on bad input (main prints it on one line and exits 1).
#pragma once
#include <string>
#include <vector>

namespace tools {

int cmd_train(const std::vector<std::string>& args);     // tools/train.cpp
int cmd_generate(const std::vector<std::string>& args);  // tools/cmd_generate.cpp
int cmd_convert(const std::vector<std::string>& args);   // tools/cmd_convert.cpp
int cmd_bench(const std::vector<std::string>& args);     // tools/cmd_bench.cpp ("bench loader", "bench step")
int cmd_export(const std::vector<std::string>& args);    // tools/cmd_export.cpp
int cmd_eval(const std::vector<std::string>& args);      // tools/cmd_eval.cpp
int cmd_predict(const std::vector<std::string>& args);   // tools/cmd_predict.cpp
int cmd_devices(const std::vector<std::string>& args);   // tools/cmd_devices.cpp
int cmd_plan(const std::vector<std::string>& args);      // tools/cmd_plan.cpp
int cmd_check(const std::vector<std::string>& args);     // tools/cmd_check.cpp

}  // namespace tools

// Integer options of the command line, shared by the bench commands.
#pragma once
#include <string>

namespace tools {

// `v` as an int >= lo; throws "<opt>: expected an integer >= <lo>, got '<v>'" otherwise.
int parse_int_at_least(const std::string& opt, const std::string& v, int lo);
// `v` as seconds in [0, 1e6); throws "<opt>: expected seconds >= 0, got '<v>'" otherwise.
double parse_seconds(const std::string& opt, const std::string& v);
// `v` as a finite number >= 0; throws "<opt>: expected a number >= 0, got '<v>'" otherwise.
double parse_nonnegative(const std::string& opt, const std::string& v);

}  // namespace tools

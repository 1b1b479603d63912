// Internal to tools/config_*.cpp: a strict reader over a yaml-cpp tree. `Section` wraps one mapping,
// remembers which keys were asked for and reports every other key as unknown (with the keys allowed
// there); every reader checks type and range and records errors in `Ctx` with the full key path
// and where the value came from (file:line or the command-line override). Nothing throws here.
#pragma once
#include <yaml-cpp/yaml.h>

#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace tools::config_detail {

std::string join_path(const std::string& parent, const std::string& key);
std::string short_number(double v);         // shortest text that reads back exactly ("0.0003", "2")
std::string describe(const YAML::Node& v);  // "'abc'", "a list", "an empty value", ...

// Numeric interval with a readable description (">= 1", "> 0", ">= 0 and < 1").
struct Range {
    double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
    bool lo_open = false, hi_open = false;
    bool contains(double v) const { return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi); }
    std::string text() const;
};
inline Range at_least(double lo) { return Range{lo, std::numeric_limits<double>::infinity(), false, false}; }
inline Range above(double lo) { return Range{lo, std::numeric_limits<double>::infinity(), true, false}; }
inline Range unit_interval_open() { return Range{0.0, 1.0, false, true}; }  // [0, 1)

// Where values came from, and everything that went wrong.
struct Ctx {
    std::string source;                            // file path or the caller's name for the text
    std::map<std::string, std::string> overrides;  // key path (or section it created) -> override as given
    std::vector<std::string> errors;               // one line each
    std::vector<std::string> ignored;              // full paths of accepted-and-ignored keys present

    // "file:line: " or "command-line override 'k=v': " for the value at `path`.
    std::string location(const YAML::Node& at, const std::string& path) const;
    void error(const YAML::Node& at, const std::string& path, const std::string& msg);
};

// One mapping of the tree (or nothing, for an absent/empty/invalid section). Each reader marks its
// key as known; when the key is present and valid it stores the value in `out` and returns true,
// otherwise `out` is unchanged (invalid values record an error).
class Section {
public:
    Section(Ctx& ctx, YAML::Node node, std::string path);

    bool has(const char* key) const;
    Section child(const char* key);
    void ignore(const char* key);  // a key of the original config, accepted and ignored with its subtree

    template <class T>  // integral T; T's own bounds are enforced too
    bool integer(const char* key, T& out, Range r) {
        int64_t x = 0;
        if (!integer_in(key, x, r, static_cast<double>(std::numeric_limits<T>::min()),
                        static_cast<double>(std::numeric_limits<T>::max())))
            return false;
        out = static_cast<T>(x);
        return true;
    }
    bool number(const char* key, double& out, Range r);
    bool boolean(const char* key, bool& out);
    bool string(const char* key, std::string& out, bool nonempty);
    template <class E>
    bool choice(const char* key, E& out, const std::vector<std::pair<std::string, E>>& options) {
        return pick(key, out, options, false, options.front().second, options.front().second);
    }
    // A YAML boolean (true -> if_true, false -> if_false) or one of `options` (train.amp).
    template <class E>
    bool bool_or_choice(const char* key, E& out, E if_true, E if_false,
                        const std::vector<std::pair<std::string, E>>& options) {
        return pick(key, out, options, true, if_true, if_false);
    }
    bool number_pair(const char* key, std::array<double, 2>& out, Range r);  // a list of exactly 2
    // A non-empty list of distinct names, each one of `allowed`.
    bool name_list(const char* key, std::vector<std::string>& out, const std::vector<std::string>& allowed);

    void error(const char* key, const std::string& msg);  // an error about `key` at its location
    void finish();                                        // unknown and duplicate keys; call last

private:
    std::pair<YAML::Node, YAML::Node> find(const char* key) const;  // (key, value); undefined if absent
    std::pair<YAML::Node, YAML::Node> get(const char* key);         // find + mark known
    bool fail(const YAML::Node& at, const char* key, const std::string& msg);
    bool integer_in(const char* key, int64_t& out, Range r, double type_lo, double type_hi);
    bool read_number(const YAML::Node& v, const YAML::Node& at, const std::string& path, double& out, Range r);
    // Index into `names` of the value; with accept_bool a YAML boolean gives -2 (true) or -3 (false).
    // -1 when absent or invalid (error recorded).
    int read_name(const YAML::Node& v, const YAML::Node& at, const std::string& path,
                  const std::vector<std::string>& names, bool accept_bool);
    template <class E>
    bool pick(const char* key, E& out, const std::vector<std::pair<std::string, E>>& options, bool accept_bool,
              E if_true, E if_false) {
        auto [k, v] = get(key);
        if (!v.IsDefined()) return false;
        std::vector<std::string> names;
        for (const auto& o : options) names.push_back(o.first);
        const int i = read_name(v, k, join_path(path_, key), names, accept_bool);
        if (i == -1) return false;
        out = i == -2 ? if_true : i == -3 ? if_false : options[static_cast<size_t>(i)].second;
        return true;
    }

    Ctx& ctx_;
    YAML::Node node_;  // a mapping, or a null node
    std::string path_;
    std::set<std::string> known_, ignored_;
};

}  // namespace tools::config_detail

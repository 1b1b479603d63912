// The strict YAML reader behind tools/config (config_reader.h): scalar parsing, ranges, error
// locations, unknown-key detection.
#include "tools/config_reader.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace tools::config_detail {
namespace {

// Strict scalars: decimal integers; decimal/scientific numbers (no hex, inf, nan, '_').
bool parse_int(const std::string& s, int64_t* out) {
    const size_t i = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
    if (i == s.size() || s.find_first_not_of("0123456789", i) != std::string::npos) return false;
    errno = 0;
    const long long v = std::strtoll(s.c_str(), nullptr, 10);
    if (errno == ERANGE) return false;
    *out = v;
    return true;
}

bool parse_number(const std::string& s, double* out) {
    if (s.empty() || s.find_first_not_of("0123456789+-.eE") != std::string::npos) return false;
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(v)) return false;
    *out = v;
    return true;
}

// Numbers and booleans must be plain (unquoted) scalars, as they would be for any YAML reader.
bool is_plain(const YAML::Node& v) { return v.IsScalar() && v.Tag() == "?"; }

std::string comma_list(const std::vector<std::string>& names) {
    std::string s;
    for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
    return s;
}

}  // namespace

std::string join_path(const std::string& parent, const std::string& key) {
    return parent.empty() ? key : parent + "." + key;
}

std::string short_number(double v) {
    char buf[40];
    for (int p = 1; p <= 17; ++p) {
        std::snprintf(buf, sizeof buf, "%.*g", p, v);
        if (std::strtod(buf, nullptr) == v) break;
    }
    return buf;
}

std::string describe(const YAML::Node& v) {
    switch (v.Type()) {
        case YAML::NodeType::Null: return "an empty value";
        case YAML::NodeType::Sequence: return "a list";
        case YAML::NodeType::Map: return "a mapping";
        case YAML::NodeType::Scalar: return (v.Tag() == "?" ? "'" : "the quoted string '") + v.Scalar() + "'";
        default: return "an undefined value";
    }
}

std::string Range::text() const {
    const std::string a = std::isinf(lo) ? "" : (lo_open ? "> " : ">= ") + short_number(lo);
    const std::string b = std::isinf(hi) ? "" : (hi_open ? "< " : "<= ") + short_number(hi);
    return a.empty() ? b : b.empty() ? a : a + " and " + b;
}

std::string Ctx::location(const YAML::Node& at, const std::string& path) const {
    for (std::string p = path; !p.empty();) {  // the path itself or a section an override created
        auto it = overrides.find(p);
        if (it != overrides.end()) return "command-line override '" + it->second + "': ";
        const size_t cut = p.find_last_of(".[");  // "a.b[1]" -> "a.b" -> "a"
        p.resize(cut == std::string::npos ? 0 : cut);
    }
    if (at.IsDefined() && !at.Mark().is_null()) return source + ":" + std::to_string(at.Mark().line + 1) + ": ";
    return source + ": ";
}

void Ctx::error(const YAML::Node& at, const std::string& path, const std::string& msg) {
    errors.push_back(location(at, path) + "config key '" + path + "': " + msg);
}

Section::Section(Ctx& ctx, YAML::Node node, std::string path)
    : ctx_(ctx), node_(std::move(node)), path_(std::move(path)) {}

bool Section::has(const char* key) const { return find(key).second.IsDefined(); }

Section Section::child(const char* key) {
    auto [k, v] = get(key);
    if (v.IsDefined() && !v.IsMap() && !v.IsNull())
        ctx_.error(k, join_path(path_, key), "expected a section (a mapping of keys), got " + describe(v));
    return Section(ctx_, v.IsMap() ? v : YAML::Node(), join_path(path_, key));
}

void Section::ignore(const char* key) {
    ignored_.insert(key);
    if (has(key)) ctx_.ignored.push_back(join_path(path_, key));
}

bool Section::integer_in(const char* key, int64_t& out, Range r, double type_lo, double type_hi) {
    auto [k, v] = get(key);
    if (!v.IsDefined()) return false;
    int64_t x = 0;
    if (!is_plain(v) || !parse_int(v.Scalar(), &x)) return fail(k, key, "expected an integer, got " + describe(v));
    Range typed = r;  // the field type's bounds, reported only when they are what is violated
    typed.lo = std::max(r.lo, type_lo);
    typed.hi = std::min(r.hi, type_hi);
    for (const Range& b : {r, typed})
        if (!b.contains(static_cast<double>(x))) return fail(k, key, "expected " + b.text() + ", got " + v.Scalar());
    out = x;
    return true;
}

bool Section::number(const char* key, double& out, Range r) {
    auto [k, v] = get(key);
    return v.IsDefined() && read_number(v, k, join_path(path_, key), out, r);
}

bool Section::boolean(const char* key, bool& out) {
    auto [k, v] = get(key);
    if (!v.IsDefined()) return false;
    if (!is_plain(v) || !YAML::convert<bool>::decode(v, out))
        return fail(k, key, "expected a boolean (true or false), got " + describe(v));
    return true;
}

bool Section::string(const char* key, std::string& out, bool nonempty) {
    auto [k, v] = get(key);
    if (!v.IsDefined()) return false;
    if (!v.IsScalar()) return fail(k, key, "expected a string, got " + describe(v));
    if (nonempty && v.Scalar().empty()) return fail(k, key, "expected a non-empty string, got ''");
    out = v.Scalar();
    return true;
}

bool Section::number_pair(const char* key, std::array<double, 2>& out, Range r) {
    auto [k, v] = get(key);
    if (!v.IsDefined()) return false;
    if (!v.IsSequence() || v.size() != 2) {
        const std::string got = v.IsSequence() ? "a list of " + std::to_string(v.size()) + " element(s)" : describe(v);
        return fail(k, key, "expected a list of 2 numbers, got " + got);
    }
    std::array<double, 2> x = out;
    bool ok = true;
    for (size_t i = 0; i < 2; ++i)
        ok &= read_number(v[i], v[i], join_path(path_, key) + "[" + std::to_string(i) + "]", x[i], r);
    if (ok) out = x;
    return ok;
}

bool Section::name_list(const char* key, std::vector<std::string>& out, const std::vector<std::string>& allowed) {
    auto [k, v] = get(key);
    if (!v.IsDefined()) return false;
    if (!v.IsSequence() || v.size() == 0)
        return fail(k, key, "expected a non-empty list, got " + (v.IsSequence() ? std::string("[]") : describe(v)));
    std::vector<std::string> x;
    bool ok = true;
    for (size_t i = 0; i < v.size(); ++i) {
        const std::string p = join_path(path_, key) + "[" + std::to_string(i) + "]";
        const int j = read_name(v[i], v[i], p, allowed, false);
        if (j < 0) {
            ok = false;
        } else if (std::find(x.begin(), x.end(), allowed[static_cast<size_t>(j)]) != x.end()) {
            ctx_.error(v[i], p, "duplicate entry '" + allowed[static_cast<size_t>(j)] + "'");
            ok = false;
        } else {
            x.push_back(allowed[static_cast<size_t>(j)]);
        }
    }
    if (ok) out = x;
    return ok;
}

void Section::error(const char* key, const std::string& msg) {
    ctx_.error(find(key).first, join_path(path_, key), msg);
}

void Section::finish() {
    if (!node_.IsMap()) return;
    const YAML::Node& node = node_;
    std::set<std::string> seen;
    for (auto it = node.begin(); it != node.end(); ++it) {
        const YAML::Node k = it->first;
        const std::string name = k.IsScalar() ? k.Scalar() : "?";
        const std::string path = join_path(path_, name);
        if (!k.IsScalar()) {
            ctx_.error(k, path, "expected a plain key, got " + describe(k));
        } else if (!seen.insert(name).second) {
            ctx_.error(k, path, "duplicate key");
        } else if (!known_.count(name) && !ignored_.count(name)) {
            const std::string where = path_.empty() ? "at the top level" : "under '" + path_ + "'";
            ctx_.error(k, path,
                       "unknown key (allowed " + where + ": " +
                           comma_list(std::vector<std::string>(known_.begin(), known_.end())) + ")");
        }
    }
}

std::pair<YAML::Node, YAML::Node> Section::find(const char* key) const {
    const YAML::Node& node = node_;
    if (node.IsMap())
        for (auto it = node.begin(); it != node.end(); ++it)
            if (it->first.IsScalar() && it->first.Scalar() == key) return {it->first, it->second};
    return {YAML::Node(YAML::NodeType::Undefined), YAML::Node(YAML::NodeType::Undefined)};
}

std::pair<YAML::Node, YAML::Node> Section::get(const char* key) {
    known_.insert(key);
    return find(key);
}

bool Section::fail(const YAML::Node& at, const char* key, const std::string& msg) {
    ctx_.error(at, join_path(path_, key), msg);
    return false;
}

bool Section::read_number(const YAML::Node& v, const YAML::Node& at, const std::string& path, double& out, Range r) {
    double x = 0;
    if (!is_plain(v) || !parse_number(v.Scalar(), &x)) {
        ctx_.error(at, path, "expected a number, got " + describe(v));
        return false;
    }
    if (!r.contains(x)) {
        ctx_.error(at, path, "expected " + r.text() + ", got " + v.Scalar());
        return false;
    }
    out = x;
    return true;
}

int Section::read_name(const YAML::Node& v, const YAML::Node& at, const std::string& path,
                       const std::vector<std::string>& names, bool accept_bool) {
    bool b = false;
    if (accept_bool && is_plain(v) && YAML::convert<bool>::decode(v, b)) return b ? -2 : -3;
    if (v.IsScalar())
        for (size_t i = 0; i < names.size(); ++i)
            if (v.Scalar() == names[i]) return static_cast<int>(i);
    const std::string expected = (accept_bool ? "true, false, " : "") + comma_list(names);
    ctx_.error(at, path, "expected one of " + expected + ", got " + describe(v));
    return -1;
}

}  // namespace tools::config_detail

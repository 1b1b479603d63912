#include "tools/run_log.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "runtime/error.h"
#include "runtime/log.h"

#ifndef SF_PLOT_METRICS_SCRIPT
#define SF_PLOT_METRICS_SCRIPT "tools/plot_metrics.py"
#endif

namespace tools {

namespace {

// 'a b' -> "'a b'", quotes inside as '\''.
std::string shell_quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

double number_or_nan(const nlohmann::json& j, const char* key) {
    return j.contains(key) && j[key].is_number() ? j[key].get<double>() : NAN;
}

}  // namespace

tb::Scalars tensorboard_scalars(const nlohmann::json& record) {
    tb::Scalars out;
    const bool val =
        record.contains("validation") && record["validation"].is_boolean() && record["validation"].get<bool>();
    const std::string prefix = val ? "val/" : "train/";
    for (auto it = record.begin(); it != record.end(); ++it) {
        if (it.key() == "step" || !it.value().is_number()) continue;  // is_number: false for booleans
        const double v = it.value().get<double>();
        if (std::isfinite(v)) out.emplace_back(prefix + it.key(), v);
    }
    return out;
}

std::string validation_table(const std::string& metrics_path) {
    std::ifstream in(metrics_path);
    std::string rows, line;
    while (std::getline(in, line)) {
        const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
        if (!j.is_object() || !j.value("validation", false)) continue;
        char row[160];
        std::snprintf(row, sizeof(row), "%6lld | %7lld | %7.3f | %6.2f%% | %6.2f%%%s\n",
                      static_cast<long long>(j.value("epoch", int64_t{0})),
                      static_cast<long long>(j.value("step", int64_t{0})), number_or_nan(j, "mae_px"),
                      number_or_nan(j, "hit_le_2px"), number_or_nan(j, "hit_le_5px"),
                      j.value("best", false) ? " *" : "");
        rows += row;
    }
    if (rows.empty()) return "";
    return " epoch |    step |  mae_px | hit@2px | hit@5px   (* best so far)\n" + rows;
}

bool plot_run(const std::string& run_dir, std::string* why) {
    const char* env = std::getenv("SF_PLOT_METRICS");
    const std::string script = env && *env ? env : SF_PLOT_METRICS_SCRIPT;
    if (std::system("python3 -c 'import matplotlib' >/dev/null 2>&1") != 0) {
        *why = "python3 with matplotlib not found (pip install matplotlib)";
        return false;
    }
    std::FILE* p = ::popen(("python3 " + shell_quote(script) + " " + shell_quote(run_dir) + " 2>&1").c_str(), "r");
    if (!p) {
        *why = "cannot start python3";
        return false;
    }
    char buf[1024];
    while (std::fgets(buf, sizeof(buf), p)) {
        std::string l = buf;
        if (!l.empty() && l.back() == '\n') l.pop_back();
        rt::console_line(l);
    }
    const int rc = ::pclose(p);
    if (rc != 0) *why = rt::format("%s exited with status %d", script.c_str(), rc);
    return rc == 0;
}

RunLog::~RunLog() { rt::close_log_file(); }

void RunLog::open(const std::string& run_dir, const LoggingSection& cfg, int64_t resume_step) {
    dir_ = run_dir;
    cfg_ = cfg;
    rt::open_log_file(run_dir + "/train.log", resume_step > 0);
    if (cfg.tensorboard) {
        tb_ = std::make_unique<TensorBoardWriter>(run_dir, resume_step);
        SF_LOG_INFO("TensorBoard events: %s (tensorboard --logdir %s)", tb_->path().c_str(), run_dir.c_str());
    }
}

void RunLog::record(const nlohmann::json& j) {
    if (tb_) tb_->write(j.value("step", int64_t{0}), tensorboard_scalars(j));
}

void RunLog::finish() {
    const std::string table = validation_table(dir_ + "/metrics.jsonl");
    if (!table.empty()) rt::console_line("validation (" + dir_ + "/metrics.jsonl):");
    for (size_t a = 0, b; a < table.size(); a = b + 1) {
        b = table.find('\n', a);
        if (b == std::string::npos) b = table.size();
        rt::console_line(table.substr(a, b - a));
    }
    std::string why;
    if (cfg_.plot && !plot_run(dir_, &why)) SF_LOG_INFO("no metrics.png: %s", why.c_str());
}

}  // namespace tools

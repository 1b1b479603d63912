// What a training run writes besides metrics.jsonl and checkpoints: the console log
// (<run>/train.log, runtime/log.h), TensorBoard event files with the same scalars as
// metrics.jsonl (logging.tensorboard), and at the end a validation table on the console and
// metrics.png (logging.plot, tools/plot_metrics.py when python3 + matplotlib are present).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "tools/config.h"
#include "tools/tensorboard.h"

namespace tools {

// The TensorBoard scalars of one metrics.jsonl record: every finite number but "step", tagged
// "train/<key>" or, for a validation record, "val/<key>" (booleans are left out).
tb::Scalars tensorboard_scalars(const nlohmann::json& record);

// The validation records of a metrics.jsonl as a table (epoch, step, MAE, hit@2px, hit@5px; '*'
// marks the best); "" when it holds none. Unreadable lines are skipped.
std::string validation_table(const std::string& metrics_path);

// Runs tools/plot_metrics.py on a run folder when python3 and matplotlib are there; its output
// lines go to the console log. Returns false (with *why) when it did not draw; never throws.
bool plot_run(const std::string& run_dir, std::string* why);

class RunLog {
public:
    RunLog() = default;
    ~RunLog();
    RunLog(const RunLog&) = delete;
    RunLog& operator=(const RunLog&) = delete;

    // Opens <run_dir>/train.log (appended to when resuming, i.e. resume_step > 0) and the
    // TensorBoard writer.
    void open(const std::string& run_dir, const LoggingSection& cfg, int64_t resume_step);
    // A record just written to metrics.jsonl.
    void record(const nlohmann::json& j);
    // End of a run: the validation table, then the plot.
    void finish();

private:
    std::string dir_;
    LoggingSection cfg_;
    std::unique_ptr<TensorBoardWriter> tb_;
};

}  // namespace tools

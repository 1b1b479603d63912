// The run policy of `slidefuse train` that does not depend on a backend (tools/train.h):
// optimizer settings, the resume config hash, validation metrics by name, the original's
// early-stopping rule and best-checkpoint selection.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "runtime/error.h"
#include "tools/train.h"

namespace tools {

model::OptimConfig optim_config(const TrainConfig& c) {
    model::OptimConfig oc;
    oc.adamw.lr = c.optimizer.lr;
    oc.adamw.beta1 = c.optimizer.betas[0];
    oc.adamw.beta2 = c.optimizer.betas[1];
    oc.adamw.eps = c.optimizer.eps;
    oc.adamw.weight_decay = c.optimizer.weight_decay;
    oc.clip_grad_norm = c.optimizer.clip_grad_norm;
    return oc;
}

TrainConfig resume_config(const TrainConfig& cfg) {
    TrainConfig c = cfg;
    c.logging.log_dir.clear();
    c.logging.tensorboard = c.logging.plot = true;  // output switches: a resume may change them
    c.checkpoints.save_dir.clear();
    return c;
}

std::string resume_config_yaml(const TrainConfig& cfg) { return to_yaml(resume_config(cfg), false); }

std::string resume_config_hash(const TrainConfig& cfg) { return text_hash(resume_config_yaml(cfg)); }

std::map<std::string, double> metric_values(const model::Metrics& m) {
    return {{"mae_px", m.mae_px()},         {"rmse_px", m.rmse_px()}, {"hit_le_2px", m.hit_le_2px()},
            {"hit_le_5px", m.hit_le_5px()}, {"gap_mae", m.gap_mae()}, {"slider_mae", m.slider_mae()}};
}

bool higher_is_better(const std::string& metric) { return metric.rfind("hit_", 0) == 0; }

void EarlyStopping::start(model::RunState& rs) const {
    const double inf = std::numeric_limits<double>::infinity();
    rs.es_best = higher_is_better(eval_.select_by) ? -inf : inf;
    rs.guard_best = eval_.early_stopping.second_guard.mode == GuardMode::Min ? inf : -inf;
    rs.epochs_without_improvement = 0;
}

bool EarlyStopping::update(model::RunState& rs, int64_t epoch, const std::map<std::string, double>& values) const {
    const EarlyStoppingSection& es = eval_.early_stopping;
    if (!es.enabled || epoch < es.min_epochs) return false;
    auto value = [&](const std::string& name) {
        auto it = values.find(name);
        SF_CHECK(it != values.end(), "early stopping: no validation metric '%s'", name.c_str());
        return it->second;
    };
    const double x = value(eval_.select_by);
    const double gain = higher_is_better(eval_.select_by) ? x - rs.es_best : rs.es_best - x;
    if (gain > 0 && gain >= es.min_improvement) {
        rs.es_best = x;
        rs.epochs_without_improvement = 0;
    } else {
        ++rs.epochs_without_improvement;
    }
    const SecondGuardSection& g = es.second_guard;
    const double y = value(g.metric);
    const double guard_gain = g.mode == GuardMode::Min ? rs.guard_best - y : y - rs.guard_best;
    if (guard_gain > g.min_delta) {
        rs.guard_best = y;
        rs.epochs_without_improvement = std::max<int64_t>(0, rs.epochs_without_improvement - 3);
    }
    return stopped(rs);
}

bool EarlyStopping::stopped(const model::RunState& rs) const {
    return eval_.early_stopping.enabled && rs.epochs_without_improvement >= eval_.early_stopping.patience;
}

bool update_best(model::RunState& rs, const std::string& metric, double value) {
    if (std::isnan(value)) return false;
    const bool better =
        rs.best_metric_name != metric || (higher_is_better(metric) ? value > rs.best_metric : value < rs.best_metric);
    if (better) {
        rs.best_metric = value;
        rs.best_metric_name = metric;
    }
    return better;
}

}  // namespace tools

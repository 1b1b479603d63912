// The captured graphs' node counts in `bench step`'s record and its printed line (tools/bench_step.h).
#include <nlohmann/json.hpp>
#include <string>

#include "model/train_step_cuda.h"
#include "runtime/error.h"
#include "tools/bench_step.h"

namespace tools {

nlohmann::json graph_nodes_json(const model::GraphNodeCounts& micro, const model::GraphNodeCounts& optimizer) {
    auto one = [](const model::GraphNodeCounts& c) {
        return nlohmann::json{{"kernels", c.kernels},
                              {"memcpys", c.memcpys},
                              {"memsets", c.memsets},
                              {"others", c.others},
                              {"total", c.total()},
                              {"edges", c.edges},
                              {"programmatic_edges", c.programmatic_edges}};
    };
    return {{"micro_step", one(micro)}, {"optimizer", one(optimizer)}};
}

std::string graph_nodes_line(const nlohmann::json& extra) {
    if (!extra.is_object() || !extra.contains("graph_nodes")) return "";
    const nlohmann::json& g = extra["graph_nodes"];
    std::string line =
        rt::format("graphs: %d kernel nodes per micro-step (%d nodes), %d per optimizer step (%d)",
                   g.at("micro_step").at("kernels").get<int>(), g.at("micro_step").at("total").get<int>(),
                   g.at("optimizer").at("kernels").get<int>(), g.at("optimizer").at("total").get<int>());
    // Programmatic dependent launch (--pdl): how many of the micro-step's dependencies it became.
    const nlohmann::json& m = g.at("micro_step");
    if (m.contains("programmatic_edges") && m["programmatic_edges"].get<int>() > 0)
        line += rt::format("; %d of the micro-step's %d edges programmatic", m["programmatic_edges"].get<int>(),
                           m.value("edges", 0));
    return line;
}

}  // namespace tools

// `slidefuse export --checkpoint PATH --out FILE`: the weights and BatchNorm buffers of a
// checkpoint as a safetensors file under the PyTorch state_dict names, in PyTorch layout (OIHW),
// without optimizer or run state: the file the PyTorch reference loads with
// load_state_dict(strict=True) (tools/reference/check_export.py, docs/CHECKPOINTS.md).
#include <cstdio>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "model/net.h"
#include "runtime/error.h"
#include "tools/commands.h"

namespace tools {

namespace {

const char* kExportUsage =
    "usage: slidefuse export --checkpoint PATH --out FILE\n"
    "  --checkpoint PATH  a checkpoint written by slidefuse train (ckpt-*.safetensors, best.safetensors)\n"
    "  --out FILE         weights + BatchNorm buffers, PyTorch state_dict names and layout (safetensors)\n";

}  // namespace

int cmd_export(const std::vector<std::string>& args) {
    std::string checkpoint, out;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& s = args[i];
        if (s == "--help" || s == "-h") {
            std::fputs(kExportUsage, stdout);
            return 0;
        }
        if (s == "--checkpoint" || s == "--out") {
            SF_CHECK(i + 1 < args.size(), "%s needs a value", s.c_str());
            (s == "--out" ? out : checkpoint) = args[++i];
        } else {
            SF_FAIL("unexpected argument '%s'\n%s", s.c_str(), kExportUsage);
        }
    }
    SF_CHECK(!checkpoint.empty() && !out.empty(), "export needs --checkpoint PATH and --out FILE\n%s", kExportUsage);
    // The parameter table depends only on the input channels; the smallest valid input shape keeps
    // the network's (unused) activation memory small.
    const int channels = model::checkpoint_input_channels(checkpoint);
    model::SiderNet net(model::NetShape{1, channels, 32, 32}, rt::MemKind::Host);
    const model::Planner& p = net.plan();
    const model::CheckpointView v{&net.table(), p.master(), nullptr, nullptr, p.buffers(), p.counters()};
    model::load_checkpoint(checkpoint, v, nullptr);
    model::export_weights(out, v);
    std::printf("exported %zu parameters (%zu tensors) and %zu buffers of %s to %s\n", net.table().num_parameters(),
                net.table().params.size(), net.table().buffers.size(), checkpoint.c_str(), out.c_str());
    return 0;
}

}  // namespace tools

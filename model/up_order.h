// The order of the HRNet fusion "up" paths (MODEL_SPEC §1.2: bilinear upsample, then a 1x1 ConvBN
// without bias or activation). A 1x1 convolution mixes channels pixel by pixel and a bilinear resize
// mixes pixels channel by channel with the same weights for every channel, so the two commute: the
// convolution can run at the source resolution and its Cdst-channel output be upsampled instead of
// the Csrc-channel input. Equal in exact arithmetic; the rounding differs (docs/MODEL.md).
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace model {

enum class UpOrder {
    UpsampleFirst,  // the original's order: Up(x) -> 1x1 conv -> BN (the CPU reference's default)
    ConvFirst,      // 1x1 conv at the source resolution -> Up -> BN: f^2 fewer MACs, no Csrc x f^2 tensor
};

// Every order with its name, the spelling of the config key and the command lines.
const std::vector<std::pair<std::string, UpOrder>>& up_order_choices();
const char* up_order_name(UpOrder o);  // "upsample_first" | "conv_first"
// Parses a name up_order_name gives; false for anything else.
bool parse_up_order(const std::string& name, UpOrder* out);

}  // namespace model

#include "model/up_order.h"

namespace model {

const char* up_order_name(UpOrder o) { return o == UpOrder::ConvFirst ? "conv_first" : "upsample_first"; }

bool parse_up_order(const std::string& name, UpOrder* out) {
    if (name == "upsample_first") {
        *out = UpOrder::UpsampleFirst;
        return true;
    }
    if (name == "conv_first") {
        *out = UpOrder::ConvFirst;
        return true;
    }
    return false;
}

}  // namespace model

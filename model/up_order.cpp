#include "model/up_order.h"

namespace model {

const std::vector<std::pair<std::string, UpOrder>>& up_order_choices() {
    static const std::vector<std::pair<std::string, UpOrder>> choices = {{"upsample_first", UpOrder::UpsampleFirst},
                                                                         {"conv_first", UpOrder::ConvFirst}};
    return choices;
}

const char* up_order_name(UpOrder o) {
    for (const auto& [name, order] : up_order_choices())
        if (order == o) return name.c_str();
    return "?";
}

bool parse_up_order(const std::string& name, UpOrder* out) {
    for (const auto& [n, order] : up_order_choices())
        if (n == name) {
            *out = order;
            return true;
        }
    return false;
}

}  // namespace model

#include "kernels/tensor.h"

namespace kern {

const char* act_name(Act a) {
    switch (a) {
        case Act::None: return "none";
        case Act::Silu: return "silu";
        case Act::Relu: return "relu";
    }
    return "?";
}

}  // namespace kern

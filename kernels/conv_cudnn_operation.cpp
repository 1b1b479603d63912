// The one cuDNN convolution operation of fprop, dgrad or wgrad (kern::conv_cudnn_operation,
// kernels/conv_cudnn_probe.h): the attribute names of each operation type in one table.
#include "kernels/conv_cudnn_probe.h"
#include "runtime/error.h"

namespace kern {

namespace {

struct OpAttrs {
    cudnnBackendDescriptorType_t type;
    cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
};

const OpAttrs& op_attrs(ConvOp op) {
    static const OpAttrs fprop{CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA};
    static const OpAttrs dgrad{CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};
    static const OpAttrs wgrad{CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
    return op == ConvOp::Fprop ? fprop : (op == ConvOp::Dgrad ? dgrad : wgrad);
}

}  // namespace

bool conv_cudnn_operation(ConvOp op, const rt::CudnnDesc& x, const rt::CudnnDesc& w, const rt::CudnnDesc& y,
                          const rt::CudnnDesc& conv, float beta, rt::CudnnDesc* out, std::string* why) {
    SF_CHECK(out != nullptr, "conv_cudnn_operation: null output descriptor");
    const OpAttrs& a = op_attrs(op);
    rt::CudnnDesc o(a.type);
    o.set_desc(a.x, x).set_desc(a.w, w).set_desc(a.y, y).set_desc(a.conv, conv).set_float(a.alpha, 1.0f).set_float(
        a.beta, beta);
    if (o.try_finalize(why) != CUDNN_STATUS_SUCCESS) return false;
    *out = std::move(o);
    return true;
}

}  // namespace kern

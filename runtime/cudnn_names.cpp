// Names of cuDNN's numerical notes, behaviour notes, knobs and heuristics modes (runtime/cudnn_graph.h).
#include "runtime/cudnn_graph.h"

namespace rt {

const char* cudnn_numerical_note_name(cudnnBackendNumericalNote_t n) {
    switch (n) {
        case CUDNN_NUMERICAL_NOTE_TENSOR_CORE: return "TENSOR_CORE";
        case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS: return "DOWN_CONVERT_INPUTS";
        case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION: return "REDUCED_PRECISION_REDUCTION";
        case CUDNN_NUMERICAL_NOTE_FFT: return "FFT";
        case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC: return "NONDETERMINISTIC";
        case CUDNN_NUMERICAL_NOTE_WINOGRAD: return "WINOGRAD";
        case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4: return "WINOGRAD_TILE_4x4";
        case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6: return "WINOGRAD_TILE_6x6";
        case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13: return "WINOGRAD_TILE_13x13";
        case CUDNN_NUMERICAL_NOTE_STRICT_NAN_PROP: return "STRICT_NAN_PROP";
        default: return "NOTE_?";
    }
}

const char* cudnn_behavior_note_name(cudnnBackendBehaviorNote_t n) {
    switch (n) {
        case CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION: return "RUNTIME_COMPILATION";
        case CUDNN_BEHAVIOR_NOTE_REQUIRES_FILTER_INT8x32_REORDER: return "REQUIRES_FILTER_INT8x32_REORDER";
        case CUDNN_BEHAVIOR_NOTE_REQUIRES_BIAS_INT8x32_REORDER: return "REQUIRES_BIAS_INT8x32_REORDER";
        case CUDNN_BEHAVIOR_NOTE_SUPPORTS_CUDA_GRAPH_NATIVE_API: return "SUPPORTS_CUDA_GRAPH_NATIVE_API";
        case CUDNN_BEHAVIOR_NOTE_CUBLASLT_DEPENDENCY: return "CUBLASLT_DEPENDENCY";
        default: return "BEHAVIOR_?";
    }
}

const char* cudnn_knob_name(cudnnBackendKnobType_t k) {
    // Only the knobs cuDNN 9 does not mark deprecated; the rest print as KNOB_<n>.
    switch (k) {
        case CUDNN_KNOB_TYPE_SWIZZLE: return "SWIZZLE";
        case CUDNN_KNOB_TYPE_TILE_SIZE: return "TILE_SIZE";
        case CUDNN_KNOB_TYPE_EDGE: return "EDGE";
        case CUDNN_KNOB_TYPE_MULTIPLY: return "MULTIPLY";
        case CUDNN_KNOB_TYPE_SPLIT_K_BUF: return "SPLIT_K_BUF";
        case CUDNN_KNOB_TYPE_TILEK: return "TILEK";
        case CUDNN_KNOB_TYPE_STAGES: return "STAGES";
        case CUDNN_KNOB_TYPE_REDUCTION_MODE: return "REDUCTION_MODE";
        case CUDNN_KNOB_TYPE_SPLIT_K_SLC: return "SPLIT_K_SLC";
        case CUDNN_KNOB_TYPE_IDX_MODE: return "IDX_MODE";
        case CUDNN_KNOB_TYPE_SPECFILT: return "SPECFILT";
        case CUDNN_KNOB_TYPE_KERNEL_CFG: return "KERNEL_CFG";
        case CUDNN_KNOB_TYPE_WORKSPACE: return "WORKSPACE";
        case CUDNN_KNOB_TYPE_TILE_CGA_M: return "TILE_CGA_M";
        case CUDNN_KNOB_TYPE_TILE_CGA_N: return "TILE_CGA_N";
        case CUDNN_KNOB_TYPE_BLOCK_SIZE: return "BLOCK_SIZE";
        case CUDNN_KNOB_TYPE_OCCUPANCY: return "OCCUPANCY";
        case CUDNN_KNOB_TYPE_ARRAY_SIZE_PER_THREAD: return "ARRAY_SIZE_PER_THREAD";
        case CUDNN_KNOB_TYPE_SPLIT_COLS: return "SPLIT_COLS";
        case CUDNN_KNOB_TYPE_TILE_ROWS: return "TILE_ROWS";
        case CUDNN_KNOB_TYPE_TILE_COLS: return "TILE_COLS";
        case CUDNN_KNOB_TYPE_LOAD_SIZE: return "LOAD_SIZE";
        case CUDNN_KNOB_TYPE_CTA_COUNT: return "CTA_COUNT";
        case CUDNN_KNOB_TYPE_STREAM_K: return "STREAM_K";
        case CUDNN_KNOB_TYPE_SPLIT_P_SLC: return "SPLIT_P_SLC";
        case CUDNN_KNOB_TYPE_TILE_M: return "TILE_M";
        case CUDNN_KNOB_TYPE_TILE_N: return "TILE_N";
        case CUDNN_KNOB_TYPE_WARP_SPEC_CFG: return "WARP_SPEC_CFG";
        case CUDNN_KNOB_TYPE_SWAP_AB: return "SWAP_AB";
        default: return nullptr;
    }
}

const char* cudnn_heur_mode_name(cudnnBackendHeurMode_t m) {
    switch (m) {
        case CUDNN_HEUR_MODE_INSTANT: return "heurInstant";
        case CUDNN_HEUR_MODE_B: return "heurB";
        case CUDNN_HEUR_MODE_FALLBACK: return "fallback";
        case CUDNN_HEUR_MODE_A: return "heurA";
        default: return "heur?";
    }
}

}  // namespace rt

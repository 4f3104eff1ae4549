// Element types and reductions of the simulated NCCL (nccl.cpp). A reduction folds the
// ranks' contributions in rank order, in the element type (float16 and bfloat16 through
// float, rounded back after every step, as NCCL rounds after every hop), so that every
// rank computes bit-identical results, as NCCL's all-reduce guarantees.
#pragma once

#include <nccl.h>

#include <cstddef>

namespace cudasim::nccl {

// Bytes of one element; 0 for a type the simulator does not know.
size_t element_bytes(ncclDataType_t type);
// Whether `op` over `type` is simulated (sum, prod, max, min, avg over the non-fp8 types).
bool reduction_supported(ncclDataType_t type, ncclRedOp_t op);
// acc[i] = op(acc[i], x[i]) for n elements (avg sums; reduce_finish divides).
void reduce_into(void* acc, const void* x, size_t n, ncclDataType_t type, ncclRedOp_t op);
// The last step of `op` over `nranks` contributions: avg divides by nranks, others nothing.
void reduce_finish(void* acc, size_t n, ncclDataType_t type, ncclRedOp_t op, int nranks);

const char* type_name(ncclDataType_t type);
const char* op_name(ncclRedOp_t op);

}  // namespace cudasim::nccl

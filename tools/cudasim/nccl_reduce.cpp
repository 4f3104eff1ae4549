#include "nccl_reduce.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace cudasim::nccl {
namespace {

// How an element type computes: T itself, or float for the 16-bit floats.
template <class T>
struct Arithmetic {
  using Compute = T;
  static Compute load(T x) { return x; }
  static T store(Compute x) { return x; }
};
template <>
struct Arithmetic<__half> {
  using Compute = float;
  static float load(__half x) { return __half2float(x); }
  static __half store(float x) { return __float2half_rn(x); }
};
template <>
struct Arithmetic<__nv_bfloat16> {
  using Compute = float;
  static float load(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __nv_bfloat16 store(float x) { return __float2bfloat16_rn(x); }
};

template <class T>
void fold(void* acc_bytes, const void* x_bytes, size_t n, ncclRedOp_t op) {
  using A = Arithmetic<T>;
  auto* acc = static_cast<unsigned char*>(acc_bytes);
  const auto* x = static_cast<const unsigned char*>(x_bytes);
  for (size_t i = 0; i < n; ++i) {
    T a, b;  // memcpy: the shared-memory slots carry no alignment promise for T
    std::memcpy(&a, acc + i * sizeof(T), sizeof(T));
    std::memcpy(&b, x + i * sizeof(T), sizeof(T));
    const auto u = A::load(a), v = A::load(b);
    typename A::Compute r;
    switch (op) {
      case ncclProd: r = u * v; break;
      case ncclMax: r = std::max(u, v); break;
      case ncclMin: r = std::min(u, v); break;
      default: r = u + v; break;  // ncclSum, ncclAvg
    }
    const T out = A::store(r);
    std::memcpy(acc + i * sizeof(T), &out, sizeof(T));
  }
}

template <class T>
void divide(void* acc_bytes, size_t n, int nranks) {
  using A = Arithmetic<T>;
  auto* acc = static_cast<unsigned char*>(acc_bytes);
  for (size_t i = 0; i < n; ++i) {
    T a;
    std::memcpy(&a, acc + i * sizeof(T), sizeof(T));
    const T out = A::store(A::load(a) / static_cast<typename A::Compute>(nranks));
    std::memcpy(acc + i * sizeof(T), &out, sizeof(T));
  }
}

// Calls f.template operator()<T>() for the C++ type of `type`; false for fp8 and unknown.
template <class F>
bool dispatch(ncclDataType_t type, F&& f) {
  switch (type) {
    case ncclInt8: f(int8_t{}); return true;
    case ncclUint8: f(uint8_t{}); return true;
    case ncclInt32: f(int32_t{}); return true;
    case ncclUint32: f(uint32_t{}); return true;
    case ncclInt64: f(int64_t{}); return true;
    case ncclUint64: f(uint64_t{}); return true;
    case ncclFloat16: f(__half{}); return true;
    case ncclFloat32: f(float{}); return true;
    case ncclFloat64: f(double{}); return true;
    case ncclBfloat16: f(__nv_bfloat16{}); return true;
    default: return false;
  }
}

}  // namespace

size_t element_bytes(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

bool reduction_supported(ncclDataType_t type, ncclRedOp_t op) {
  const bool known_op = op == ncclSum || op == ncclProd || op == ncclMax || op == ncclMin || op == ncclAvg;
  return known_op && dispatch(type, [](auto) {});
}

void reduce_into(void* acc, const void* x, size_t n, ncclDataType_t type, ncclRedOp_t op) {
  dispatch(type, [&](auto t) { fold<decltype(t)>(acc, x, n, op); });
}

void reduce_finish(void* acc, size_t n, ncclDataType_t type, ncclRedOp_t op, int nranks) {
  if (op == ncclAvg) dispatch(type, [&](auto t) { divide<decltype(t)>(acc, n, nranks); });
}

const char* type_name(ncclDataType_t type) {
  static const char* const names[] = {"int8",    "uint8",   "int32",   "uint32",   "int64",      "uint64",
                                      "float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"};
  return type >= 0 && type < ncclNumTypes ? names[type] : "an unknown type";
}

const char* op_name(ncclRedOp_t op) {
  static const char* const names[] = {"sum", "prod", "max", "min", "avg"};
  return op >= 0 && op < ncclNumOps ? names[op] : "a custom op (not simulated)";
}

}  // namespace cudasim::nccl

#include "actor/onednn_matmul.h"

#include "core/error.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#if TANDEM_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#endif

#include <map>
#include <tuple>

namespace tandem {

#if TANDEM_WITH_ONEDNN

namespace {

using Dims = dnnl::memory::dims;

// A primitive is specialised to its shapes, strides and types: building one JIT-compiles
// a kernel (tens of microseconds to milliseconds), so each thread keeps the ones it built.
// A training step repeats the same few dozen shapes.
struct PrimitiveKey {
  int64_t m, k, n, a_rows, a_cols, b_rows, b_cols, out_rows;
  bool bf16, accumulate;
  bool operator<(const PrimitiveKey& o) const {
    return std::tie(m, k, n, a_rows, a_cols, b_rows, b_cols, out_rows, bf16, accumulate) <
           std::tie(o.m, o.k, o.n, o.a_rows, o.a_cols, o.b_rows, o.b_cols, o.out_rows, o.bf16, o.accumulate);
  }
};

struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<PrimitiveKey, std::pair<dnnl::matmul, dnnl::matmul::primitive_desc>> primitives;
};

Context& thread_context() {
  thread_local Context context = [] {
    // oneDNN runs on OpenMP with the calling thread's thread count, which libtorch's
    // at::set_num_threads sets only on the thread that called it: take libtorch's count
    // here too (a learner thread would otherwise use every core of the machine).
    at::init_num_threads();
    return Context{};
  }();
  return context;
}

// oneDNN reads any strides, but fast only with a unit stride in one dimension.
at::Tensor with_unit_stride(const at::Tensor& t) {
  return t.stride(0) == 1 || t.stride(1) == 1 ? t : t.contiguous();
}

const std::pair<dnnl::matmul, dnnl::matmul::primitive_desc>& primitive_for(Context& context, const PrimitiveKey& key) {
  auto it = context.primitives.find(key);
  if (it != context.primitives.end()) return it->second;
  const auto type = key.bf16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
  const dnnl::memory::desc a({key.m, key.k}, type, Dims{key.a_rows, key.a_cols});
  const dnnl::memory::desc b({key.k, key.n}, type, Dims{key.b_rows, key.b_cols});
  const dnnl::memory::desc c({key.m, key.n}, dnnl::memory::data_type::f32, Dims{key.out_rows, 1});
  dnnl::primitive_attr attributes;
  if (key.accumulate) {  // out = 1·out + a·b, in the same pass
    dnnl::post_ops sum;
    sum.append_sum(1.0f);
    attributes.set_post_ops(sum);
  }
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attributes, context.engine);
  return context.primitives.emplace(key, std::make_pair(dnnl::matmul(pd), pd)).first->second;
}

}  // namespace

void onednn_matmul(const at::Tensor& a_in, const at::Tensor& b_in, const at::Tensor& out, bool accumulate) {
  const bool bf16 = a_in.scalar_type() == at::kBFloat16;
  TANDEM_CHECK(a_in.dim() == 2 && b_in.dim() == 2 && out.dim() == 2 && a_in.size(1) == b_in.size(0) &&
                   out.size(0) == a_in.size(0) && out.size(1) == b_in.size(1),
               "onednn_matmul: shapes a [{}] · b [{}] -> out [{}] do not chain", fmt::join(a_in.sizes(), ", "),
               fmt::join(b_in.sizes(), ", "), fmt::join(out.sizes(), ", "));
  TANDEM_CHECK((bf16 || a_in.scalar_type() == at::kFloat) && b_in.scalar_type() == a_in.scalar_type() &&
                   out.scalar_type() == at::kFloat && out.stride(1) == 1 && out.stride(0) >= out.size(1),
               "onednn_matmul: a and b both float32 or both bfloat16, out float32 with contiguous rows; got {}, {}, {}",
               c10::toString(a_in.scalar_type()), c10::toString(b_in.scalar_type()), c10::toString(out.scalar_type()));
  TANDEM_CHECK(a_in.device().is_cpu() && b_in.device().is_cpu() && out.device().is_cpu(),
               "onednn_matmul: CPU tensors only");
  const int64_t m = a_in.size(0), k = a_in.size(1), n = b_in.size(1);
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate) out.zero_();
    return;
  }
  const at::Tensor a = with_unit_stride(a_in), b = with_unit_stride(b_in);
  Context& context = thread_context();
  try {
    const auto& [primitive, pd] =
        primitive_for(context, {m, k, n, a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), bf16, accumulate});
    dnnl::memory a_memory(pd.src_desc(), context.engine, a.data_ptr());
    dnnl::memory b_memory(pd.weights_desc(), context.engine, b.data_ptr());
    dnnl::memory c_memory(pd.dst_desc(), context.engine, out.data_ptr());
    primitive.execute(context.stream, {{DNNL_ARG_SRC, a_memory}, {DNNL_ARG_WEIGHTS, b_memory}, {DNNL_ARG_DST, c_memory}});
    context.stream.wait();
  } catch (const dnnl::error& e) {
    throw Error(fmt::format("oneDNN matrix product [{}, {}] · [{}, {}] ({}) failed: {} (status {})", m, k, k, n,
                            bf16 ? "bfloat16" : "float32", e.what(), static_cast<int>(e.status)));
  }
}

bool onednn_available() { return true; }

#else

void onednn_matmul(const at::Tensor&, const at::Tensor&, const at::Tensor&, bool) {
  throw Error("onednn_matmul: this build has no oneDNN (another libtorch, torch_dir, brings its own)");
}

bool onednn_available() { return false; }

#endif

}  // namespace tandem

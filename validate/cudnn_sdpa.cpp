// cuDNN's fused attention through its backend (graph) API: see cudnn_sdpa.hpp. The graph
// is the one cuDNN's runtime-fusion engine recognises as flash attention (the same
// operations cudnn-frontend's SDPA node lowers to); each operation below says its part.
#include "fsdptune/cudnn_sdpa.hpp"

#include <cuda_runtime.h>
#include <cudnn_graph.h>
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "fsdptune/error.hpp"

namespace fsdptune {
namespace {

// The cuDNN entry points fsdptune calls, from libcudnn.so.9 loaded at run time.
struct CudnnApi {
  decltype(&cudnnGetVersion) get_version = nullptr;
  decltype(&cudnnGetErrorString) error_string = nullptr;
  decltype(&cudnnGetLastErrorString) last_error_string = nullptr;
  decltype(&cudnnCreate) create = nullptr;
  decltype(&cudnnDestroy) destroy = nullptr;
  decltype(&cudnnSetStream) set_stream = nullptr;
  decltype(&cudnnBackendCreateDescriptor) create_descriptor = nullptr;
  decltype(&cudnnBackendDestroyDescriptor) destroy_descriptor = nullptr;
  decltype(&cudnnBackendSetAttribute) set_attribute = nullptr;
  decltype(&cudnnBackendGetAttribute) get_attribute = nullptr;
  decltype(&cudnnBackendFinalize) finalize = nullptr;
  decltype(&cudnnBackendExecute) execute = nullptr;
};

// Where libcudnn.so.9 is looked for, in order: $FSDPTUNE_CUDNN_LIBRARY, the loader's
// search path (LD_LIBRARY_PATH, ld.so.cache), the one this build found (CMake).
std::vector<std::string> library_candidates() {
  std::vector<std::string> candidates;
  if (const char* named = std::getenv("FSDPTUNE_CUDNN_LIBRARY"); named != nullptr && *named) {
    candidates.emplace_back(named);
    return candidates;
  }
  candidates.emplace_back("libcudnn.so.9");
  const std::string built_with = FSDPTUNE_CUDNN_LIBRARY_PATH;
  if (!built_with.empty()) candidates.push_back(built_with);
  return candidates;
}

// The process's cuDNN, loaded on first use; nullptr and the reason when it cannot be.
const CudnnApi* load_cudnn(std::string* why) {
  static std::once_flag once;
  static CudnnApi api;
  static std::string failure;
  std::call_once(once, [] {
    void* library = nullptr;
    std::string tried;
    for (const auto& candidate : library_candidates()) {
      library = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (library != nullptr) break;
      const char* error = dlerror();
      tried += (tried.empty() ? "" : "; ") + (error != nullptr ? std::string(error) : candidate);
    }
    if (library == nullptr) {
      failure = "cannot load cuDNN (" + tried + ")";
      return;
    }
    bool complete = true;
    const auto bind = [&](auto& function, const char* symbol) {
      function =
          reinterpret_cast<std::remove_reference_t<decltype(function)>>(dlsym(library, symbol));
      if (function == nullptr) {
        complete = false;
        failure += std::string(failure.empty() ? "" : ", ") + symbol;
      }
    };
    bind(api.get_version, "cudnnGetVersion");
    bind(api.error_string, "cudnnGetErrorString");
    bind(api.last_error_string, "cudnnGetLastErrorString");
    bind(api.create, "cudnnCreate");
    bind(api.destroy, "cudnnDestroy");
    bind(api.set_stream, "cudnnSetStream");
    bind(api.create_descriptor, "cudnnBackendCreateDescriptor");
    bind(api.destroy_descriptor, "cudnnBackendDestroyDescriptor");
    bind(api.set_attribute, "cudnnBackendSetAttribute");
    bind(api.get_attribute, "cudnnBackendGetAttribute");
    bind(api.finalize, "cudnnBackendFinalize");
    bind(api.execute, "cudnnBackendExecute");
    if (!complete) {
      failure = "the cuDNN library loaded lacks " + failure + " (cuDNN 9 needed)";
      return;
    }
    if (api.get_version() < 90000) {
      failure = "cuDNN " + std::to_string(api.get_version()) + " is older than 9.0";
    }
  });
  if (!failure.empty()) {
    if (why != nullptr) *why = failure;
    return nullptr;
  }
  return &api;
}

const CudnnApi& cudnn_or_throw() {
  std::string why;
  const CudnnApi* api = load_cudnn(&why);
  if (api == nullptr) throw_runtime("cudnn", why);
  return *api;
}

// A failed cuDNN call: Error(kRuntime) naming what was being built or run, with cuDNN's
// status and its last error message.
void check(const CudnnApi& api, cudnnStatus_t status, const std::string& what) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  std::string detail(512, '\0');
  api.last_error_string(detail.data(), detail.size());
  detail.resize(std::strlen(detail.c_str()));
  throw_runtime("cudnn", what + ": " + api.error_string(status) +
                             (detail.empty() ? "" : " (" + detail + ")"));
}

// One backend descriptor, destroyed with its owner; named for the errors.
class Descriptor {
 public:
  Descriptor(const CudnnApi& api, cudnnBackendDescriptorType_t type, std::string name)
      : api_(&api), name_(std::move(name)) {
    check(api, api.create_descriptor(type, &handle_), "creating " + name_);
  }
  ~Descriptor() {
    if (handle_ != nullptr) api_->destroy_descriptor(handle_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return handle_; }

  template <typename T>
  Descriptor& set(cudnnBackendAttributeName_t attribute, cudnnBackendAttributeType_t type,
                  const std::vector<T>& values) {
    check(*api_,
          api_->set_attribute(handle_, attribute, type, static_cast<std::int64_t>(values.size()),
                              values.data()),
          "setting attribute " + std::to_string(attribute) + " of " + name_);
    return *this;
  }
  Descriptor& set_bool(cudnnBackendAttributeName_t attribute, bool value) {
    check(*api_, api_->set_attribute(handle_, attribute, CUDNN_TYPE_BOOLEAN, 1, &value),
          "setting attribute " + std::to_string(attribute) + " of " + name_);
    return *this;
  }
  Descriptor& set_int(cudnnBackendAttributeName_t attribute, std::int64_t value) {
    return set(attribute, CUDNN_TYPE_INT64, std::vector<std::int64_t>{value});
  }
  Descriptor& set_ints(cudnnBackendAttributeName_t attribute,
                       const std::vector<std::int64_t>& values) {
    return set(attribute, CUDNN_TYPE_INT64, values);
  }
  Descriptor& set_descriptor(cudnnBackendAttributeName_t attribute, const Descriptor& value) {
    return set(attribute, CUDNN_TYPE_BACKEND_DESCRIPTOR,
               std::vector<cudnnBackendDescriptor_t>{value.get()});
  }
  Descriptor& finalize() {
    check(*api_, api_->finalize(handle_), "finalizing " + name_);
    return *this;
  }

 private:
  const CudnnApi* api_;
  std::string name_;
  cudnnBackendDescriptor_t handle_ = nullptr;
};

// ---- execution: operation graph -> heuristics -> engine config -> plan -> variant pack

// Finalizes `descriptor`; false, with cuDNN's refusal in `refusal`, when it will not.
bool finalizes(Descriptor& descriptor, std::string* refusal) {
  try {
    descriptor.finalize();
    return true;
  } catch (const Error& e) {
    *refusal = e.message();
    return false;
  }
}

// The first engine configuration cuDNN's heuristics (mode A, then the fallback list)
// offer that finalizes into an execution plan for `graph`; throws when none does, with the
// last refusal.
const Descriptor& build_plan(const CudnnApi& api, cudnnHandle_t handle, const Descriptor& graph,
                             std::deque<Descriptor>& parts, std::int64_t* workspace_bytes) {
  std::string last_refusal = "no engine configuration offered";
  for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    Descriptor& heuristics =
        parts.emplace_back(api, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "the engine heuristics");
    heuristics.set_descriptor(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
    heuristics.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE,
                   std::vector<cudnnBackendHeurMode_t>{mode});
    if (!finalizes(heuristics, &last_refusal)) continue;
    std::int64_t offered = 0;
    check(api,
          api.get_attribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                            CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &offered, nullptr),
          "counting the engine heuristics' results");
    if (offered <= 0) continue;
    std::vector<Descriptor*> configs;
    std::vector<cudnnBackendDescriptor_t> handles;
    for (std::int64_t i = 0; i < offered; ++i) {
      configs.push_back(&parts.emplace_back(api, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR,
                                            "engine configuration " + std::to_string(i)));
      handles.push_back(configs.back()->get());
    }
    std::int64_t returned = 0;
    check(api,
          api.get_attribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                            CUDNN_TYPE_BACKEND_DESCRIPTOR, offered, &returned, handles.data()),
          "reading the engine heuristics' results");
    for (std::int64_t i = 0; i < returned; ++i) {
      Descriptor& plan =
          parts.emplace_back(api, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "the execution plan");
      plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE,
               std::vector<cudnnHandle_t>{handle});
      plan.set_descriptor(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, *configs[i]);
      if (!finalizes(plan, &last_refusal)) continue;
      std::int64_t count = 0;
      check(api,
            api.get_attribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                              CUDNN_TYPE_INT64, 1, &count, workspace_bytes),
            "reading the plan's workspace size");
      return plan;
    }
  }
  throw_runtime("cudnn", "no execution plan: " + last_refusal);
}

// ---- the graphs

// The real (non-virtual) tensors' unique ids; virtual ones count up from kFirstVirtual.
enum Uid : std::int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kScale,
  kNegativeInfinity,
  kOne,
  kDO,
  kDQ,
  kDK,
  kDV,
  kSoftmaxSum,
  kDQAccumulator,
  kSeqQ,  // by-value INT32: the bottom-right causal mask's query and key lengths
  kSeqKv,
  kFirstVirtual = 100,
};

using Dims = std::vector<std::int64_t>;

// Two ways of writing the same graph, as cuDNN's frontend has over the releases: they
// differ only in attributes the runtime-fusion engine might match strictly. Tried in
// order until one yields a plan (the graphs have not run on a GPU yet: the first GPU run
// says which one cuDNN takes, docs/validation.md "The cuda attention").
struct GraphStyle {
  const char* name;
  cudnnDataType_t index_precision;   // GEN_INDEX's math precision
  bool reduction_not_deterministic;  // CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC false (>= 9.11)
  bool matmul_padding_value;         // CUDNN_ATTR_MATMUL_PADDING_VALUE 0.0
};
constexpr GraphStyle kGraphStyles[] = {
    {"the current frontend's", CUDNN_DATA_FLOAT, true, false},
    {"the older frontend's", CUDNN_DATA_INT32, false, true},
};

// Builds the tensors and operations of one graph, in the order cuDNN's frontend emits
// them; every descriptor finalized as it is made (no handle needed until the graph).
class GraphBuilder {
 public:
  GraphBuilder(const CudnnApi& api, const GraphStyle& style, std::deque<Descriptor>& parts)
      : api_(api), style_(style), parts_(parts) {}

  const GraphStyle& style() const { return style_; }

  enum class Kind { kReal, kVirtual, kByValue };

  const Descriptor& tensor(const std::string& name, std::int64_t uid, const Dims& dims,
                           const Dims& strides, cudnnDataType_t type, Kind kind) {
    Descriptor& t = parts_.emplace_back(api_, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor " + name);
    t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, std::vector<cudnnDataType_t>{type});
    t.set_ints(CUDNN_ATTR_TENSOR_DIMENSIONS, dims);
    t.set_ints(CUDNN_ATTR_TENSOR_STRIDES, strides);
    t.set_int(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid);
    t.set_int(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16);
    if (kind == Kind::kVirtual) {
      t.set_bool(CUDNN_ATTR_TENSOR_IS_VIRTUAL, true);
    }
    if (kind == Kind::kByValue) {
      t.set_bool(CUDNN_ATTR_TENSOR_IS_BY_VALUE, true);
    }
    return t.finalize();
  }
  // A virtual tensor (an intermediate the fused kernel never writes out).
  const Descriptor& virtual_tensor(const std::string& name, const Dims& dims, const Dims& strides,
                                   cudnnDataType_t type) {
    return tensor(name, next_virtual_++, dims, strides, type, Kind::kVirtual);
  }

  // Y = mode(X[, B][, T]); axis: GEN_INDEX's dimension.
  void pointwise(const std::string& name, cudnnPointwiseMode_t mode, const Descriptor& x,
                 const Descriptor* b, const Descriptor* t, const Descriptor& y,
                 cudnnDataType_t precision = CUDNN_DATA_FLOAT, std::int64_t axis = -1) {
    Descriptor& function =
        parts_.emplace_back(api_, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise " + name);
    function.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE,
                 std::vector<cudnnPointwiseMode_t>{mode});
    function.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE,
                 std::vector<cudnnDataType_t>{precision});
    if (axis >= 0) function.set_int(CUDNN_ATTR_POINTWISE_AXIS, axis);
    function.finalize();
    Descriptor& op = parts_.emplace_back(api_, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR,
                                         "operation " + name);
    op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, function);
    op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b != nullptr) op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
    if (t != nullptr) op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, *t);
    op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, std::vector<float>{1.0f});
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, std::vector<float>{1.0f});
    operations_.push_back(&op.finalize());
  }

  // C = A B over the last two dimensions; the leading ones batch (a smaller head count in
  // B broadcasts over A's: grouped-query attention).
  void matmul(const std::string& name, const Descriptor& a, const Descriptor& b,
              const Descriptor& c) {
    Descriptor& function =
        parts_.emplace_back(api_, CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul " + name);
    function.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE,
                 std::vector<cudnnDataType_t>{CUDNN_DATA_FLOAT});
    if (style_.matmul_padding_value) {
      function.set(CUDNN_ATTR_MATMUL_PADDING_VALUE, CUDNN_TYPE_DOUBLE, std::vector<double>{0.0});
    }
    function.finalize();
    Descriptor& op =
        parts_.emplace_back(api_, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "operation " + name);
    op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
    op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
    op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_DESC, function);
    operations_.push_back(&op.finalize());
  }

  // Y = the X elements reduced over the dimensions where Y has 1 (or fewer heads).
  void reduction(const std::string& name, cudnnReduceTensorOp_t reduce, const Descriptor& x,
                 const Descriptor& y) {
    Descriptor& function =
        parts_.emplace_back(api_, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction " + name);
    function.set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE,
                 std::vector<cudnnDataType_t>{CUDNN_DATA_FLOAT});
    function.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE,
                 std::vector<cudnnReduceTensorOp_t>{reduce});
    if (style_.reduction_not_deterministic && api_.get_version() >= 91100) {
      function.set_bool(CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, false);
    }
    function.finalize();
    Descriptor& op = parts_.emplace_back(api_, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR,
                                         "operation " + name);
    op.set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_DESC, function);
    op.set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
    op.set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    operations_.push_back(&op.finalize());
  }

  // Y = X seen through Y's dimensions and strides (a transpose) and data type.
  void reshape(const std::string& name, const Descriptor& x, const Descriptor& y) {
    Descriptor& op =
        parts_.emplace_back(api_, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "operation " + name);
    op.set_descriptor(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
    op.set_descriptor(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    operations_.push_back(&op.finalize());
  }

  const std::vector<const Descriptor*>& operations() const { return operations_; }

 private:
  const CudnnApi& api_;
  const GraphStyle& style_;
  std::deque<Descriptor>& parts_;
  std::vector<const Descriptor*> operations_;
  std::int64_t next_virtual_ = kFirstVirtual;
};

// One graph's run over a band of an op's queries: `s_q` query rows against the first
// `s_kv` keys, under the causal mask aligned at the bottom right (query row i attends keys
// [0, i + s_kv - s_q]; top left when s_q == s_kv). Q, O, dO and dQ are slices of the op's
// tensors of `q_rows` rows, K and V of its `kv_rows` keys; the statistics, dK and dV are
// packed for the band (cuDNN before 9.26 reads the backward's statistics as packed
// whatever strides they declare, its frontend says; before 9.12 the forward wrote them so).
struct Band {
  std::int64_t b, hq, hk, d, s_q, s_kv, q_rows, kv_rows;
  auto operator<=>(const Band&) const = default;
};

// The bands of an op (cudnn_sdpa.hpp): one, all its rows against all keys; under context
// parallelism (rank 0's rows, chunks 0 and 2 cp - 1 of size c = seq / (2 cp), kernels.hpp)
// chunk 0 against the first c keys and the last chunk against all seq, bottom-right
// aligned (its row i sits at position seq - c + i).
std::vector<Band> bands_of(const AttentionShape& s) {
  const std::int64_t rows = s.query_rows();
  if (s.context_parallel == 1) {
    return {{s.batch, s.heads, s.kv_heads, s.head_dim, s.seq, s.seq, rows, s.seq}};
  }
  const std::int64_t chunk = rows / 2;
  return {{s.batch, s.heads, s.kv_heads, s.head_dim, chunk, chunk, rows, s.seq},
          {s.batch, s.heads, s.kv_heads, s.head_dim, chunk, s.seq, rows, s.seq}};
}

// The dimensions and layouts of one band's graph.
struct Sizes {
  std::int64_t b, hq, hk, sq, skv, d, rq, rkv;
  explicit Sizes(const Band& band)
      : b(band.b),
        hq(band.hq),
        hk(band.hk),
        sq(band.s_q),
        skv(band.s_kv),
        d(band.d),
        rq(band.q_rows),
        rkv(band.kv_rows) {}
  // Q, O, dO, dQ: [b, hq, sq, d], rows of the op's [b, hq, rq, d].
  Dims queries() const { return {b, hq, sq, d}; }
  Dims queries_strides() const { return {hq * rq * d, rq * d, d, 1}; }
  // The same contiguous (the dQ accumulator in the workspace).
  Dims queries_packed_strides() const { return {hq * sq * d, sq * d, d, 1}; }
  // K or V: [b, hk, skv, d], the first skv of the op's rkv keys; and as [b, hk, d, skv]:
  // the same memory, its last two dimensions swapped.
  Dims keys() const { return {b, hk, skv, d}; }
  Dims keys_strides() const { return {hk * rkv * d, rkv * d, d, 1}; }
  Dims transposed() const { return {b, hk, d, skv}; }
  Dims transposed_strides() const { return {hk * rkv * d, rkv * d, 1, d}; }
  // dK, dV contiguous [b, h, skv, d] (h = hk, or hq before GQA's sum over each group).
  Dims key_gradients(std::int64_t h) const { return {b, h, skv, d}; }
  Dims key_gradients_strides(std::int64_t h) const { return {h * skv * d, skv * d, d, 1}; }
  // Scores [b, hq, sq, skv], and their transpose [b, hq, skv, sq] over the same memory.
  Dims scores() const { return {b, hq, sq, skv}; }
  Dims scores_strides() const { return {hq * sq * skv, sq * skv, skv, 1}; }
  Dims scores_transposed() const { return {b, hq, skv, sq}; }
  Dims scores_transposed_strides() const { return {hq * sq * skv, sq * skv, 1, skv}; }
  // One value per query row: [b, hq, sq, 1] packed (the statistics too).
  Dims per_row() const { return {b, hq, sq, 1}; }
  Dims per_row_strides() const { return {hq * sq, sq, 1, 1}; }
  bool bottom_right() const { return skv != sq; }
};

const Dims kScalar = {1, 1, 1, 1};
using Kind = GraphBuilder::Kind;

// The causal mask on scores X (row i keeps columns j <= i, the rest -inf): the row and
// column indices, their comparison, and a select. Bottom-right aligned (s_kv > s_q), the
// row index first moves by s_kv - s_q, as cuDNN's frontend writes it: + s_kv, - s_q, in
// INT32 with by-value scalars.
const Descriptor& causal_mask(GraphBuilder& graph, const Sizes& z, const Descriptor& scores,
                              const Descriptor& negative_infinity) {
  const auto& row =
      graph.virtual_tensor("row index", z.scores(), z.scores_strides(), CUDNN_DATA_INT32);
  const auto& column =
      graph.virtual_tensor("column index", z.scores(), z.scores_strides(), CUDNN_DATA_INT32);
  const auto& keep =
      graph.virtual_tensor("causal keep", z.scores(), z.scores_strides(), CUDNN_DATA_BOOLEAN);
  const auto& masked =
      graph.virtual_tensor("masked scores", z.scores(), z.scores_strides(), CUDNN_DATA_FLOAT);
  graph.pointwise("row index", CUDNN_POINTWISE_GEN_INDEX, scores, nullptr, nullptr, row,
                  graph.style().index_precision, 2);
  graph.pointwise("column index", CUDNN_POINTWISE_GEN_INDEX, scores, nullptr, nullptr, column,
                  graph.style().index_precision, 3);
  const Descriptor* position = &row;
  if (z.bottom_right()) {
    const auto int32 = CUDNN_DATA_INT32;
    const auto& s_kv = graph.tensor("s_kv", kSeqKv, kScalar, kScalar, int32, Kind::kByValue);
    const auto& s_q = graph.tensor("s_q", kSeqQ, kScalar, kScalar, int32, Kind::kByValue);
    const auto& plus =
        graph.virtual_tensor("row + s_kv", z.scores(), z.scores_strides(), CUDNN_DATA_INT32);
    const auto& shifted =
        graph.virtual_tensor("row + s_kv - s_q", z.scores(), z.scores_strides(), int32);
    // No axis on these two (the frontend's band mask sets one on GEN_INDEX only).
    graph.pointwise("row + s_kv", CUDNN_POINTWISE_ADD, row, &s_kv, nullptr, plus, int32);
    graph.pointwise("row + s_kv - s_q", CUDNN_POINTWISE_SUB, plus, &s_q, nullptr, shifted, int32);
    position = &shifted;
  }
  graph.pointwise("row >= column", CUDNN_POINTWISE_CMP_GE, *position, &column, nullptr, keep,
                  CUDNN_DATA_BOOLEAN);
  graph.pointwise("causal select", CUDNN_POINTWISE_BINARY_SELECT, scores, &negative_infinity, &keep,
                  masked);
  return masked;
}

// Forward, training: O = softmax(scale Q K^T, causal) V and the softmax statistics
// max + log(sum exp) per row, which the backward recomputes P from.
void forward_graph(GraphBuilder& graph, const Sizes& z) {
  const auto bf16 = CUDNN_DATA_BFLOAT16;
  const auto fp32 = CUDNN_DATA_FLOAT;
  const auto& q = graph.tensor("Q", kQ, z.queries(), z.queries_strides(), bf16, Kind::kReal);
  const auto& k_t =
      graph.tensor("K", kK, z.transposed(), z.transposed_strides(), bf16, Kind::kReal);
  const auto& v = graph.tensor("V", kV, z.keys(), z.keys_strides(), bf16, Kind::kReal);
  const auto& scale = graph.tensor("scale", kScale, kScalar, kScalar, fp32, Kind::kByValue);
  const auto& negative_infinity =
      graph.tensor("-inf", kNegativeInfinity, kScalar, kScalar, fp32, Kind::kByValue);
  const auto& o = graph.tensor("O", kO, z.queries(), z.queries_strides(), bf16, Kind::kReal);
  const auto& stats =
      graph.tensor("stats", kStats, z.per_row(), z.per_row_strides(), fp32, Kind::kReal);

  const auto& s = graph.virtual_tensor("scores", z.scores(), z.scores_strides(), fp32);
  const auto& scaled = graph.virtual_tensor("scaled scores", z.scores(), z.scores_strides(), fp32);
  graph.matmul("Q K^T", q, k_t, s);
  graph.pointwise("scale", CUDNN_POINTWISE_MUL, s, &scale, nullptr, scaled);
  const auto& masked = causal_mask(graph, z, scaled, negative_infinity);
  const auto& max = graph.virtual_tensor("row max", z.per_row(), z.per_row_strides(), fp32);
  const auto& shifted = graph.virtual_tensor("shifted", z.scores(), z.scores_strides(), fp32);
  const auto& exp = graph.virtual_tensor("exp", z.scores(), z.scores_strides(), fp32);
  const auto& sum = graph.virtual_tensor("row sum", z.per_row(), z.per_row_strides(), fp32);
  const auto& log = graph.virtual_tensor("log sum", z.per_row(), z.per_row_strides(), fp32);
  // P in bf16: the second product's A operand in the I/O type (what the engine takes).
  const auto& p = graph.virtual_tensor("P", z.scores(), z.scores_strides(), bf16);
  graph.reduction("row max", CUDNN_REDUCE_TENSOR_MAX, masked, max);
  graph.pointwise("subtract max", CUDNN_POINTWISE_SUB, masked, &max, nullptr, shifted);
  graph.pointwise("exp", CUDNN_POINTWISE_EXP, shifted, nullptr, nullptr, exp);
  graph.reduction("row sum", CUDNN_REDUCE_TENSOR_ADD, exp, sum);
  graph.pointwise("log", CUDNN_POINTWISE_LOG, sum, nullptr, nullptr, log);
  graph.pointwise("stats", CUDNN_POINTWISE_ADD, max, &log, nullptr, stats);
  graph.pointwise("normalize", CUDNN_POINTWISE_DIV, exp, &sum, nullptr, p);
  graph.matmul("P V", p, v, o);
}

// A K or V gradient `out` = a b: per query head, then under GQA summed over each group
// of query heads into its kv head.
void kv_head_gradient(GraphBuilder& graph, const Sizes& z, const std::string& name,
                      const Descriptor& a, const Descriptor& b, const Descriptor& out) {
  if (z.hq == z.hk) {
    graph.matmul(name, a, b, out);
    return;
  }
  const auto& per_head = graph.virtual_tensor(name + " per query head", z.key_gradients(z.hq),
                                              z.key_gradients_strides(z.hq), CUDNN_DATA_BFLOAT16);
  graph.matmul(name, a, b, per_head);
  graph.reduction(name + " over the group", CUDNN_REDUCE_TENSOR_ADD, per_head, out);
}

// Backward: P recomputed from the statistics; dV = P^T dO, dP = dO V^T,
// dS = scale P o (dP - rowsum(dO o O)), dK = dS^T Q, dQ = dS K (into an fp32 accumulator,
// then bf16). Under GQA dK and dV come out per query head and are summed over each group.
void backward_graph(GraphBuilder& graph, const Sizes& z) {
  const auto bf16 = CUDNN_DATA_BFLOAT16;
  const auto fp32 = CUDNN_DATA_FLOAT;
  const auto& q = graph.tensor("Q", kQ, z.queries(), z.queries_strides(), bf16, Kind::kReal);
  const auto& k_t =
      graph.tensor("K", kK, z.transposed(), z.transposed_strides(), bf16, Kind::kReal);
  const auto& v_t =
      graph.tensor("V", kV, z.transposed(), z.transposed_strides(), bf16, Kind::kReal);
  const auto& o = graph.tensor("O", kO, z.queries(), z.queries_strides(), bf16, Kind::kReal);
  const auto& d_o = graph.tensor("dO", kDO, z.queries(), z.queries_strides(), bf16, Kind::kReal);
  const auto& stats =
      graph.tensor("stats", kStats, z.per_row(), z.per_row_strides(), fp32, Kind::kReal);
  const auto& d_q = graph.tensor("dQ", kDQ, z.queries(), z.queries_strides(), bf16, Kind::kReal);
  const auto& d_k = graph.tensor("dK", kDK, z.key_gradients(z.hk), z.key_gradients_strides(z.hk),
                                 bf16, Kind::kReal);
  const auto& d_v = graph.tensor("dV", kDV, z.key_gradients(z.hk), z.key_gradients_strides(z.hk),
                                 bf16, Kind::kReal);
  const auto& scale = graph.tensor("scale", kScale, kScalar, kScalar, fp32, Kind::kByValue);
  const auto& one = graph.tensor("one", kOne, kScalar, kScalar, fp32, Kind::kByValue);
  const auto& negative_infinity =
      graph.tensor("-inf", kNegativeInfinity, kScalar, kScalar, fp32, Kind::kByValue);
  const auto& softmax_sum =
      graph.tensor("softmax sum", kSoftmaxSum, z.per_row(), z.per_row_strides(), fp32, Kind::kReal);
  const auto& d_q_accumulator = graph.tensor("dQ accumulator", kDQAccumulator, z.queries(),
                                             z.queries_packed_strides(), fp32, Kind::kReal);

  // rowsum(dO o O): the softmax backward's per-row term (cuDNN's frontend lays the product
  // out with these strides).
  const auto& d_o_o = graph.virtual_tensor("dO o O", z.queries(),
                                           {z.hq * z.sq * z.d, z.sq * z.d, z.hq * z.d, 1}, fp32);
  const auto& row_dot =
      graph.virtual_tensor("rowsum dO o O", z.per_row(), z.per_row_strides(), fp32);
  graph.pointwise("dO o O", CUDNN_POINTWISE_MUL, d_o, &o, nullptr, d_o_o);
  graph.reduction("rowsum dO o O", CUDNN_REDUCE_TENSOR_ADD, d_o_o, row_dot);
  graph.pointwise("softmax sum", CUDNN_POINTWISE_MUL, row_dot, &one, nullptr, softmax_sum);

  // P = exp(scale Q K^T - stats), masked.
  const auto& s = graph.virtual_tensor("scores", z.scores(), z.scores_strides(), fp32);
  const auto& scaled = graph.virtual_tensor("scaled scores", z.scores(), z.scores_strides(), fp32);
  const auto& shifted = graph.virtual_tensor("shifted", z.scores(), z.scores_strides(), fp32);
  graph.matmul("Q K^T", q, k_t, s);
  graph.pointwise("scale", CUDNN_POINTWISE_MUL, s, &scale, nullptr, scaled);
  graph.pointwise("subtract stats", CUDNN_POINTWISE_SUB, scaled, &stats, nullptr, shifted);
  const auto& masked = causal_mask(graph, z, shifted, negative_infinity);
  const auto& p = graph.virtual_tensor("P", z.scores(), z.scores_strides(), fp32);
  graph.pointwise("exp", CUDNN_POINTWISE_EXP, masked, nullptr, nullptr, p);

  // dV = P^T dO (per query head, then summed over each group under GQA).
  const auto& p_t =
      graph.virtual_tensor("P^T", z.scores_transposed(), z.scores_transposed_strides(), bf16);
  graph.reshape("P^T", p, p_t);
  kv_head_gradient(graph, z, "P^T dO", p_t, d_o, d_v);

  // dS = scale P o (dO V^T - softmax sum).
  const auto& d_p = graph.virtual_tensor("dP", z.scores(), z.scores_strides(), fp32);
  const auto& centered = graph.virtual_tensor("dP - sum", z.scores(), z.scores_strides(), fp32);
  const auto& weighted =
      graph.virtual_tensor("P o (dP - sum)", z.scores(), z.scores_strides(), fp32);
  const auto& d_s = graph.virtual_tensor("dS", z.scores(), z.scores_strides(), fp32);
  graph.matmul("dO V^T", d_o, v_t, d_p);
  graph.pointwise("dP - sum", CUDNN_POINTWISE_SUB, d_p, &softmax_sum, nullptr, centered);
  graph.pointwise("P o (dP - sum)", CUDNN_POINTWISE_MUL, centered, &p, nullptr, weighted);
  graph.pointwise("dS", CUDNN_POINTWISE_MUL, weighted, &scale, nullptr, d_s);

  // dK = dS^T Q.
  const auto& d_s_t =
      graph.virtual_tensor("dS^T", z.scores_transposed(), z.scores_transposed_strides(), bf16);
  graph.reshape("dS^T", d_s, d_s_t);
  kv_head_gradient(graph, z, "dS^T Q", d_s_t, q, d_k);

  // dQ = dS K, K seen back through its own layout.
  const auto& k = graph.virtual_tensor("K", z.keys(), z.keys_strides(), bf16);
  graph.reshape("K", k_t, k);
  graph.matmul("dS K", d_s, k, d_q_accumulator);
  graph.pointwise("dQ", CUDNN_POINTWISE_IDENTITY, d_q_accumulator, nullptr, nullptr, d_q);
}

// ---- plans and runs

// One attention op's graph, built and finalized into an execution plan, and the scratch
// the plan needs: the backward's fp32 dQ accumulator and softmax sums (real tensors of the
// graph, in front of the plan's own workspace, each 256-byte aligned).
struct Plan {
  std::deque<Descriptor> parts;  // tensors, operations, graph, heuristics, configurations
  const Descriptor* plan = nullptr;
  const GraphStyle* style = nullptr;
  std::int64_t accumulator_bytes = 0;
  std::int64_t softmax_sum_bytes = 0;
  std::int64_t plan_workspace_bytes = 0;
  std::int64_t workspace_bytes() const {
    return accumulator_bytes + softmax_sum_bytes + plan_workspace_bytes;
  }
};

std::int64_t aligned(std::int64_t bytes) { return (bytes + 255) / 256 * 256; }

// Where each band's packed statistics start in the op's statistics buffer (bytes, each
// 256-byte aligned), and last the buffer's size.
std::vector<std::int64_t> stats_offsets(const AttentionShape& shape) {
  std::vector<std::int64_t> offsets = {0};
  for (const Band& band : bands_of(shape)) {
    offsets.push_back(offsets.back() + aligned(band.b * band.hq * band.s_q * 4));
  }
  return offsets;
}

// The graph's operations for `band`, built into `parts`.
std::vector<const Descriptor*> build_operations(const CudnnApi& api, const GraphStyle& style,
                                                const Band& band, bool backward,
                                                std::deque<Descriptor>& parts) {
  GraphBuilder graph(api, style, parts);
  const Sizes sizes(band);
  if (backward) {
    backward_graph(graph, sizes);
  } else {
    forward_graph(graph, sizes);
  }
  return graph.operations();
}

std::unique_ptr<Plan> build(const CudnnApi& api, cudnnHandle_t handle, const GraphStyle& style,
                            const Band& band, bool backward) {
  auto built = std::make_unique<Plan>();
  built->style = &style;
  const auto operations = build_operations(api, style, band, backward, built->parts);
  std::vector<cudnnBackendDescriptor_t> handles;
  for (const Descriptor* operation : operations) handles.push_back(operation->get());
  Descriptor& graph = built->parts.emplace_back(api, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR,
                                                "the operation graph");
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, handles);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE,
            std::vector<cudnnHandle_t>{handle});
  graph.finalize();
  built->plan = &build_plan(api, handle, graph, built->parts, &built->plan_workspace_bytes);
  if (backward) {
    built->accumulator_bytes = aligned(band.b * band.hq * band.s_q * band.d * 4);
    built->softmax_sum_bytes = aligned(band.b * band.hq * band.s_q * 4);
  }
  return built;
}

class CudnnSdpaImpl final : public CudnnSdpa {
 public:
  CudnnSdpaImpl(const CudnnApi& api, cudnnHandle_t handle, cudaStream_t stream,
                SdpaAccumulate accumulate)
      : api_(api), handle_(handle), stream_(stream), accumulate_(accumulate) {}
  ~CudnnSdpaImpl() override {
    plans_.clear();  // the descriptors before the handle they were built with
    api_.destroy(handle_);
  }
  CudnnSdpaImpl(const CudnnSdpaImpl&) = delete;
  CudnnSdpaImpl& operator=(const CudnnSdpaImpl&) = delete;

  std::string prepare(const AttentionShape& shape, bool backward) override {
    std::string why = sdpa_shape_unsupported(shape);
    if (why.empty() && backward && shape.context_parallel > 1 && accumulate_ == nullptr) {
      why = "context-parallel backward without a kernel to sum the chunks' key gradients";
    }
    // Before 9.6 cuDNN's bottom-right causal mask took lengths in multiples of 64 only (its
    // frontend refused others).
    if (why.empty() && shape.context_parallel > 1 && api_.get_version() < 90600 &&
        (shape.query_rows() / 2 % 64 != 0 || shape.seq % 64 != 0)) {
      why = "context-parallel chunks of " + std::to_string(shape.query_rows() / 2) + " rows over " +
            std::to_string(shape.seq) + " keys before cuDNN 9.6 (multiples of 64 only)";
    }
    if (why.empty()) why = version_refuses(shape, backward);
    if (!why.empty()) return why;
    for (const Band& band : bands_of(shape)) {
      if (why = prepare_band(band, backward); !why.empty()) return why;
    }
    return "";
  }

  // The releases whose kernels cuDNN's frontend refuses or works around for these graphs
  // (its sdpa support checks): bf16 attention on 9.10.0 and 9.10.1 ("known bugs"), and a
  // backward over a key count that is not a multiple of 128 up to 9.15.0, which the
  // frontend gives a padding mask of the full lengths (NaN gradients without one).
  std::string version_refuses(const AttentionShape& shape, bool backward) const {
    const std::size_t v = api_.get_version();
    if (v == 91000 || v == 91001) {
      return std::string(backward ? "the backward" : "the forward") + " on cuDNN " +
             std::to_string(v) + " (refused by cuDNN's frontend: known bugs)";
    }
    if (backward && v <= 91500) {
      for (const Band& band : bands_of(shape)) {
        if (band.s_kv % 128 != 0) {
          return "a backward over " + std::to_string(band.s_kv) + " keys on cuDNN " +
                 std::to_string(v) + " (multiples of 128 only before 9.15.1)";
        }
      }
    }
    return "";
  }

  std::int64_t stats_bytes(const AttentionShape& shape) const override {
    return stats_offsets(shape).back();
  }

  std::int64_t workspace_bytes(const AttentionShape& shape, bool backward) override {
    std::int64_t plan_bytes = 0;
    for (const Band& band : bands_of(shape)) {
      plan_bytes = std::max(plan_bytes, plan_of(band, backward).workspace_bytes());
    }
    return key_gradient_bytes(shape, backward) + plan_bytes;
  }

  // One graph per band; under context parallelism the first chunk's dK and dV (its keys
  // only) go to the front of the workspace and are then added into the op's, which the
  // last chunk's graph wrote for every key.
  void run(const AttentionShape& shape, bool backward, const SdpaTensors& tensors,
           void* workspace) override {
    const std::vector<Band> bands = bands_of(shape);
    const std::vector<std::int64_t> stats_at = stats_offsets(shape);
    const std::int64_t partial_bytes = key_gradient_bytes(shape, backward) / 2;
    auto* scratch = static_cast<char*>(workspace);
    void* partial_d_k = scratch;
    void* partial_d_v = scratch + partial_bytes;
    // The band with every key first, so that the partial sums add onto its gradients.
    for (std::size_t i = bands.size(); i-- > 0;) {
      const Band& band = bands[i];
      const std::int64_t first_row = static_cast<std::int64_t>(i) * band.s_q;
      auto rows = [&](const void* base, std::int64_t bytes_per_row) {
        return const_cast<char*>(static_cast<const char*>(base)) + first_row * bytes_per_row;
      };
      SdpaTensors slice = tensors;
      const std::int64_t row_bytes = band.d * 2;
      slice.q = rows(tensors.q, row_bytes);
      slice.o = rows(tensors.o, row_bytes);
      slice.stats = static_cast<char*>(tensors.stats) + stats_at[i];
      if (backward) {
        slice.d_o = rows(tensors.d_o, row_bytes);
        slice.d_q = rows(tensors.d_q, row_bytes);
        if (band.s_kv != band.kv_rows) {
          slice.d_k = partial_d_k;
          slice.d_v = partial_d_v;
        }
      }
      run_band(band, backward, slice, scratch + 2 * partial_bytes);
    }
    if (partial_bytes > 0) {
      const Band& first = bands.front();
      const std::int64_t heads = first.b * first.hk;
      for (auto [into, from] : {std::pair{tensors.d_k, partial_d_k}, {tensors.d_v, partial_d_v}}) {
        accumulate_(stream_, into, from, heads, first.s_kv * first.d, first.kv_rows * first.d,
                    first.s_kv * first.d);
      }
    }
  }

  // The band's graph on `tensors` (pointers already at its rows); `workspace` of its plan's
  // workspace_bytes().
  void run_band(const Band& band, bool backward, const SdpaTensors& tensors, void* workspace) {
    const Plan& plan = plan_of(band, backward);
    const float scale = 1.0f / std::sqrt(static_cast<float>(band.d));
    // The masked scores' value: -inf, or the lowest float before cuDNN 9.10 (its frontend's).
    const float negative_infinity = api_.get_version() >= 91000
                                        ? -std::numeric_limits<float>::infinity()
                                        : std::numeric_limits<float>::lowest();
    const float one = 1.0f;
    const auto s_q = static_cast<std::int32_t>(band.s_q);
    const auto s_kv = static_cast<std::int32_t>(band.s_kv);
    // The real tensors and the by-value scalars (host pointers, read when enqueued).
    std::vector<std::int64_t> uids = {kQ, kK, kV, kO, kStats, kScale, kNegativeInfinity};
    std::vector<void*> pointers = {const_cast<void*>(tensors.q),
                                   const_cast<void*>(tensors.k),
                                   const_cast<void*>(tensors.v),
                                   tensors.o,
                                   tensors.stats,
                                   const_cast<float*>(&scale),
                                   const_cast<float*>(&negative_infinity)};
    if (Sizes(band).bottom_right()) {
      uids.insert(uids.end(), {kSeqQ, kSeqKv});
      pointers.insert(pointers.end(),
                      {const_cast<std::int32_t*>(&s_q), const_cast<std::int32_t*>(&s_kv)});
    }
    auto* scratch = static_cast<char*>(workspace);
    if (backward) {
      void* accumulator = scratch;
      void* softmax_sum = scratch + plan.accumulator_bytes;
      // cuDNN before 9.6 expects the dQ accumulator zeroed (its frontend did it then).
      if (api_.get_version() < 90600) {
        check_cuda(cudaMemsetAsync(accumulator, 0, static_cast<std::size_t>(plan.accumulator_bytes),
                                   stream_),
                   "zeroing the dQ accumulator");
      }
      uids.insert(uids.end(), {kOne, kDO, kDQ, kDK, kDV, kSoftmaxSum, kDQAccumulator});
      pointers.insert(pointers.end(),
                      {const_cast<float*>(&one), const_cast<void*>(tensors.d_o), tensors.d_q,
                       tensors.d_k, tensors.d_v, softmax_sum, accumulator});
      scratch += plan.accumulator_bytes + plan.softmax_sum_bytes;
    }
    Descriptor pack(api_, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "the variant pack");
    pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids);
    pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, pointers);
    pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR,
             std::vector<void*>{plan.plan_workspace_bytes > 0 ? scratch : nullptr});
    pack.finalize();
    check(api_, api_.execute(handle_, plan.plan->get(), pack.get()),
          std::string("running the attention ") + (backward ? "backward" : "forward"));
  }

  std::string description() const override {
    const std::size_t v = api_.get_version();
    std::string text = "cuDNN " + std::to_string(v / 10000) + "." +
                       std::to_string(v % 10000 / 100) + "." + std::to_string(v % 100) +
                       " fused SDPA";
    for (const GraphStyle& style : kGraphStyles) {
      const auto built = std::count_if(plans_.begin(), plans_.end(), [&](const auto& entry) {
        return entry.second->style == &style;
      });
      if (&style != &kGraphStyles[0] && built > 0) {
        text += " (" + std::string(style.name) + " graph for " + std::to_string(built) + " of " +
                std::to_string(plans_.size()) + " plans)";
      }
    }
    return text;
  }

 private:
  using Key = std::pair<Band, bool>;
  // "" once the band has a plan, else why not (remembered: cuDNN is asked once).
  std::string prepare_band(const Band& band, bool backward) {
    const Key key{band, backward};
    if (plans_.count(key) != 0) return "";
    if (const auto refused = refusals_.find(key); refused != refusals_.end()) {
      return refused->second;
    }
    std::string why;
    for (const GraphStyle& style : kGraphStyles) {
      try {
        plans_[key] = build(api_, handle_, style, band, backward);
        return "";
      } catch (const Error& e) {
        why += (why.empty() ? "" : "; ") + std::string(style.name) + " graph: " + e.message();
      }
    }
    refusals_[key] = why;
    return why;
  }
  // The first chunk's dK and dV of a context-parallel backward, kept apart until summed.
  static std::int64_t key_gradient_bytes(const AttentionShape& shape, bool backward) {
    const std::vector<Band> bands = bands_of(shape);
    if (!backward || bands.size() == 1) return 0;
    const Band& first = bands.front();
    return 2 * aligned(first.b * first.hk * first.s_kv * first.d * 2);
  }
  const Plan& plan_of(const Band& band, bool backward) const {
    const auto found = plans_.find(Key{band, backward});
    if (found == plans_.end()) {
      throw_runtime("cudnn", "no plan prepared for this attention op",
                    "call prepare() first (a bug in the caller)");
    }
    return *found->second;
  }
  static void check_cuda(cudaError_t status, const std::string& what) {
    if (status != cudaSuccess) throw_runtime("cudnn", what + ": " + cudaGetErrorString(status));
  }

  const CudnnApi& api_;
  cudnnHandle_t handle_;
  cudaStream_t stream_;
  SdpaAccumulate accumulate_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  std::map<Key, std::string> refusals_;
};

}  // namespace

std::string cudnn_unavailable() {
  std::string why;
  return load_cudnn(&why) != nullptr ? "" : why;
}

std::unique_ptr<CudnnSdpa> make_cudnn_sdpa(void* stream, std::string* why,
                                           SdpaAccumulate accumulate) {
  const CudnnApi* api = load_cudnn(why);
  if (api == nullptr) return nullptr;
  cudnnHandle_t handle = nullptr;
  const cudnnStatus_t created = api->create(&handle);
  if (created != CUDNN_STATUS_SUCCESS) {
    if (why != nullptr) *why = std::string("cudnnCreate failed: ") + api->error_string(created);
    return nullptr;
  }
  const cudnnStatus_t bound = api->set_stream(handle, static_cast<cudaStream_t>(stream));
  if (bound != CUDNN_STATUS_SUCCESS) {
    if (why != nullptr) *why = std::string("cudnnSetStream failed: ") + api->error_string(bound);
    api->destroy(handle);
    return nullptr;
  }
  return std::make_unique<CudnnSdpaImpl>(*api, handle, static_cast<cudaStream_t>(stream),
                                         accumulate);
}

std::string sdpa_shape_unsupported(const AttentionShape& s) {
  if (s.batch <= 0 || s.heads <= 0 || s.kv_heads <= 0 || s.seq <= 0 || s.head_dim <= 0 ||
      s.heads % s.kv_heads != 0) {
    return "an invalid attention shape";
  }
  if (!s.causal) return "a non-causal attention (the graph's mask is causal)";
  if (s.context_parallel < 1 || (s.context_parallel > 1 && s.seq % (2 * s.context_parallel) != 0)) {
    return "context parallelism " + std::to_string(s.context_parallel) + " over " +
           std::to_string(s.seq) + " positions (not 2 x cp whole chunks)";
  }
  if (s.head_dim % 8 != 0 || s.head_dim > 256) {
    return "head_dim " + std::to_string(s.head_dim) + " (cuDNN: a multiple of 8, at most 256)";
  }
  if (s.seq < 2) return "a sequence of one position";
  return "";
}

int finalize_sdpa_operations(const AttentionShape& shape, bool backward) {
  const CudnnApi& api = cudnn_or_throw();
  if (const std::string why = sdpa_shape_unsupported(shape); !why.empty()) {
    throw_runtime("cudnn", "the graph does not express " + why);
  }
  int operations = 0;
  for (const GraphStyle& style : kGraphStyles) {
    operations = 0;
    for (const Band& band : bands_of(shape)) {
      std::deque<Descriptor> parts;
      operations += static_cast<int>(build_operations(api, style, band, backward, parts).size());
    }
  }
  return operations;
}

}  // namespace fsdptune

// The cuda backend: one CUDA stream per schedule stream and, per stream, NCCL communicators
// of the world and of the shard, replica and TP groups split from it (NCCL requires the
// same order of operations per communicator on every rank, which holds within a stream),
// CUDA events for dependencies and timing, cuBLAS kernels (cuda_kernels.cu),
// and the schedule's memory events as cudaMallocAsync / cudaFreeAsync on the device's
// default pool, whose used-memory high-water mark is the measured peak.
#include <mpi.h>
#include <nccl.h>

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <cublas_v2.h>

#include "cuda_check.hpp"
#include "fsdptune/backend.hpp"
#include "fsdptune/data_check.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/kernels.hpp"
#include "fsdptune/units.hpp"

namespace fsdptune {
namespace {

void check_nccl(ncclResult_t status, const char* call, const char* file, int line) {
  if (status != ncclSuccess) {
    throw_runtime(std::string(file) + ":" + std::to_string(line),
                  std::string(call) + " failed: " + ncclGetErrorString(status));
  }
}
#define FSDPTUNE_NCCL_CHECK(call) check_nccl((call), #call, __FILE__, __LINE__)

constexpr int kThreads = 256;

int grid_for(std::int64_t n) {
  return static_cast<int>(std::clamp<std::int64_t>((n + kThreads - 1) / kThreads, 1, 65535));
}

// Wire dtypes as kernel arguments.
enum Wire : int { kWireFP32 = 0, kWireBF16 = 1, kWireFP8 = 2 };
Wire wire_of(DType dtype) {
  if (dtype == DType::kFP32) return kWireFP32;
  return dtype == DType::kFP8 ? kWireFP8 : kWireBF16;
}

// The data patterns' formulas and the element access at any byte offset are
// data_pattern_formulas.hpp's, the code the host tests check (namespace formula below).
namespace formula = data_pattern::formula;

// fp8 is e4m3 ("e4m3fn"), rounding to nearest even and saturating at +-448 like
// data_pattern::to_fp8_e4m3.
__device__ void store(void* data, int wire, std::int64_t i, float value) {
  if (wire == kWireFP32) {
    formula::put_element_bits<std::uint32_t>(data, i, __float_as_uint(value));
  } else if (wire == kWireFP8) {
    static_cast<__nv_fp8_e4m3*>(data)[i] = __nv_fp8_e4m3(value);
  } else {
    formula::put_element_bits<std::uint16_t>(data, i,
                                             __bfloat16_as_ushort(__float2bfloat16(value)));
  }
}

__device__ float load(const void* data, int wire, std::int64_t i) {
  if (wire == kWireFP32) return __uint_as_float(formula::get_element_bits<std::uint32_t>(data, i));
  if (wire == kWireFP8) return static_cast<float>(static_cast<const __nv_fp8_e4m3*>(data)[i]);
  return __bfloat162float(__ushort_as_bfloat16(formula::get_element_bits<std::uint16_t>(data, i)));
}

#define GRID_STRIDE(i, n)                                                                          \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

// One fp32 shard of a parameter: element j = full element shard * shard_numel + j.
__global__ void init_shard_kernel(float* shard_data, std::uint32_t salt, int wire, int shard,
                                  std::int64_t shard_numel, std::int64_t numel) {
  GRID_STRIDE(j, shard_numel) {
    shard_data[j] = formula::shard_value(salt, wire == kWireFP8, shard, shard_numel, numel, j);
  }
}

__global__ void cast_kernel(const float* source, void* destination, int wire, std::int64_t n) {
  GRID_STRIDE(j, n) { store(destination, wire, j, source[j]); }
}

// This rank's unsharded gradient of one parameter into the reduce-scatter send buffer:
// shard v's part at v * shard_bytes + byte_offset.
__global__ void gradient_kernel(char* send, int wire, int rank, int amplitude, int shards,
                                std::uint32_t salt, std::int64_t shard_bytes,
                                std::int64_t byte_offset, std::int64_t shard_numel,
                                std::int64_t numel) {
  GRID_STRIDE(i, shard_numel * shards) {
    const std::int64_t v = i / shard_numel;
    const std::int64_t j = i % shard_numel;
    store(send + v * shard_bytes + byte_offset, wire, j,
          formula::padded_gradient_value(rank, salt, i, numel, amplitude));
  }
}

__global__ void accumulate_kernel(float* gradient, const void* received, int wire, std::int64_t n) {
  GRID_STRIDE(j, n) { gradient[j] += load(received, wire, j); }
}

// Pipelines: .grad += this microbatch's gradient, in the reduce dtype (Backend::
// accumulate_gradients).
__global__ void add_kernel(void* sum, const void* addend, int wire, std::int64_t n) {
  GRID_STRIDE(j, n) { store(sum, wire, j, load(sum, wire, j) + load(addend, wire, j)); }
}

// A pipeline message's contents: data_pattern::message_value, same formula.
__global__ void message_kernel(void* data, int wire, int tag, int sender, std::int64_t n) {
  GRID_STRIDE(i, n) { store(data, wire, i, formula::message_value(tag, sender, i)); }
}

// --check-data of the TP collectives: data_pattern::tp_input and tp_expected, the shared
// formulas.
__global__ void tp_fill_kernel(void* input, int wire, int tp_rank, int amplitude, std::int64_t n) {
  GRID_STRIDE(i, n) { store(input, wire, i, formula::tp_input(tp_rank, i, amplitude)); }
}

// A stream's first mismatch of the check period: key = sequence << 40 | element, the
// smallest wins (atomicMin); `actual` is written by tp_record_kernel of the collective
// that holds the key. One per stream: a stream runs its collectives in sequence order, so
// a later one never lowers the key and the record kernel after each check kernel is not
// raced. The host takes the smallest key over the streams: the first in enqueue order,
// as on the cpu backend.
struct TpMismatch {
  unsigned long long key;
  float actual;
};
constexpr int kElementBits = 40;

__global__ void tp_check_kernel(const void* output, int wire, formula::TpKind kind, int ranks,
                                std::int64_t part, int amplitude, int tp_rank, std::int64_t n,
                                int sequence, TpMismatch* mismatch) {
  GRID_STRIDE(i, n) {
    if (load(output, wire, i) != formula::tp_expected(kind, ranks, part, amplitude, tp_rank, i)) {
      atomicMin(&mismatch->key, static_cast<unsigned long long>(sequence) << kElementBits |
                                    static_cast<unsigned long long>(i));
    }
  }
}

// After tp_check_kernel on the same stream.
__global__ void tp_record_kernel(const void* output, int wire, int sequence, TpMismatch* mismatch) {
  const unsigned long long key = mismatch->key;
  if (key != ~0ull && static_cast<int>(key >> kElementBits) == sequence) {
    mismatch->actual =
        load(output, wire, static_cast<std::int64_t>(key & ((1ull << kElementBits) - 1)));
  }
}

// Test hook (DataCheck::corrupt_tp_collective): no tp_expected value.
__global__ void corrupt_kernel(void* output, int wire) { store(output, wire, 0, 1000.0f); }

// One stream's NCCL communicators: the world (bootstrapped from an MPI-broadcast unique
// id) and the groups split from it.
struct StreamComms {
  ncclComm_t world = nullptr;
  ncclComm_t shard = nullptr;
  ncclComm_t replica = nullptr;
  ncclComm_t tp = nullptr;
  ncclComm_t cp = nullptr;
};

struct BucketBuffers {
  // Reduce-scatter only: an all-gather runs in place, as FSDP2's does (its copy-in writes
  // this rank's shards into the receive buffer, at gather_part()).
  void* send = nullptr;
  void* receive = nullptr;
  void* unsharded = nullptr;
  // Reduce-scatter only: this rank's unsharded gradients in the bucket layout, made once
  // (the data pattern), so that the copy-in is a copy as FSDP's is.
  void* gradients = nullptr;
  // Reduce-scatter over accumulated microbatches: their sum so far, what the copy-in reads.
  void* accumulated = nullptr;
  std::int64_t send_bytes = 0;  // this rank's part (all-gather), the whole buffer (reduce-scatter)
  std::int64_t receive_bytes = 0;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int local_rank, AttentionKernel attention) : attention_(attention) {
    int count = 0;
    const bool visible = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
    // A launcher that binds each rank its own GPU (srun --gpus-per-task=1, or
    // CUDA_VISIBLE_DEVICES set per rank) shows each rank one device, its own; otherwise the
    // rank takes the device of its index on the node (found by review: ranks 1 and up of a
    // bound node stopped, one device visible each).
    const int device = cuda_device_of_rank(local_rank, count);
    // Every rank of the node says which GPU it would take before any stops: NCCL refuses two
    // ranks of a communicator on one device ("Duplicate GPU detected", an error only after
    // every rank entered ncclCommInitRank), so ranks that share one stop here, on every rank
    // of the node, with what to do.
    GpuClaim mine;
    cudaError_t properties_status = cudaSuccess;
    if (visible) {
      cudaDeviceProp properties{};
      properties_status = cudaGetDeviceProperties(&properties, device);
      if (properties_status == cudaSuccess) {
        mine.usable = 1;
        std::memcpy(mine.uuid, properties.uuid.bytes, sizeof mine.uuid);
      }
    }
    MPI_Comm node = MPI_COMM_NULL;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    int node_ranks = 1;
    MPI_Comm_size(node, &node_ranks);
    std::vector<GpuClaim> claims(static_cast<std::size_t>(node_ranks));
    MPI_Allgather(&mine, sizeof mine, MPI_BYTE, claims.data(), sizeof mine, MPI_BYTE, node);
    MPI_Comm_free(&node);
    if (!visible) throw_runtime("--backend cuda", "no CUDA device is visible to this process");
    // Its own failure said (found by review: the rank went on unchecked).
    FSDPTUNE_CUDA_CHECK(properties_status);
    if (const auto shared = ranks_sharing_a_gpu(claims)) {
      const std::string taken = "rank " + std::to_string(shared->first) + " of its node takes";
      throw_runtime(
          "--backend cuda",
          "rank " + std::to_string(shared->second) + " of its node needs its own GPU, but " +
              (count == 1 ? "only 1 CUDA device visible, the one " + taken
                          : "of the " + counted(count, "CUDA device") +
                                " it sees, the one of its node index is the GPU " + taken),
          "start at most one rank per GPU (mpirun -np), bind each rank its own GPUs (srun "
          "--gpus-per-task=1) or unset a CUDA_VISIBLE_DEVICES every rank shares; or replay a "
          "scaled-down schedule on fewer ranks (--scale-down)");
    }
    device_ = device;
    FSDPTUNE_CUDA_CHECK(cudaSetDevice(device_));
    FSDPTUNE_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool_, device_));
    // Keep freed memory in the pool (as PyTorch's caching allocator does) so allocation
    // timing is not dominated by returning memory to the driver.
    std::uint64_t keep = UINT64_MAX;
    FSDPTUNE_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep));
    int max_pitch = 0;
    FSDPTUNE_CUDA_CHECK(cudaDeviceGetAttribute(&max_pitch, cudaDevAttrMaxPitch, device_));
    max_pitch_bytes_ = max_pitch;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  }

  ~CudaBackend() override {
    cudaSetDevice(device_);
    cudaDeviceSynchronize();
    kernels_.clear();
    // In the order of their creation, the same on every rank (by its role -- this rank's
    // sends first -- two stages destroyed their channels in different orders, and a destroy
    // waits for the communicator's other rank; found by review).
    for (ncclComm_t comm : pipeline_comms_) ncclCommDestroy(comm);
    for (StreamComms& comms : comms_) {
      for (ncclComm_t comm : {comms.shard, comms.replica, comms.tp, comms.cp, comms.world}) {
        if (comm != nullptr) ncclCommDestroy(comm);
      }
    }
    for (void* message : messages_) cudaFree(message);
    for (void* scratch : tp_scratch_) {
      if (scratch != nullptr) cudaFree(scratch);
    }
    if (scratch_pool_ != nullptr) cudaMemPoolDestroy(scratch_pool_);
    if (tp_mismatch_ != nullptr) cudaFree(tp_mismatch_);
    if (separate_storage_ != nullptr) cudaFree(separate_storage_);
    for (BucketBuffers& buffers : buckets_) {
      cudaFree(buffers.send);
      cudaFree(buffers.receive);
      cudaFree(buffers.unsharded);
      cudaFree(buffers.gradients);
      cudaFree(buffers.accumulated);
    }
    for (void* block : blocks_) {
      if (block != nullptr) cudaFree(block);
    }
    if (persistent_ != nullptr) cudaFree(persistent_);
    for (cudaEvent_t event : events_) cudaEventDestroy(event);
    for (cudaStream_t stream : streams_) cudaStreamDestroy(stream);
    for (cudaEvent_t event : side_ready_) cudaEventDestroy(event);
    for (cudaEvent_t event : side_done_) cudaEventDestroy(event);
    for (cudaStream_t stream : side_streams_) cudaStreamDestroy(stream);
  }

  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return "cuda"; }

  std::map<std::string, std::string> environment() const override {
    cudaDeviceProp properties{};
    cudaGetDeviceProperties(&properties, device_);
    int driver = 0, runtime = 0, nccl = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    ncclGetVersion(&nccl);
    std::map<std::string, std::string> environment{
        {"device", "cuda:" + std::to_string(device_) + " " + properties.name},
        {"device_memory_bytes", std::to_string(properties.totalGlobalMem)},
        {"cuda_driver", std::to_string(driver)},
        {"cuda_runtime", std::to_string(runtime)},
        {"nccl", std::to_string(nccl)}};
    // What the attention tasks ran (the compute stream's kernels run them all).
    for (const auto& kernels : kernels_) {
      if (!kernels->attention().empty()) environment["attention"] = kernels->attention();
    }
    return environment;
  }

  // Each stream, communicator and bucket set up counts as progress: the watchdog watches the
  // set-up too, and --timeout must exceed the longest of its steps (NCCL's communicator
  // initialisation, the kernels' handles).
  void prepare(const ReplayLayout& layout) override {
    layout_ = layout;
    const ReplayMesh& mesh = layout.mesh;
    FSDPTUNE_CUDA_CHECK(cudaSetDevice(device_));
    tp_scratch_.assign(layout.streams.size(), nullptr);
    tp_scratch_bytes_.assign(layout.streams.size(), 0);
    // The TP/CP collectives' scratch (tp_collective), apart from the measured default pool.
    cudaMemPoolProps scratch_pool{};
    scratch_pool.allocType = cudaMemAllocationTypePinned;
    scratch_pool.location.type = cudaMemLocationTypeDevice;
    scratch_pool.location.id = device_;
    FSDPTUNE_CUDA_CHECK(cudaMemPoolCreate(&scratch_pool_, &scratch_pool));
    // A stream's scratch reuses another stream's freed memory only once that stream passed
    // the free by the schedule's own order: no dependency between streams the schedule does
    // not have (which could wait on a peer rank through NCCL; found by review).
    int no = 0;
    FSDPTUNE_CUDA_CHECK(
        cudaMemPoolSetAttribute(scratch_pool_, cudaMemPoolReuseAllowInternalDependencies, &no));
    const std::size_t mismatch_bytes = sizeof(TpMismatch) * layout.streams.size();
    FSDPTUNE_CUDA_CHECK(cudaMalloc(&tp_mismatch_, mismatch_bytes));
    FSDPTUNE_CUDA_CHECK(cudaMemset(tp_mismatch_, 0xFF, mismatch_bytes));
    FSDPTUNE_CUDA_CHECK(cudaDeviceSynchronize());
    for (std::size_t s = 0; s < layout.streams.size(); ++s) {
      cudaStream_t stream = nullptr;
      FSDPTUNE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      streams_.push_back(stream);
      // The side stream a compute task's started collective runs on (run_ops), and the
      // events that order it after the stream and the stream after it.
      cudaStream_t side = nullptr;
      FSDPTUNE_CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
      side_streams_.push_back(side);
      for (std::vector<cudaEvent_t>* events : {&side_ready_, &side_done_}) {
        cudaEvent_t event = nullptr;
        FSDPTUNE_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
        events->push_back(event);
      }
      KernelOptions options;
      options.device = device_;
      options.stream = stream;
      options.attention = attention_;
      kernels_.push_back(make_cuda_kernels(options));
      ++progress_;
      // The stream's world communicator, its unique id from rank 0 over MPI; the groups
      // split from it (every rank splits in the same order; key orders by coordinate).
      ncclUniqueId id{};
      if (layout.rank == 0) FSDPTUNE_NCCL_CHECK(ncclGetUniqueId(&id));
      MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
      StreamComms comms;
      FSDPTUNE_NCCL_CHECK(ncclCommInitRank(&comms.world, layout.world_size, id, layout.rank));
      // The groups (ReplayMesh::*_split); a split's world communicator is per stream.
      const auto split = [&](ReplayMesh::GroupSplit group, ncclComm_t* out) {
        FSDPTUNE_NCCL_CHECK(ncclCommSplit(comms.world, group.color, group.key, out, nullptr));
      };
      split(mesh.shard_split(), &comms.shard);
      split(mesh.replica_split(), &comms.replica);
      split(mesh.tp_split(), &comms.tp);
      split(mesh.cp_split(), &comms.cp);
      comms_.push_back(comms);
      ++progress_;
    }
    if (mesh.pp > 1) {
      // Pipeline messages: one 2-rank communicator per sending stage and kind (activations
      // to the next stage -- the last one's to stage 0 when interleaved --, gradients to the
      // previous), the sender rank 0 in it, the rank at the same place of the other stage
      // rank 1. A rank sends on two of them and receives on two others, each from one
      // stream (layout.send_stream / receive_stream), so every communicator is a FIFO
      // channel whose two ends issue its messages in the same order (plan_pipeline_replay).
      for (int gradient = 0; gradient < 2; ++gradient) {
        for (int from = 0; from < mesh.pp; ++from) {
          const int to = gradient == 1 ? (from + mesh.pp - 1) % mesh.pp : (from + 1) % mesh.pp;
          const bool sends = mesh.stage == from;
          const bool receives = mesh.stage == to;
          ncclComm_t comm = nullptr;
          FSDPTUNE_NCCL_CHECK(ncclCommSplit(
              comms_.front().world, sends || receives ? mesh.rank_in_stage() : NCCL_SPLIT_NOCOLOR,
              sends ? 0 : 1, &comm, nullptr));
          if (sends) pipeline_send_[gradient] = comm;
          if (receives) pipeline_receive_[gradient] = comm;
          if (comm != nullptr) pipeline_comms_.push_back(comm);
          ++progress_;
        }
      }
    }
    cudaStream_t first = streams_.front();
    // Nothing to allocate for an empty persistent state (a zero-byte cudaMallocAsync is not
    // documented to succeed).
    if (layout.persistent_bytes > 0) {
      FSDPTUNE_CUDA_CHECK(cudaMallocAsync(
          &persistent_, static_cast<std::size_t>(layout.persistent_bytes), pool_, first));
      FSDPTUNE_CUDA_CHECK(cudaMemsetAsync(
          persistent_, 0, static_cast<std::size_t>(layout.persistent_bytes), first));
    }
    // fp32 parameter shards, then gradient shards: at the start of the persistent state
    // when they fit, else (scaled down: several shards per rank) outside the pool.
    const std::int64_t storage_bytes = 2 * 4 * layout.shard_storage_elements;
    if (storage_bytes <= layout.persistent_bytes) {
      storage_ = static_cast<float*>(persistent_);
    } else {
      FSDPTUNE_CUDA_CHECK(cudaMalloc(&separate_storage_, static_cast<std::size_t>(storage_bytes)));
      FSDPTUNE_CUDA_CHECK(
          cudaMemsetAsync(separate_storage_, 0, static_cast<std::size_t>(storage_bytes), first));
      storage_ = static_cast<float*>(separate_storage_);
      staging_bytes_ += storage_bytes;
    }
    const int k = mesh.shards_per_rank;
    for (const ReplayBucket& bucket : layout.buckets) {
      if (bucket.kind != CollectiveKind::kAllGather) continue;
      for (const ReplaySlot& slot : bucket.slots) {
        const std::int64_t n = slot.slot.shard_numel;
        for (int v = 0; v < k; ++v) {
          init_shard_kernel<<<grid_for(n), kThreads, 0, first>>>(
              storage_ + slot.storage_offset + v * n, slot.salt, wire_of(slot.wire),
              mesh.first_virtual_shard() + v, n, slot.slot.numel);
        }
      }
      FSDPTUNE_CUDA_CHECK(cudaGetLastError());
    }
    for (const ReplayBucket& bucket : layout.buckets) {
      const std::int64_t own = bucket.shard_bytes * k;
      const std::int64_t all = bucket.shard_bytes * mesh.schedule_dp_shard();
      BucketBuffers buffers;
      const bool gather = bucket.kind == CollectiveKind::kAllGather;
      buffers.send_bytes = gather ? own : all;
      buffers.receive_bytes = gather ? all : own;
      // Staging: plain cudaMalloc, outside the pool whose high-water mark is the peak.
      FSDPTUNE_CUDA_CHECK(
          cudaMalloc(&buffers.receive, static_cast<std::size_t>(buffers.receive_bytes)));
      staging_bytes_ += buffers.receive_bytes;
      if (gather) {
        FSDPTUNE_CUDA_CHECK(
            cudaMalloc(&buffers.unsharded, static_cast<std::size_t>(buffers.receive_bytes)));
        staging_bytes_ += buffers.receive_bytes;
      } else {
        FSDPTUNE_CUDA_CHECK(
            cudaMalloc(&buffers.send, static_cast<std::size_t>(buffers.send_bytes)));
        staging_bytes_ += buffers.send_bytes;
        FSDPTUNE_CUDA_CHECK(
            cudaMalloc(&buffers.gradients, static_cast<std::size_t>(buffers.send_bytes)));
        staging_bytes_ += buffers.send_bytes;
        if (bucket.gradient_microbatches > 1) {
          FSDPTUNE_CUDA_CHECK(
              cudaMalloc(&buffers.accumulated, static_cast<std::size_t>(buffers.send_bytes)));
          staging_bytes_ += buffers.send_bytes;
        }
        const int shards = mesh.schedule_dp_shard();
        for (const ReplaySlot& slot : bucket.slots) {
          const std::int64_t n = slot.slot.shard_numel;
          gradient_kernel<<<grid_for(n * shards), kThreads, 0, first>>>(
              static_cast<char*>(buffers.gradients), wire_of(slot.wire), mesh.data_parallel_rank(),
              bucket.gradient_amplitude, shards, slot.salt, bucket.shard_bytes, slot.byte_offset, n,
              slot.slot.numel);
        }
        FSDPTUNE_CUDA_CHECK(cudaGetLastError());
      }
      buckets_.push_back(buffers);
      ++progress_;
    }
    for (const ReplayMessage& message : layout.messages) {
      // A send carries the sender's deterministic contents, written once.
      void* data = nullptr;
      FSDPTUNE_CUDA_CHECK(cudaMalloc(&data, static_cast<std::size_t>(message.bytes)));
      FSDPTUNE_CUDA_CHECK(cudaMemsetAsync(data, 0, static_cast<std::size_t>(message.bytes), first));
      const std::int64_t n = message.bytes / bytes_per_element(message.dtype);
      if (message.outgoing) {
        message_kernel<<<grid_for(n), kThreads, 0, first>>>(data, wire_of(message.dtype),
                                                            message.tag, message.sender, n);
        FSDPTUNE_CUDA_CHECK(cudaGetLastError());
      }
      staging_bytes_ += message.bytes;
      messages_.push_back(data);
    }
    FSDPTUNE_CUDA_CHECK(cudaStreamSynchronize(first));
  }

  void accumulate_gradients(int stream, int bucket, bool first) override {
    const ReplayBucket& layout = layout_.buckets[static_cast<std::size_t>(bucket)];
    const BucketBuffers& buffers = buckets_[static_cast<std::size_t>(bucket)];
    FSDPTUNE_CHECK(layout.kind == CollectiveKind::kReduceScatter && buffers.accumulated != nullptr,
                   "accumulate_gradients of a bucket that does not accumulate");
    cudaStream_t s = cuda_stream(stream);
    if (first) {
      FSDPTUNE_CUDA_CHECK(cudaMemcpyAsync(buffers.accumulated, buffers.gradients,
                                          static_cast<std::size_t>(buffers.send_bytes),
                                          cudaMemcpyDeviceToDevice, s));
      return;
    }
    const std::int64_t n = buffers.send_bytes / bytes_per_element(layout.dtype);
    add_kernel<<<grid_for(n), kThreads, 0, s>>>(buffers.accumulated, buffers.gradients,
                                                wire_of(layout.dtype), n);
    FSDPTUNE_CUDA_CHECK(cudaGetLastError());
  }

  // ncclSend / ncclRecv on the message's channel (prepare()). The send occupies its stream
  // until the peer's receive is posted; the receive streams depend on nothing but the step
  // start, so that always happens (docs/validation.md "Pipelines").
  void send(int stream, int message) override {
    const ReplayMessage& what = layout_.messages.at(static_cast<std::size_t>(message));
    FSDPTUNE_NCCL_CHECK(ncclSend(messages_[static_cast<std::size_t>(message)],
                                 static_cast<std::size_t>(what.bytes), ncclUint8, 1,
                                 pipeline_send_[what.gradient ? 1 : 0], cuda_stream(stream)));
  }

  void receive(int stream, int message) override {
    const ReplayMessage& what = layout_.messages.at(static_cast<std::size_t>(message));
    FSDPTUNE_NCCL_CHECK(ncclRecv(messages_[static_cast<std::size_t>(message)],
                                 static_cast<std::size_t>(what.bytes), ncclUint8, 0,
                                 pipeline_receive_[what.gradient ? 1 : 0], cuda_stream(stream)));
  }

  // Stream-ordered: a send is complete when its stream is, which synchronize() awaits.
  void complete_sends(int /*stream*/) override {}

  std::vector<std::byte> read_message(int message) override {
    const ReplayMessage& what = layout_.messages.at(static_cast<std::size_t>(message));
    std::vector<std::byte> host(static_cast<std::size_t>(what.bytes));
    FSDPTUNE_CUDA_CHECK(cudaMemcpy(host.data(), messages_[static_cast<std::size_t>(message)],
                                   host.size(), cudaMemcpyDeviceToHost));
    return host;
  }

  void overwrite_message(int message, std::int64_t byte_offset,
                         const std::vector<std::byte>& bytes) override {
    const ReplayMessage& what = layout_.messages.at(static_cast<std::size_t>(message));
    FSDPTUNE_CHECK(
        byte_offset >= 0 && byte_offset + static_cast<std::int64_t>(bytes.size()) <= what.bytes,
        "overwrite_message outside the buffer");
    FSDPTUNE_CUDA_CHECK(
        cudaMemcpy(static_cast<char*>(messages_[static_cast<std::size_t>(message)]) + byte_offset,
                   bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
  }

  void run_ops(int stream, const std::vector<Op>& ops, const std::vector<OpStep>& steps,
               const std::string& task) override {
    OpKernels& kernels = *kernels_.at(static_cast<std::size_t>(stream));
    if (steps.empty() || check_.tp_collectives) {
      for (const Op& op : ops) {
        if (op.kind == OpKind::kCollective) {
          tp_collective(stream, cuda_stream(stream), op, task);
        } else {
          kernels.run(op);
        }
      }
      // The checked step (untimed) also runs each part shape of the timed steps once, so
      // that cuDNN's plans and cuBLAS's heuristics for them are made before a timed step
      // (--check-data --warmup 0).
      std::vector<std::size_t> warmed;
      for (const OpStep& step : steps) {
        if (step.kind != OpStep::Kind::kRun || step.parts == 1 ||
            ops[step.op].kind == OpKind::kCollective ||
            std::find(warmed.begin(), warmed.end(), step.op) != warmed.end()) {
          continue;
        }
        warmed.push_back(step.op);
        if (const std::optional<Op> part = op_part(ops[step.op], step.parts)) kernels.run(*part);
      }
      return;
    }
    // A started collective runs on the stream's side stream after what the stream has
    // enqueued so far; kWait makes the stream wait for it (events).
    const auto s = static_cast<std::size_t>(stream);
    bool pending = false;
    for (const OpStep& step : steps) {
      if (step.kind == OpStep::Kind::kWait) {
        FSDPTUNE_CHECK(pending, "op steps wait for no collective");
        FSDPTUNE_CUDA_CHECK(cudaEventRecord(side_done_[s], side_streams_[s]));
        FSDPTUNE_CUDA_CHECK(cudaStreamWaitEvent(cuda_stream(stream), side_done_[s], 0));
        pending = false;
        continue;
      }
      const std::optional<Op> part = op_part(ops[step.op], step.parts);
      FSDPTUNE_CHECK(part.has_value(), "op steps run an op that does not split");
      if (step.kind == OpStep::Kind::kRun) {
        if (part->kind == OpKind::kCollective) {
          // One collective at a time on the stream's communicators and scratch.
          FSDPTUNE_CHECK(!pending, "op steps run a collective beside another");
          tp_collective(stream, cuda_stream(stream), *part, task);
        } else {
          kernels.run(*part);
        }
        continue;
      }
      FSDPTUNE_CHECK(!pending, "op steps start a second collective in flight");
      FSDPTUNE_CUDA_CHECK(cudaEventRecord(side_ready_[s], cuda_stream(stream)));
      FSDPTUNE_CUDA_CHECK(cudaStreamWaitEvent(side_streams_[s], side_ready_[s], 0));
      tp_collective(stream, side_streams_[s], *part, task);
      pending = true;
    }
    FSDPTUNE_CHECK(!pending, "op steps end with a collective in flight");
  }

  // This rank's shards of an all-gather bucket inside its gathered buffer.
  char* gather_part(const ReplayBucket& layout, const BucketBuffers& buffers) const {
    return static_cast<char*>(buffers.receive) +
           layout_.mesh.first_virtual_shard() * layout.shard_bytes;
  }

  void copy_in(int stream, int bucket) override {
    const ReplayBucket& layout = layout_.buckets[static_cast<std::size_t>(bucket)];
    const BucketBuffers& buffers = buckets_[static_cast<std::size_t>(bucket)];
    cudaStream_t s = cuda_stream(stream);
    if (layout.kind == CollectiveKind::kReduceScatter) {
      // The gradients (summed over the microbatches when they accumulate), already in the
      // bucket layout and wire dtype.
      const void* gradients =
          buffers.accumulated != nullptr ? buffers.accumulated : buffers.gradients;
      FSDPTUNE_CUDA_CHECK(cudaMemcpyAsync(buffers.send, gradients,
                                          static_cast<std::size_t>(buffers.send_bytes),
                                          cudaMemcpyDeviceToDevice, s));
      return;
    }
    char* send = gather_part(layout, buffers);
    for (const ReplaySlot& slot : layout.slots) {
      const std::int64_t n = slot.slot.shard_numel;
      for (int v = 0; v < layout_.mesh.shards_per_rank; ++v) {
        cast_kernel<<<grid_for(n), kThreads, 0, s>>>(
            storage_ + slot.storage_offset + v * n,
            send + v * layout.shard_bytes + slot.byte_offset, wire_of(slot.wire), n);
      }
    }
    FSDPTUNE_CUDA_CHECK(cudaGetLastError());
  }

  void collective(int stream, int bucket) override {
    const ReplayBucket& layout = layout_.buckets[static_cast<std::size_t>(bucket)];
    const BucketBuffers& buffers = buckets_[static_cast<std::size_t>(bucket)];
    ncclComm_t comm = comms_[static_cast<std::size_t>(stream)].shard;
    if (layout.kind == CollectiveKind::kAllGather) {
      // Bytes: a float8 bucket mixes fp8 linears with bf16 norms. In place: copy_in wrote
      // this rank's part at its rank's offset (shard ranks are ordered by shard).
      FSDPTUNE_NCCL_CHECK(ncclAllGather(gather_part(layout, buffers), buffers.receive,
                                        static_cast<std::size_t>(buffers.send_bytes), ncclUint8,
                                        comm, cuda_stream(stream)));
    } else {
      // Each rank receives its shards_per_rank consecutive shards.
      const auto count =
          static_cast<std::size_t>(layout.shard_elements * layout_.mesh.shards_per_rank);
      FSDPTUNE_NCCL_CHECK(ncclReduceScatter(buffers.send, buffers.receive, count,
                                            nccl_type(layout.dtype), ncclSum, comm,
                                            cuda_stream(stream)));
    }
  }

  void all_reduce(int stream, int bucket) override {
    const ReplayBucket& layout = layout_.buckets[static_cast<std::size_t>(bucket)];
    const BucketBuffers& buffers = buckets_[static_cast<std::size_t>(bucket)];
    const auto count =
        static_cast<std::size_t>(layout.shard_elements * layout_.mesh.shards_per_rank);
    FSDPTUNE_NCCL_CHECK(
        ncclAllReduce(buffers.receive, buffers.receive, count, nccl_type(layout.dtype), ncclSum,
                      comms_[static_cast<std::size_t>(stream)].replica, cuda_stream(stream)));
  }

  void copy_out(int stream, int bucket) override {
    const ReplayBucket& layout = layout_.buckets[static_cast<std::size_t>(bucket)];
    const BucketBuffers& buffers = buckets_[static_cast<std::size_t>(bucket)];
    const ReplayMesh& mesh = layout_.mesh;
    const std::int64_t shards = mesh.schedule_dp_shard();
    cudaStream_t s = cuda_stream(stream);
    for (const ReplaySlot& slot : layout.slots) {
      const std::int64_t n = slot.slot.shard_numel;
      const std::int64_t size = bytes_per_element(slot.wire);
      if (layout.kind == CollectiveKind::kAllGather) {
        // Shard v's piece (at v * shard_bytes + byte_offset) -> v * shard_numel of the full
        // tensor at shards * byte_offset.
        char* destination = static_cast<char*>(buffers.unsharded) + shards * slot.byte_offset;
        const char* source = static_cast<const char*>(buffers.receive) + slot.byte_offset;
        if (layout.shard_bytes <= max_pitch_bytes_) {
          FSDPTUNE_CUDA_CHECK(cudaMemcpy2DAsync(
              destination, static_cast<std::size_t>(n * size), source,
              static_cast<std::size_t>(layout.shard_bytes), static_cast<std::size_t>(n * size),
              static_cast<std::size_t>(shards), cudaMemcpyDeviceToDevice, s));
        } else {
          // cudaMemcpy2DAsync refuses a pitch above cudaDevAttrMaxPitch (2^31 - 1 bytes on
          // current GPUs: cudaErrorInvalidPitchValue), and a shard can be larger: at world
          // size 1 a shard is the whole bucket (Llama 3 8B: the embedding alone is 1.05 GB of
          // bf16, a block 0.44 GB; a bucket of both plus a block passes 2^31). One copy per
          // shard instead.
          for (std::int64_t v = 0; v < shards; ++v) {
            FSDPTUNE_CUDA_CHECK(
                cudaMemcpyAsync(destination + v * n * size, source + v * layout.shard_bytes,
                                static_cast<std::size_t>(n * size), cudaMemcpyDeviceToDevice, s));
          }
        }
      } else {
        for (int v = 0; v < mesh.shards_per_rank; ++v) {
          accumulate_kernel<<<grid_for(n), kThreads, 0, s>>>(
              storage_ + layout_.shard_storage_elements + slot.storage_offset + v * n,
              static_cast<const char*>(buffers.receive) + v * layout.shard_bytes + slot.byte_offset,
              wire_of(slot.wire), n);
        }
      }
    }
    FSDPTUNE_CUDA_CHECK(cudaGetLastError());
  }

  BlockId allocate(int stream, std::int64_t bytes) override {
    void* block = nullptr;
    FSDPTUNE_CUDA_CHECK(
        cudaMallocAsync(&block, static_cast<std::size_t>(bytes), pool_, cuda_stream(stream)));
    blocks_.push_back(block);
    return static_cast<BlockId>(blocks_.size() - 1);
  }

  void release(int stream, BlockId block) override {
    void*& data = blocks_.at(static_cast<std::size_t>(block));
    FSDPTUNE_CUDA_CHECK(cudaFreeAsync(data, cuda_stream(stream)));
    data = nullptr;
  }

  EventId record(int stream) override {
    if (next_event_ == events_.size()) {
      cudaEvent_t event = nullptr;
      FSDPTUNE_CUDA_CHECK(cudaEventCreate(&event));
      events_.push_back(event);
      done_.push_back(false);
    }
    FSDPTUNE_CUDA_CHECK(cudaEventRecord(events_[next_event_], cuda_stream(stream)));
    done_[next_event_] = false;
    return static_cast<EventId>(next_event_++);
  }

  void wait(int stream, EventId event) override {
    FSDPTUNE_CUDA_CHECK(
        cudaStreamWaitEvent(cuda_stream(stream), events_.at(static_cast<std::size_t>(event)), 0));
  }

  // Polls the events (progress for the watchdog) and the communicators (asynchronous NCCL
  // errors) until every stream is idle.
  void synchronize() override {
    for (;;) {
      for (std::size_t e = 0; e < next_event_; ++e) {
        if (done_[e]) continue;
        const cudaError_t status = cudaEventQuery(events_[e]);
        if (status == cudaSuccess) {
          done_[e] = true;
          ++progress_;
        } else if (status != cudaErrorNotReady) {
          FSDPTUNE_CUDA_CHECK(status);
        }
      }
      for (const StreamComms& comms : comms_) {
        for (ncclComm_t comm : {comms.world, comms.shard, comms.replica, comms.tp, comms.cp}) {
          ncclResult_t async = ncclSuccess;
          FSDPTUNE_NCCL_CHECK(ncclCommGetAsyncError(comm, &async));
          FSDPTUNE_NCCL_CHECK(async);
        }
      }
      for (ncclComm_t comm : pipeline_comms_) {
        ncclResult_t async = ncclSuccess;
        FSDPTUNE_NCCL_CHECK(ncclCommGetAsyncError(comm, &async));
        FSDPTUNE_NCCL_CHECK(async);
      }
      bool idle = true;
      for (cudaStream_t stream : streams_) {
        const cudaError_t status = cudaStreamQuery(stream);
        if (status == cudaErrorNotReady) {
          idle = false;
        } else {
          FSDPTUNE_CUDA_CHECK(status);
        }
      }
      if (idle) break;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    FSDPTUNE_CUDA_CHECK(cudaDeviceSynchronize());
  }

  double elapsed_s(EventId from, EventId to) const override {
    float ms = 0;
    FSDPTUNE_CUDA_CHECK(cudaEventElapsedTime(&ms, events_.at(static_cast<std::size_t>(from)),
                                             events_.at(static_cast<std::size_t>(to))));
    return static_cast<double>(ms) * 1e-3;
  }

  void reset_events() override { next_event_ = 0; }

  std::int64_t progress() const override { return progress_.load(); }

  std::int64_t peak_tracked_bytes() const override {
    std::uint64_t high = 0;
    FSDPTUNE_CUDA_CHECK(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &high));
    return std::max(static_cast<std::int64_t>(high), peak_floor_bytes_);
  }

  // The high-water mark "can only be reset to zero" (cudaMemPoolAttrUsedMemHigh): the CUDA
  // documentation does not say whether it then restarts from zero or from the memory in use.
  // Either way the peak of what follows is at least the use now (the persistent state), so
  // that is the floor: without it a step whose allocations all stay below the reset point
  // would report a peak below its own persistent state.
  void reset_peak() override {
    std::uint64_t zero = 0;
    FSDPTUNE_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &zero));
    std::uint64_t used = 0;
    FSDPTUNE_CUDA_CHECK(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemCurrent, &used));
    peak_floor_bytes_ = static_cast<std::int64_t>(used);
  }

  std::int64_t staging_bytes() const override { return staging_bytes_; }

  std::int64_t kernel_workspace_bytes() const override {
    std::int64_t bytes = 0;
    for (const auto& kernels : kernels_) bytes += kernels->workspace_bytes();
    for (const std::int64_t scratch : tp_scratch_bytes_) bytes += scratch;
    return bytes;
  }

  void set_data_check(const DataCheck& check) override {
    check_ = check;
    tp_checks_.clear();
    // key = ~0: none. The device synchronized, so the non-blocking streams see it.
    FSDPTUNE_CUDA_CHECK(cudaMemset(tp_mismatch_, 0xFF, sizeof(TpMismatch) * streams_.size()));
    FSDPTUNE_CUDA_CHECK(cudaDeviceSynchronize());
  }

  std::optional<std::string> tp_check_failure() override {
    std::vector<TpMismatch> streams(streams_.size());
    FSDPTUNE_CUDA_CHECK(cudaMemcpy(streams.data(), tp_mismatch_,
                                   sizeof(TpMismatch) * streams.size(), cudaMemcpyDeviceToHost));
    const TpMismatch mismatch =
        *std::min_element(streams.begin(), streams.end(),
                          [](const TpMismatch& a, const TpMismatch& b) { return a.key < b.key; });
    if (mismatch.key == ~0ull) return std::nullopt;
    const TpChecked& checked =
        tp_checks_.at(static_cast<std::size_t>(mismatch.key >> kElementBits));
    return tp_mismatch_message(
        checked.collective, checked.what, checked.group_rank, layout_.rank,
        static_cast<std::int64_t>(mismatch.key & ((1ull << kElementBits) - 1)), mismatch.actual);
  }

  std::vector<std::byte> read_gradient_shards() override {
    std::vector<std::byte> host(static_cast<std::size_t>(4 * layout_.shard_storage_elements));
    FSDPTUNE_CUDA_CHECK(cudaMemcpy(host.data(), storage_ + layout_.shard_storage_elements,
                                   host.size(), cudaMemcpyDeviceToHost));
    return host;
  }

  void overwrite_gradient_shards(std::int64_t byte_offset,
                                 const std::vector<std::byte>& bytes) override {
    FSDPTUNE_CHECK(byte_offset >= 0 && byte_offset + static_cast<std::int64_t>(bytes.size()) <=
                                           4 * layout_.shard_storage_elements,
                   "overwrite_gradient_shards outside the shards");
    FSDPTUNE_CUDA_CHECK(
        cudaMemcpy(reinterpret_cast<char*>(storage_ + layout_.shard_storage_elements) + byte_offset,
                   bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
  }

  std::vector<std::byte> read_bucket(int bucket, BucketBuffer which) override {
    const auto [data, bytes] = buffer(bucket, which);
    std::vector<std::byte> host(static_cast<std::size_t>(bytes));
    FSDPTUNE_CUDA_CHECK(cudaMemcpy(host.data(), data, host.size(), cudaMemcpyDeviceToHost));
    return host;
  }

  void overwrite_bucket(int bucket, BucketBuffer which, std::int64_t byte_offset,
                        const std::vector<std::byte>& bytes) override {
    const auto [data, size] = buffer(bucket, which);
    FSDPTUNE_CHECK(
        byte_offset >= 0 && byte_offset + static_cast<std::int64_t>(bytes.size()) <= size,
        "overwrite_bucket outside the buffer");
    FSDPTUNE_CUDA_CHECK(cudaMemcpy(static_cast<char*>(data) + byte_offset, bytes.data(),
                                   bytes.size(), cudaMemcpyHostToDevice));
  }

 private:
  cudaStream_t cuda_stream(int stream) const {
    return streams_.at(static_cast<std::size_t>(stream));
  }

  static ncclDataType_t nccl_type(DType dtype) {
    return dtype == DType::kFP32 ? ncclFloat32 : ncclBfloat16;
  }

  // A tensor- or context-parallel collective of the compute path (TpCollective,
  // data_check.hpp; see the cpu backend) on `stream`'s scratch buffer grown to the
  // largest op (the old one freed in `cuda`'s order, after the work that used it), enqueued on
  // `cuda` (the stream or its side stream). Checked, the input is written with tp_input
  // before it and the output compared with tp_expected after it, on `cuda`.
  void tp_collective(int stream, cudaStream_t cuda, const Op& op, const std::string& task) {
    const TpCollective collective =
        tp_collective_of(op, compute_collective_ranks(op, layout_.mesh));
    const std::int64_t size = bytes_per_element(collective.dtype);
    const std::int64_t ranks = collective.ranks;
    const std::int64_t part = collective.part;
    const std::int64_t needed = 2 * part * ranks * size;
    const auto s = static_cast<std::size_t>(stream);
    if (tp_scratch_bytes_[s] < needed) {
      // From the scratch pool in `cuda`'s order: a cudaFree waits for the whole device, the
      // NCCL kernels of other streams too, which can wait for a peer rank blocked the same
      // way (found by review). The stream and its side stream use the scratch one after the
      // other, ordered by their events.
      if (tp_scratch_[s] != nullptr) FSDPTUNE_CUDA_CHECK(cudaFreeAsync(tp_scratch_[s], cuda));
      FSDPTUNE_CUDA_CHECK(cudaMallocFromPoolAsync(&tp_scratch_[s], static_cast<std::size_t>(needed),
                                                  scratch_pool_, cuda));
      // On the stream that uses it next: the legacy default stream a plain cudaMemset runs
      // on does not order with the non-blocking streams.
      FSDPTUNE_CUDA_CHECK(
          cudaMemsetAsync(tp_scratch_[s], 0, static_cast<std::size_t>(needed), cuda));
      tp_scratch_bytes_[s] = needed;
    }
    char* input = static_cast<char*>(tp_scratch_[s]);
    char* output = input + part * ranks * size;
    ncclComm_t comm = op.parallel_dim == ParallelDim::kContext ? comms_[s].cp : comms_[s].tp;
    const ncclDataType_t type = nccl_type(collective.dtype);
    const int wire = wire_of(collective.dtype);
    const int tp_rank = compute_collective_rank(op, layout_.mesh);
    int sequence = -1;
    if (check_.tp_collectives) {
      sequence = static_cast<int>(tp_checks_.size());
      tp_checks_.push_back({collective, task + " op " + op.name, tp_rank});
      const std::int64_t n = collective.input_elements();
      tp_fill_kernel<<<grid_for(n), kThreads, 0, cuda>>>(input, wire, tp_rank, collective.amplitude,
                                                         n);
      FSDPTUNE_CUDA_CHECK(cudaGetLastError());
    }
    switch (op.collective) {
      case CollectiveKind::kAllGather:
        FSDPTUNE_NCCL_CHECK(
            ncclAllGather(input, output, static_cast<std::size_t>(part), type, comm, cuda));
        break;
      case CollectiveKind::kReduceScatter:
        FSDPTUNE_NCCL_CHECK(ncclReduceScatter(input, output, static_cast<std::size_t>(part), type,
                                              ncclSum, comm, cuda));
        break;
      case CollectiveKind::kAllReduce:
        FSDPTUNE_NCCL_CHECK(ncclAllReduce(input, output, static_cast<std::size_t>(part * ranks),
                                          type, ncclSum, comm, cuda));
        break;
      case CollectiveKind::kSendRecv:
        throw_bad_input("op " + op.name, "point-to-point sends are not replayed");
    }
    if (sequence < 0) return;
    if (sequence == check_.corrupt_tp_collective) corrupt_kernel<<<1, 1, 0, cuda>>>(output, wire);
    const std::int64_t n = collective.output_elements();
    tp_check_kernel<<<grid_for(n), kThreads, 0, cuda>>>(
        output, wire, tp_kind_of(collective.kind), collective.ranks, part, collective.amplitude,
        tp_rank, n, sequence, tp_mismatch_ + s);
    tp_record_kernel<<<1, 1, 0, cuda>>>(output, wire, sequence, tp_mismatch_ + s);
    FSDPTUNE_CUDA_CHECK(cudaGetLastError());
  }

  std::pair<void*, std::int64_t> buffer(int bucket, BucketBuffer which) const {
    const BucketBuffers& buffers = buckets_.at(static_cast<std::size_t>(bucket));
    switch (which) {
      case BucketBuffer::kGathered:
      case BucketBuffer::kReduced:
        return {buffers.receive, buffers.receive_bytes};
      case BucketBuffer::kUnsharded:
        return {buffers.unsharded, buffers.receive_bytes};
    }
    return {buffers.receive, buffers.receive_bytes};
  }

  int device_ = 0;
  AttentionKernel attention_ = AttentionKernel::kAuto;
  int rank_ = 0;
  ReplayLayout layout_;
  cudaMemPool_t pool_ = nullptr;
  std::vector<cudaStream_t> streams_;
  std::vector<cudaStream_t> side_streams_;  // per stream (run_ops)
  std::vector<cudaEvent_t> side_ready_;     // per stream: the stream up to a kStart
  std::vector<cudaEvent_t> side_done_;      // per stream: the side stream up to a kWait
  std::vector<StreamComms> comms_;
  std::vector<void*> tp_scratch_;  // per stream
  std::vector<std::int64_t> tp_scratch_bytes_;
  cudaMemPool_t scratch_pool_ = nullptr;
  // --check-data of the TP collectives: what each checked one was, by sequence (enqueue
  // order), and per stream the first mismatch on the device.
  struct TpChecked {
    TpCollective collective;
    std::string what;
    int group_rank = 0;  // this rank's place in the collective's TP or CP group
  };
  DataCheck check_;
  std::vector<TpChecked> tp_checks_;
  TpMismatch* tp_mismatch_ = nullptr;
  float* storage_ = nullptr;  // fp32 parameter shards, then gradient shards
  void* separate_storage_ = nullptr;
  std::vector<std::unique_ptr<OpKernels>> kernels_;
  void* persistent_ = nullptr;
  std::vector<BucketBuffers> buckets_;
  std::vector<void*> messages_;  // ReplayLayout::messages
  // Pipeline channels by kind (0 activations, 1 gradients): this rank's sends and receives.
  ncclComm_t pipeline_send_[2] = {nullptr, nullptr};
  ncclComm_t pipeline_receive_[2] = {nullptr, nullptr};
  std::vector<ncclComm_t> pipeline_comms_;  // this rank's channels, in creation order
  std::int64_t staging_bytes_ = 0;
  std::int64_t max_pitch_bytes_ = 0;   // cudaDevAttrMaxPitch
  std::int64_t peak_floor_bytes_ = 0;  // the pool's use at reset_peak()
  std::vector<void*> blocks_;
  std::vector<cudaEvent_t> events_;
  std::vector<bool> done_;
  std::size_t next_event_ = 0;
  std::atomic<std::int64_t> progress_{0};
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int local_rank, AttentionKernel attention) {
  return std::make_unique<CudaBackend>(local_rank, attention);
}

int cuda_backend_device_count() { return cuda_device_count(); }

}  // namespace fsdptune

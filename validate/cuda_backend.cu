// The cuda backend: one CUDA stream and one NCCL communicator per schedule stream (NCCL
// requires the same order of operations per communicator on every rank, which holds within
// a stream), CUDA events for dependencies and timing, cuBLAS kernels (cuda_kernels.cu),
// and the schedule's memory events as cudaMallocAsync / cudaFreeAsync on the device's
// default pool, whose used-memory high-water mark is the measured peak.
#include <mpi.h>
#include <nccl.h>

#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>

#include <cublas_v2.h>

#include "cuda_check.hpp"
#include "fsdptune/backend.hpp"
#include "fsdptune/data_check.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/kernels.hpp"

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

int element_bytes(DType dtype) { return dtype == DType::kFP32 ? 4 : 2; }

// The device side of data_pattern (data_check.hpp): the same formulas, checked against the
// host ones by --check-data itself.
__device__ float device_param_value(std::uint32_t salt, std::int64_t index) {
  return static_cast<float>((static_cast<std::int64_t>(salt) + 7 * index) % 251 - 125);
}
__device__ float device_gradient_value(int rank, std::uint32_t salt, std::int64_t index) {
  return static_cast<float>((static_cast<std::int64_t>(salt) + 3 * index + 5 * rank) % 17 - 8);
}

__device__ void store(void* data, bool fp32, std::int64_t i, float value) {
  if (fp32) {
    static_cast<float*>(data)[i] = value;
  } else {
    static_cast<__nv_bfloat16*>(data)[i] = __float2bfloat16(value);
  }
}

__device__ float load(const void* data, bool fp32, std::int64_t i) {
  return fp32 ? static_cast<const float*>(data)[i]
              : __bfloat162float(static_cast<const __nv_bfloat16*>(data)[i]);
}

#define GRID_STRIDE(i, n)                                                                          \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

// This rank's fp32 shard of a parameter: element j = full element rank * shard_numel + j.
__global__ void init_shard_kernel(float* shard, std::uint32_t salt, int rank,
                                  std::int64_t shard_numel, std::int64_t numel) {
  GRID_STRIDE(j, shard_numel) {
    const std::int64_t index = rank * shard_numel + j;
    shard[j] = index < numel ? device_param_value(salt, index) : 0.0f;
  }
}

__global__ void cast_kernel(const float* source, void* destination, bool fp32, std::int64_t n) {
  GRID_STRIDE(j, n) { store(destination, fp32, j, source[j]); }
}

// This rank's unsharded gradient of one parameter into the reduce-scatter send buffer:
// rank r's part at r * shard + offset.
__global__ void gradient_kernel(void* send, bool fp32, int rank, int world, std::uint32_t salt,
                                std::int64_t shard, std::int64_t offset, std::int64_t shard_numel,
                                std::int64_t numel) {
  GRID_STRIDE(i, shard_numel * world) {
    const std::int64_t r = i / shard_numel;
    const std::int64_t j = i % shard_numel;
    const float value = i < numel ? device_gradient_value(rank, salt, i) : 0.0f;
    store(send, fp32, r * shard + offset + j, value);
  }
}

__global__ void accumulate_kernel(float* gradient, const void* received, bool fp32,
                                  std::int64_t n) {
  GRID_STRIDE(j, n) { gradient[j] += load(received, fp32, j); }
}

struct BucketBuffers {
  void* send = nullptr;
  void* receive = nullptr;
  void* unsharded = nullptr;
  std::int64_t send_bytes = 0;
  std::int64_t receive_bytes = 0;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      throw_runtime("--backend cuda", "no CUDA device is visible to this process");
    }
    device_ = device % count;
    FSDPTUNE_CUDA_CHECK(cudaSetDevice(device_));
    FSDPTUNE_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool_, device_));
    // Keep freed memory in the pool (as PyTorch's caching allocator does) so allocation
    // timing is not dominated by returning memory to the driver.
    std::uint64_t keep = UINT64_MAX;
    FSDPTUNE_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep));
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  }

  ~CudaBackend() override {
    cudaSetDevice(device_);
    cudaDeviceSynchronize();
    kernels_.clear();
    for (ncclComm_t comm : comms_) ncclCommDestroy(comm);
    for (BucketBuffers& buffers : buckets_) {
      cudaFree(buffers.send);
      cudaFree(buffers.receive);
      cudaFree(buffers.unsharded);
    }
    for (void* block : blocks_) {
      if (block != nullptr) cudaFree(block);
    }
    if (persistent_ != nullptr) cudaFree(persistent_);
    for (cudaEvent_t event : events_) cudaEventDestroy(event);
    for (cudaStream_t stream : streams_) cudaStreamDestroy(stream);
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
    return {{"device", "cuda:" + std::to_string(device_) + " " + properties.name},
            {"device_memory_bytes", std::to_string(properties.totalGlobalMem)},
            {"cuda_driver", std::to_string(driver)},
            {"cuda_runtime", std::to_string(runtime)},
            {"nccl", std::to_string(nccl)}};
  }

  void prepare(const ReplayLayout& layout) override {
    layout_ = layout;
    FSDPTUNE_CUDA_CHECK(cudaSetDevice(device_));
    for (std::size_t s = 0; s < layout.streams.size(); ++s) {
      cudaStream_t stream = nullptr;
      FSDPTUNE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      streams_.push_back(stream);
      KernelOptions options;
      options.device = device_;
      options.stream = stream;
      kernels_.push_back(make_cuda_kernels(options));
      // One communicator per stream, its unique id from rank 0 over MPI.
      ncclUniqueId id{};
      if (layout.rank == 0) FSDPTUNE_NCCL_CHECK(ncclGetUniqueId(&id));
      MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
      ncclComm_t comm = nullptr;
      FSDPTUNE_NCCL_CHECK(ncclCommInitRank(&comm, layout.world_size, id, layout.rank));
      comms_.push_back(comm);
    }
    cudaStream_t first = streams_.front();
    FSDPTUNE_CUDA_CHECK(cudaMallocAsync(
        &persistent_, static_cast<std::size_t>(layout.persistent_bytes), pool_, first));
    FSDPTUNE_CUDA_CHECK(
        cudaMemsetAsync(persistent_, 0, static_cast<std::size_t>(layout.persistent_bytes), first));
    for (const ReplayBucket& bucket : layout.buckets) {
      for (const ReplaySlot& slot : bucket.slots) {
        init_shard_kernel<<<grid_for(slot.slot.shard_numel), kThreads, 0, first>>>(
            parameters() + slot.storage_offset, slot.salt, layout.rank, slot.slot.shard_numel,
            slot.slot.numel);
      }
      FSDPTUNE_CUDA_CHECK(cudaGetLastError());
    }
    for (const ReplayBucket& bucket : layout.buckets) {
      const std::int64_t bytes = bucket.shard_elements * element_bytes(bucket.dtype);
      BucketBuffers buffers;
      const bool gather = bucket.kind == CollectiveKind::kAllGather;
      buffers.send_bytes = gather ? bytes : bytes * layout.world_size;
      buffers.receive_bytes = gather ? bytes * layout.world_size : bytes;
      // Staging: plain cudaMalloc, outside the pool whose high-water mark is the peak.
      FSDPTUNE_CUDA_CHECK(cudaMalloc(&buffers.send, static_cast<std::size_t>(buffers.send_bytes)));
      FSDPTUNE_CUDA_CHECK(
          cudaMalloc(&buffers.receive, static_cast<std::size_t>(buffers.receive_bytes)));
      staging_bytes_ += buffers.send_bytes + buffers.receive_bytes;
      if (gather) {
        FSDPTUNE_CUDA_CHECK(
            cudaMalloc(&buffers.unsharded, static_cast<std::size_t>(buffers.receive_bytes)));
        staging_bytes_ += buffers.receive_bytes;
      }
      buckets_.push_back(buffers);
    }
    FSDPTUNE_CUDA_CHECK(cudaStreamSynchronize(first));
  }

  void run_ops(int stream, const std::vector<Op>& ops) override {
    OpKernels& kernels = *kernels_.at(static_cast<std::size_t>(stream));
    for (const Op& op : ops) kernels.run(op);
  }

  void copy_in(int stream, int bucket) override {
    const ReplayBucket& layout = layout_.buckets[static_cast<std::size_t>(bucket)];
    const BucketBuffers& buffers = buckets_[static_cast<std::size_t>(bucket)];
    const bool fp32 = layout.dtype == DType::kFP32;
    const int size = element_bytes(layout.dtype);
    cudaStream_t s = cuda_stream(stream);
    for (const ReplaySlot& slot : layout.slots) {
      const std::int64_t n = slot.slot.shard_numel;
      if (layout.kind == CollectiveKind::kAllGather) {
        cast_kernel<<<grid_for(n), kThreads, 0, s>>>(
            parameters() + slot.storage_offset,
            static_cast<char*>(buffers.send) + slot.slot.offset * size, fp32, n);
      } else {
        gradient_kernel<<<grid_for(n * layout_.world_size), kThreads, 0, s>>>(
            buffers.send, fp32, layout_.rank, layout_.world_size, slot.salt, layout.shard_elements,
            slot.slot.offset, n, slot.slot.numel);
      }
    }
    FSDPTUNE_CUDA_CHECK(cudaGetLastError());
  }

  void collective(int stream, int bucket) override {
    const ReplayBucket& layout = layout_.buckets[static_cast<std::size_t>(bucket)];
    const BucketBuffers& buffers = buckets_[static_cast<std::size_t>(bucket)];
    const ncclDataType_t type = layout.dtype == DType::kFP32 ? ncclFloat32 : ncclBfloat16;
    const auto count = static_cast<std::size_t>(layout.shard_elements);
    ncclComm_t comm = comms_[static_cast<std::size_t>(stream)];
    if (layout.kind == CollectiveKind::kAllGather) {
      FSDPTUNE_NCCL_CHECK(
          ncclAllGather(buffers.send, buffers.receive, count, type, comm, cuda_stream(stream)));
    } else {
      FSDPTUNE_NCCL_CHECK(ncclReduceScatter(buffers.send, buffers.receive, count, type, ncclSum,
                                            comm, cuda_stream(stream)));
    }
  }

  void copy_out(int stream, int bucket) override {
    const ReplayBucket& layout = layout_.buckets[static_cast<std::size_t>(bucket)];
    const BucketBuffers& buffers = buckets_[static_cast<std::size_t>(bucket)];
    const bool fp32 = layout.dtype == DType::kFP32;
    const std::int64_t size = element_bytes(layout.dtype);
    const std::int64_t world = layout_.world_size;
    cudaStream_t s = cuda_stream(stream);
    for (const ReplaySlot& slot : layout.slots) {
      const std::int64_t n = slot.slot.shard_numel;
      if (layout.kind == CollectiveKind::kAllGather) {
        // Rank r's piece (at r * shard + offset) -> r * shard_numel of the full tensor.
        FSDPTUNE_CUDA_CHECK(cudaMemcpy2DAsync(
            static_cast<char*>(buffers.unsharded) + world * slot.slot.offset * size,
            static_cast<std::size_t>(n * size),
            static_cast<const char*>(buffers.receive) + slot.slot.offset * size,
            static_cast<std::size_t>(layout.shard_elements * size),
            static_cast<std::size_t>(n * size), static_cast<std::size_t>(world),
            cudaMemcpyDeviceToDevice, s));
      } else {
        accumulate_kernel<<<grid_for(n), kThreads, 0, s>>>(
            parameters() + layout_.shard_storage_elements + slot.storage_offset,
            static_cast<const char*>(buffers.receive) + slot.slot.offset * size, fp32, n);
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
      for (ncclComm_t comm : comms_) {
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
    return static_cast<std::int64_t>(high);
  }

  void reset_peak() override {
    std::uint64_t zero = 0;  // resets the high-water mark to the current use
    FSDPTUNE_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &zero));
  }

  std::int64_t staging_bytes() const override { return staging_bytes_; }

  std::int64_t kernel_workspace_bytes() const override {
    std::int64_t bytes = 0;
    for (const auto& kernels : kernels_) bytes += kernels->workspace_bytes();
    return bytes;
  }

  std::vector<float> read_bucket(int bucket, BucketBuffer which) override {
    const ReplayBucket& layout = layout_.buckets[static_cast<std::size_t>(bucket)];
    const auto [data, bytes] = buffer(bucket, which);
    std::vector<std::byte> host(static_cast<std::size_t>(bytes));
    FSDPTUNE_CUDA_CHECK(cudaMemcpy(host.data(), data, host.size(), cudaMemcpyDeviceToHost));
    const int size = element_bytes(layout.dtype);
    std::vector<float> values(host.size() / static_cast<std::size_t>(size));
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (size == 4) {
        std::memcpy(&values[i], host.data() + i * 4, 4);
      } else {
        std::uint16_t bits = 0;
        std::memcpy(&bits, host.data() + i * 2, 2);
        values[i] = data_pattern::from_bf16(bits);
      }
    }
    return values;
  }

  void corrupt_bucket(int bucket, BucketBuffer which, std::int64_t element, float value) override {
    const ReplayBucket& layout = layout_.buckets[static_cast<std::size_t>(bucket)];
    const auto [data, bytes] = buffer(bucket, which);
    const int size = element_bytes(layout.dtype);
    FSDPTUNE_CHECK((element + 1) * size <= bytes, "corrupt_bucket outside the buffer");
    const std::uint16_t bits = data_pattern::to_bf16(value);
    const void* source = size == 4 ? static_cast<const void*>(&value) : &bits;
    FSDPTUNE_CUDA_CHECK(cudaMemcpy(static_cast<char*>(data) + element * size, source,
                                   static_cast<std::size_t>(size), cudaMemcpyHostToDevice));
  }

 private:
  cudaStream_t cuda_stream(int stream) const {
    return streams_.at(static_cast<std::size_t>(stream));
  }
  float* parameters() const { return static_cast<float*>(persistent_); }

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
  int rank_ = 0;
  ReplayLayout layout_;
  cudaMemPool_t pool_ = nullptr;
  std::vector<cudaStream_t> streams_;
  std::vector<ncclComm_t> comms_;
  std::vector<std::unique_ptr<OpKernels>> kernels_;
  void* persistent_ = nullptr;
  std::vector<BucketBuffers> buckets_;
  std::int64_t staging_bytes_ = 0;
  std::vector<void*> blocks_;
  std::vector<cudaEvent_t> events_;
  std::vector<bool> done_;
  std::size_t next_event_ = 0;
  std::atomic<std::int64_t> progress_{0};
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device) {
  return std::make_unique<CudaBackend>(device);
}

int cuda_backend_device_count() { return cuda_device_count(); }

}  // namespace fsdptune

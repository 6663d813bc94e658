// The executor's device: what one rank needs to replay a Program for real (DESIGN.md
// "Validation"). Modelled on a CUDA device: work is *enqueued* on streams and runs in
// enqueue order per stream; streams synchronise through events; the host waits with
// synchronize(). The cpu backend emulates this with one worker thread per stream and MPI
// collectives; the cuda backend is CUDA streams, events, cuBLAS and NCCL.
//
// Groups: the run's mesh is [pp, dp_replicate, dp_shard, tp] with tp innermost (torchtitan;
// ReplayMesh), the cp ranks the innermost factor of dp_shard (torchtitan's dp_shard_cp).
// FSDP bucket collectives run over the shard group, the HSDP all-reduce over the replica
// group, the TP collectives inside compute ops over the TP group and the CP ones over the
// CP group (cp consecutive shards), all inside one pipeline stage; each stream has its own
// communicator of each group (collectives on one communicator are issued in the same order on every
// rank, which holds within a stream). Pipeline stages exchange point-to-point messages
// (ReplayMessage).
//
// Virtual shards (--scale-down): a rank may hold `shards_per_rank` consecutive shards of
// the schedule's dp_shard ("virtual ranks"). Each bucket's flat buffers are then laid out
// exactly as in the schedule -- virtual rank v's shard at v * shard_bytes -- and a rank
// contributes its shards_per_rank shards to every collective.
//
// Buffers: the backend owns, per rank,
//   - the persistent state (ReplayLayout::persistent_bytes, tracked) and the fp32 master
//     parameter shards and fp32 gradient shards (shard_storage_elements each; at the start
//     of the persistent state when they fit, else in an untracked buffer counted as
//     staging);
//   - per bucket, the flat buffers its collective runs on (staging, untracked: allocated
//     once in prepare(), reported as staging_bytes), V = schedule dp_shard, k =
//     shards_per_rank: all-gather send [k * shard] -> receive [V * shard] -> unsharded
//     parameters [V * shard]; reduce-scatter gradients [V * shard] (written once) -> send
//     [V * shard] -> receive [k * shard];
//   - blocks allocated and released by the schedule's memory events (tracked).
// peak_tracked_bytes() is the high-water mark of the tracked bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fsdptune/kernels.hpp"
#include "fsdptune/program.hpp"
#include "fsdptune/workload.hpp"

namespace fsdptune {

// The run's device mesh and this rank's place in it: rank = ((stage * dp_replicate +
// replica) * dp_shard + shard) * tp + tp_rank (torchtitan's [pp, dp_replicate, dp_shard,
// tp], tp innermost; pipeline_link_groups: adjacent stages dp_replicate * dp_shard * tp
// ranks apart).
struct ReplayMesh {
  int pp = 1;  // pipeline stages
  int dp_replicate = 1;
  int dp_shard = 1;  // ranks of one shard group in this run
  int tp = 1;
  // Context-parallel ranks: shards cp * i .. cp * i + cp - 1 form a CP group (divides
  // dp_shard).
  int cp = 1;
  // Shards of the schedule's dp_shard each rank holds: schedule dp_shard = dp_shard *
  // shards_per_rank; > 1 only with --scale-down.
  int shards_per_rank = 1;
  int stage = 0;  // pipeline rank
  int replica = 0;
  int shard = 0;
  int tp_rank = 0;

  int cp_rank() const { return shard % cp; }
  int stage_size() const { return dp_replicate * dp_shard * tp; }  // ranks per stage
  int world_size() const { return pp * stage_size(); }
  // This rank's place inside its stage (the same on every stage for one position).
  int rank_in_stage() const { return (replica * dp_shard + shard) * tp + tp_rank; }
  int schedule_dp_shard() const { return dp_shard * shards_per_rank; }
  int first_virtual_shard() const { return shard * shards_per_rank; }
  // Whose gradient pattern this rank writes (data_pattern::gradient_value): its
  // data-parallel index replica * dp_shard + shard. TP ranks of one DP index agree.
  int data_parallel_rank() const { return replica * dp_shard + shard; }

  // How a world communicator splits into this rank's groups (MPI_Comm_split /
  // ncclCommSplit): ranks of equal `color` form a group, ordered by `key`, their coordinate
  // in it. Groups never cross pipeline stages: the stage is part of every color.
  struct GroupSplit {
    int color = 0;
    int key = 0;
    bool operator==(const GroupSplit&) const = default;
  };
  // FSDP shard group: same stage, replica and TP rank.
  GroupSplit shard_split() const {
    return {(stage * dp_replicate + replica) * tp + tp_rank, shard};
  }
  // HSDP replica group: same stage, shard and TP rank.
  GroupSplit replica_split() const { return {(stage * dp_shard + shard) * tp + tp_rank, replica}; }
  // TP group: same stage, replica and shard.
  GroupSplit tp_split() const {
    return {(stage * dp_replicate + replica) * dp_shard + shard, tp_rank};
  }
  // CP group: same stage, replica, TP rank and shard / cp (cp consecutive shards).
  GroupSplit cp_split() const {
    return {((stage * dp_replicate + replica) * dp_shard + shard - cp_rank()) * tp + tp_rank,
            cp_rank()};
  }
  bool operator==(const ReplayMesh&) const = default;
};
// REQUIRES: 0 <= rank < pp * dp_replicate * dp_shard * tp, all sizes >= 1, cp divides
// dp_shard.
ReplayMesh make_replay_mesh(int rank, int dp_replicate, int dp_shard, int tp, int shards_per_rank,
                            int pp = 1, int cp = 1);

// The ranks of the group a compute-path collective (OpKind::kCollective) runs over in
// `mesh`: mesh.cp for a context-parallel one, mesh.tp for a tensor-parallel one.
int compute_collective_ranks(const Op& op, const ReplayMesh& mesh);
// This rank's place in that group: mesh.cp_rank() or mesh.tp_rank.
int compute_collective_rank(const Op& op, const ReplayMesh& mesh);

// A bucket's parameters with where their fp32 shards live in the shard storage.
struct ReplaySlot {
  BufferSlot slot;                  // layout in the bucket's flat buffer (elements)
  DType wire = DType::kBF16;        // this parameter's dtype on the wire (fp8: 1 byte)
  std::int64_t byte_offset = 0;     // within one shard of the flat buffer
  std::int64_t storage_offset = 0;  // elements, into the fp32 parameter / gradient storage:
                                    // the rank's shards_per_rank shards back to back
  std::uint32_t salt = 0;           // data_pattern::param_salt(slot.param)
  bool operator==(const ReplaySlot&) const = default;
};

struct ReplayBucket {
  CollectiveKind kind = CollectiveKind::kAllGather;
  // Element type of the reduction (reduce-scatter, all-reduce: every slot's wire dtype);
  // an all-gather moves bytes and each slot has its own wire dtype (float8 buckets mix fp8
  // linears with bf16 norms).
  DType dtype = DType::kBF16;
  std::int64_t shard_elements = 0;  // per (virtual) shard
  std::int64_t shard_bytes = 0;     // per (virtual) shard: sum of shard_numel * wire bytes
  std::vector<ReplaySlot> slots;
  // Reduce-scatter: an HSDP all-reduce of the reduced shard across the replica group
  // follows in the Program (a kAllReduce task of this bucket).
  bool all_reduced = false;
  // Reduce-scatter: the microbatches whose gradients its input holds. > 1 for a pipeline
  // chunk that keeps its parameters gathered: its unsharded gradients accumulate over the
  // step's microbatches (Backend::accumulate_gradients) and are reduce-scattered once.
  int gradient_microbatches = 1;
  // Reduce-scatter: how many times a step copies the bucket out into the fp32 gradient
  // shards (once per run of its Program's copy-out, or collective without copy tasks; a
  // pipeline chunk re-gathering every microbatch runs it M times, one kept gathered once).
  int gradient_copy_outs = 1;
  // Reduce-scatter: the amplitude q of the gradient pattern, values in [-q, q]
  // (data_pattern::gradient_amplitude of its addends, dtype and copy-outs; 8 =
  // data_pattern::kMaxAmplitude up to 32 bf16 addends). Every backend writes and the checks
  // expect data_pattern::gradient_value with it, so that every partial sum is exact. 0:
  // no pattern is exact, the gradients are 0 and --check-data refuses the schedule
  // (check_data_exact).
  int gradient_amplitude = 8;
  bool operator==(const ReplayBucket&) const = default;
};

// A point-to-point message between adjacent pipeline stages: one microbatch's activation
// (forward) or its gradient (backward), of pipeline_send_bytes (what the simulator's
// send_s is priced from). The sender's contents are data_pattern::message_value of its
// tag, written once in prepare(); the receiver's buffer is checked against them.
struct ReplayMessage {
  bool outgoing = true;
  int peer = 0;                // the other rank, in MPI_COMM_WORLD
  int sender = 0;              // the sending rank, in MPI_COMM_WORLD
  int tag = 0;                 // unique per (sending chunk, microbatch, direction) in a step
  bool gradient = false;       // a backward's gradient (else a forward's activation)
  DType dtype = DType::kBF16;  // the activation dtype (the job's param dtype)
  std::int64_t bytes = 0;
  std::string what;  // e.g. "activation of chunk 0 microbatch 1 (to chunk 1)"
  bool operator==(const ReplayMessage&) const = default;
};

// Everything a backend needs before the first enqueue.
struct ReplayLayout {
  int rank = 0;  // in MPI_COMM_WORLD
  int world_size = 1;
  ReplayMesh mesh;
  std::vector<Stream> streams;
  std::vector<ReplayBucket> buckets;        // index = Program bucket index
  std::int64_t shard_storage_elements = 0;  // fp32 elements of this rank's parameter shards
  std::int64_t persistent_bytes = 0;        // tracked: the schedule's program.persistent_bytes
  // Pipelines: this rank's messages (index = message id of send / receive), and the
  // streams they run on: from first_pipeline_stream (-1 without a pipeline), sends of
  // activations, sends of gradients, receives of activations, receives of gradients -- one
  // stream per direction and kind, so that each carries the messages of one neighbour in
  // the order both ends issue them (a blocking send, as NCCL's, then cannot deadlock).
  std::vector<ReplayMessage> messages;
  int first_pipeline_stream = -1;
  int send_stream(bool gradient) const { return first_pipeline_stream + (gradient ? 1 : 0); }
  int receive_stream(bool gradient) const { return first_pipeline_stream + (gradient ? 3 : 2); }
  bool operator==(const ReplayLayout&) const = default;
};

// Which of a bucket's buffers to read back (data checks).
enum class BucketBuffer {
  kGathered,   // all-gather receive: [shard * ranks] in the collective's layout
  kUnsharded,  // all-gather copy-out destination: each parameter's full tensor, padded,
               // parameter of slot s at ranks * s.offset
  kReduced,    // reduce-scatter receive: this rank's [shards_per_rank * shard] (after the
               // HSDP all-reduce when the bucket has one)
};

// What the step enqueued next checks as it runs (Backend::set_data_check). The bucket
// buffers and gradient shards are read back after the step instead; a TP collective's
// output is overwritten by the next one, so it is checked on its stream right after it.
struct DataCheck {
  // Each TP or CP collective of run_ops sends data_pattern::tp_input contents (written on
  // its stream before it; the check step is not measured) and compares what it received
  // with tp_expected.
  bool tp_collectives = false;
  // Test hook: overwrite element 0 of the output of this rank's n-th checked TP or CP
  // collective (0-based, in enqueue order) before checking it; -1 = none.
  int corrupt_tp_collective = -1;
};

// One step of a compute task's replay (Backend::run_ops), so that the task's tensor- and
// context-parallel collectives overlap its compute as the model prices them (OpOverlap,
// program.hpp; docs/validation.md "Overlap inside compute tasks").
struct OpStep {
  enum class Kind {
    kRun,    // run part of op `op` (op_part(op, parts)) on the stream: a kernel, or a
             // collective (a chunk of it) the stream waits for
    kStart,  // start part of collective `op` beside the stream (its side channel)
    kWait,   // the stream waits for the collective started last
  };
  Kind kind = Kind::kRun;
  std::size_t op = 0;  // index in the task's op list
  int parts = 1;       // the op is run in `parts` equal parts, this step one of them
  bool operator==(const OpStep&) const = default;
};
// One of `parts` equal parts of `op`, the op itself for parts == 1: a collective of
// bytes / parts (rounded up); a GEMM with m (else n, else k) divided; an attention op with
// its query heads divided in whole GQA groups or inside one group (the kv heads they
// read), else its batch, else its query heads across groups (with gcd(kv_heads, heads /
// parts) kv heads, more K/V than a share), else, with fewer heads than parts, heads x 4^j
// / parts heads over a sequence 2^j times shorter (j = 1..3, the same mask: 4^-j of the
// work, up to its diagonal blocks). nullopt when none of these is whole (e.g. 3 parts of
// 8 heads at batch 1).
std::optional<Op> op_part(const Op& op, int parts);
// The steps that run `ops` with `overlaps` (op_overlaps): each overlapped collective around
// its partner's parts, the partner in its parts, every other op whole in list order. At
// most one collective is started and not yet awaited at a time, and only the partner's
// parts run while it is. An overlap whose partner does not split (op_part) runs both ops
// whole in list order, and its collective's index is appended to `not_replayed` (may be
// null).
std::vector<OpStep> op_steps(const std::vector<Op>& ops, const std::vector<OpOverlap>& overlaps,
                             std::vector<std::size_t>* not_replayed = nullptr);

using EventId = int;
using BlockId = int;

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;  // "cpu" or "cuda"
  // Device, library versions: recorded in measured.json.
  virtual std::map<std::string, std::string> environment() const = 0;

  // Creates the streams, allocates the persistent state and the staging buffers, and
  // fills the parameter shards with data_pattern::param_value. Once, before any enqueue.
  virtual void prepare(const ReplayLayout& layout) = 0;

  // --- work, enqueued on `stream` (index into ReplayLayout::streams) ---
  // Compute ops with the op kernels; OpKind::kCollective ops (tensor and context
  // parallelism) as real collectives of op.bytes (the full buffer) over the TP or CP group,
  // on scratch buffers (TpCollective, data_check.hpp), as `steps` (op_steps) order them: a
  // started collective runs beside the stream (cpu: on a side thread; cuda: on a side
  // stream) until its kWait. Empty steps, or a step that checks TP collectives
  // (set_data_check), run the ops whole in list order. `task` names the task in data check
  // messages.
  virtual void run_ops(int stream, const std::vector<Op>& ops, const std::vector<OpStep>& steps,
                       const std::string& task) = 0;
  // All-gather bucket: parameter shards (fp32) -> send buffer in the bucket's dtype.
  // Reduce-scatter bucket: copies this rank's unsharded gradients into the send buffer.
  // The gradients (data_pattern::gradient_value, in the bucket layout) stand for the
  // backward's output: prepare() writes them once into a staging buffer, so the timed
  // copy-in is the byte copy FSDP does (and the model prices), not the pattern's arithmetic.
  virtual void copy_in(int stream, int bucket) = 0;
  // The bucket's collective over the shard group: MPI or NCCL all-gather / reduce-scatter
  // (sum).
  virtual void collective(int stream, int bucket) = 0;
  // HSDP: the reduce-scatter bucket's receive buffer all-reduced (sum, in place) across
  // the replica group.
  virtual void all_reduce(int stream, int bucket) = 0;
  // All-gather: receive buffer -> unsharded parameters. Reduce-scatter: receive buffer
  // added into the fp32 gradient shards.
  virtual void copy_out(int stream, int bucket) = 0;
  // Pipelines (a chunk keeping its parameters gathered over microbatches): this
  // microbatch's unsharded gradients of reduce-scatter `bucket` (the same pattern every
  // microbatch) into the bucket's accumulator -- copied when `first`, added otherwise, as
  // autograd accumulates .grad -- which its copy-in then reads. The default throws: a
  // backend without pipeline support.
  virtual void accumulate_gradients(int stream, int bucket, bool first);
  // Pipelines: the point-to-point message `message` (ReplayLayout::messages) on the
  // layout's stream for its kind and direction; receive completes when it arrived. cpu: a
  // send is issued and awaited by complete_sends (MPI_Isend); cuda: ncclSend occupies the
  // stream until the peer's receive is posted (complete_sends: nothing; stream order).
  // The defaults throw.
  virtual void send(int stream, int message);
  virtual void receive(int stream, int message);
  virtual void complete_sends(int stream);
  // A message buffer's raw bytes (data checks) / overwrite (fault injection).
  // REQUIRES: synchronize() returned.
  virtual std::vector<std::byte> read_message(int message);
  virtual void overwrite_message(int message, std::int64_t byte_offset,
                                 const std::vector<std::byte>& bytes);
  // A memory event: allocates (and touches) `bytes` of tracked memory / releases a block.
  virtual BlockId allocate(int stream, std::int64_t bytes) = 0;
  virtual void release(int stream, BlockId block) = 0;

  // --- events and synchronisation ---
  virtual EventId record(int stream) = 0;
  virtual void wait(int stream, EventId event) = 0;
  // Blocks until all enqueued work is done. Throws Error(kRuntime) for a failure in the
  // enqueued work (the first one).
  virtual void synchronize() = 0;
  // Seconds from `from` to `to`. REQUIRES: both recorded and synchronize() returned.
  virtual double elapsed_s(EventId from, EventId to) const = 0;
  // Forgets all events (ids restart at 0). REQUIRES: synchronize() returned.
  virtual void reset_events() = 0;

  // Units of enqueued work completed so far; the watchdog's sign of life. Thread-safe.
  virtual std::int64_t progress() const = 0;

  // --- memory ---
  virtual std::int64_t peak_tracked_bytes() const = 0;
  virtual void reset_peak() = 0;  // peak := tracked bytes now. REQUIRES: synchronized.
  virtual std::int64_t staging_bytes() const = 0;
  virtual std::int64_t kernel_workspace_bytes() const = 0;

  // --- data checks (--check-data) ---
  // Starts a check period for the work enqueued from now on (and forgets the failure of
  // an earlier one). REQUIRES: synchronize() returned.
  virtual void set_data_check(const DataCheck& check) = 0;
  // The first TP collective that received something other than tp_expected during the
  // check period (message from check_tp_output: the task, the op, the element); nullopt
  // when none did or none was checked. REQUIRES: synchronize() returned.
  virtual std::optional<std::string> tp_check_failure() = 0;

  // The raw bytes of a bucket buffer (decode with decode_bucket, data_check.hpp).
  // REQUIRES: synchronize() returned.
  virtual std::vector<std::byte> read_bucket(int bucket, BucketBuffer which) = 0;
  // Overwrites bytes of a bucket buffer at `byte_offset` (fault injection for tests of the
  // checks). REQUIRES: synchronize() returned, the bytes inside the buffer.
  virtual void overwrite_bucket(int bucket, BucketBuffer which, std::int64_t byte_offset,
                                const std::vector<std::byte>& bytes) = 0;
  // This rank's fp32 gradient shards, raw: ReplayLayout::shard_storage_elements floats,
  // a parameter's shards_per_rank shards from its ReplaySlot::storage_offset (what the
  // reduce-scatter copy-outs accumulate into). REQUIRES: synchronize() returned.
  virtual std::vector<std::byte> read_gradient_shards() = 0;
  // Overwrites bytes of them at `byte_offset` (fault injection). REQUIRES: synchronize()
  // returned, the bytes inside the shards.
  virtual void overwrite_gradient_shards(std::int64_t byte_offset,
                                         const std::vector<std::byte>& bytes) = 0;
};

// The cpu backend: worker threads per stream, Eigen kernels, MPI collectives on
// communicators split from MPI_COMM_WORLD per group and stream. REQUIRES: MPI initialized with
// MPI_THREAD_MULTIPLE (or a world of one rank).
std::unique_ptr<Backend> make_cpu_backend();
// The cuda backend on one GPU per rank (cuda_device_of_rank of its index on its node,
// `local_rank`; ranks of a node on one GPU stop, every one of the node, before NCCL starts:
// a collective over the node's ranks, every rank creates its backend): CUDA streams and
// events, cuBLAS kernels, NCCL communicators (per stream one of the world, unique id
// broadcast over MPI, split with ncclCommSplit into the shard, replica and TP groups),
// memory events from a cudaMallocAsync pool; `attention` picks the kernels' attention
// (KernelOptions::attention). Throws Error(kRuntime) when built without CUDA, with no
// device, or when the rank has no GPU of its own.
std::unique_ptr<Backend> make_cuda_backend(int local_rank,
                                           AttentionKernel attention = AttentionKernel::kAuto);
// CUDA devices visible; 0 when built without CUDA.
int cuda_backend_device_count();
// The device the cuda backend takes for a rank of index `local_rank` on its node among the
// `visible` devices it sees: its index modulo them -- its index where every GPU of the node
// is visible, device 0 where a launcher bound the rank one GPU (srun --gpus-per-task=1),
// its index among its own where it bound several. Ranks that land on one GPU are found by
// ranks_sharing_a_gpu.
int cuda_device_of_rank(int local_rank, int visible);
// The GPU a rank of a node would replay on, gathered over the node's ranks (raw bytes: a
// UUID may hold zeros).
struct GpuClaim {
  char usable = 0;              // 1 where the rank has a device and read its properties
  unsigned char uuid[16] = {};  // cudaDeviceProp::uuid
};
// Of a node's ranks' claims (indexed by node rank), the first pair of usable ones (i < j, by
// j then i) that are one GPU; none when every rank has its own.
std::optional<std::pair<int, int>> ranks_sharing_a_gpu(const std::vector<GpuClaim>& claims);

}  // namespace fsdptune

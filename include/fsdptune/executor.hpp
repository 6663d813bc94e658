// The executor: replays a schedule's Program on real hardware, one process per rank under
// mpirun / srun (DESIGN.md "Validation"), and measures it. Every function here is called
// by every rank (they communicate over MPI_COMM_WORLD).
#pragma once

#include <optional>
#include <string>

#include "fsdptune/backend.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/measured.hpp"
#include "fsdptune/schedule.hpp"

namespace fsdptune {

struct ExecutorOptions {
  std::string backend = "cpu";  // "cpu" or "cuda"
  int iterations = 10;          // measured steps (>= 1)
  int warmup = 3;               // untimed steps before them (>= 0)
  // One more untimed step before the warm-up, whose bucket buffers and fp32 gradient
  // shards are read back and checked after it, and whose TP collectives are checked as
  // they complete (data_check.hpp); a mismatch on any rank fails every rank.
  bool check_data = false;
  // A rank that makes no progress for this long aborts every rank (MPI_Abort).
  double timeout_s = 300;
  // Replay a schedule for a larger dp_shard on fewer ranks (docs/validation.md "Scaled-down
  // replay"): the world is dp_replicate * tp * a divisor of dp_shard, each rank holding
  // dp_shard / that shards.
  bool scale_down = false;
  std::string command;  // recorded in measured.json
  // Test hooks. stall_rank: that rank stops responding before the first step. On the last
  // rank, with check_data: corrupt_bucket: before the checks, overwrite one element of that
  // bucket's buffer; corrupt_gradient_shard: of the fp32 gradient shard of that
  // reduce-scatter bucket's first parameter; corrupt_tp_collective: of the output of the
  // n-th TP collective of the check step (0-based, in enqueue order), before it is checked.
  int stall_rank = -1;
  int corrupt_bucket = -1;
  int corrupt_gradient_shard = -1;
  int corrupt_tp_collective = -1;
};

// MPI for the lifetime of the object: MPI_Init_thread asking for MPI_THREAD_MULTIPLE (the
// cpu backend issues collectives from one thread per stream) and MPI_Finalize.
class MpiSession {
 public:
  MpiSession();
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_rank_; }  // rank among the ranks on this node

 private:
  int rank_ = 0;
  int world_size_ = 1;
  int local_rank_ = 0;
};

// Every rank passes its own outcome; when any rank has an error, every rank throws the
// error of the lowest failing rank, its `where` prefixed with "rank r: ".
void agree_on_errors(const std::optional<Error>& local_error);

// The run's mesh for `rank` of `world_size`: the schedule's [dp_replicate, dp_shard, tp]
// when world_size is their product; with `scale_down`, dp_shard divided by the factor that
// makes the product world_size (which must divide dp_shard). Throws Error(kBadInput)
// naming `source` and job.dp_shard (with the world sizes that would work) otherwise, and
// job.pp for pipeline-parallel schedules (not replayed: they need one Program per stage
// and point-to-point sends).
ReplayMesh replay_mesh(const ScheduleFile& schedule, int rank, int world_size, bool scale_down,
                       const std::string& source);

// Throws Error(kBadInput) naming `source` and the field when this executor cannot replay
// the schedule on `world_size` ranks: no mesh (replay_mesh), wire dtypes other than bf16 /
// fp32 (and fp8 for float8 all-gathers), unknown tasks, units or parameters, TP
// collectives whose group is not the job's tp.
void check_replayable(const ScheduleFile& schedule, int world_size, const std::string& source,
                      bool scale_down = false);

// The buckets with their parameters' wire dtypes, byte offsets and storage offsets, for
// `rank` of the run's `mesh` (rank = MPI_COMM_WORLD rank).
ReplayLayout make_replay_layout(const ScheduleFile& schedule, const Workload& workload, int rank,
                                const ReplayMesh& mesh);

// Replays the schedule (check step, warm-up, measured steps) on every rank after they
// agreed on the schedule hash. Returns the measured result; complete on rank 0 (others
// hold their own view). A failure after the replay started aborts every rank with
// MPI_Abort after printing the reason: there is no partial result.
// REQUIRES: check_replayable passed, an MpiSession alive.
MeasuredResult execute(const ScheduleFile& schedule, const ExecutorOptions& options,
                       const MpiSession& mpi);

}  // namespace fsdptune
